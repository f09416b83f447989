"""How pixels reach a head worker: the shared-memory arena (memfd) and its lifetimes, the pipe
fallback, and a request's images going out as one frame. The worker here is a real subprocess
with a fake model that fingerprints the pixels it received (tests/support/fake_head_worker.py)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from judge_gateway.config import validate_config
from judge_gateway.heads import supervisor
from judge_gateway.config import HeadOptions
from judge_gateway.heads.protocol import jobs_from_frame, jobs_header
from judge_gateway.heads.shm import Arena, ArenaView, memfd_supported
from judge_gateway.heads.supervisor import HeadError, HeadSupervisor
from judge_gateway.workers.framing import (
    ProtocolError,
    encode_frame,
    encode_head,
    read_frame,
)
from tests.support.fake_head_worker import fake_head_python

needs_memfd = pytest.mark.skipif(not memfd_supported(), reason="no memfd_create on this platform")


def _images(seed: int, shapes: list[tuple[int, int]]) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in shapes]


def _sha(arr: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def _open_memfds() -> list[str]:
    """This process's open memfds of head arenas."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/memfd:jg-head"):
            out.append(target)
    return out


def _dev_shm() -> set[str]:
    """Names in /dev/shm (where multiprocessing.shared_memory blocks would live)."""
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def _worker(tmp_path: Path, **options) -> HeadSupervisor:
    opts = HeadOptions(python=fake_head_python(tmp_path), restart_backoff_s=0.0,
                       env={"JG_FAKE_HEAD_MARK": str(tmp_path / "hang.mark")}, **options)
    return HeadSupervisor("fake", "clip", opts)


# -- the arena ---------------------------------------------------------------------------------


@needs_memfd
def test_arena_reuses_a_region_only_after_it_is_released():
    arena = Arena(4096)
    try:
        a, b, c = arena.alloc(1000), arena.alloc(1000), arena.alloc(1000)
        assert (a, b, c) == (0, 1024, 2048)  # 64-byte aligned, back to back, disjoint
        assert arena.alloc(2000) is None  # 1024 B left: no region over one in use
        arena.free(b)
        assert arena.alloc(2000) is None  # the freed gap (1024 B) is too small for 2000 B
        assert arena.alloc(1000) == 1024  # ... but takes a 1000 B region again
        arena.free(a)
        arena.free(1024)
        assert arena.alloc(2000) == 0  # two freed neighbours make one gap
        assert arena.high_water == 3072
        with pytest.raises(KeyError):
            arena.free(64)
        assert arena.alloc(5000) is None  # larger than the arena: never
    finally:
        arena.close()


@needs_memfd
def test_arena_write_is_read_back_bit_exactly_through_the_mapping():
    arena = Arena(1 << 20)
    try:
        imgs = _images(1, [(17, 23), (64, 48), (1, 1)])
        start = arena.alloc(sum(im.nbytes for im in imgs))
        assert arena.write(start, imgs) == sum(im.nbytes for im in imgs)
        view = ArenaView(os.dup(arena.fd), arena.size)  # what the worker maps
        off = start
        for im in imgs:
            got = view.array(off, (1, *im.shape))
            assert np.array_equal(got[0], im) and not got.flags.writeable
            off += im.nbytes
        with pytest.raises(ValueError):
            view.array(arena.size - 10, (1, 2, 2, 3))
    finally:
        arena.close()


def test_score_frame_carries_several_jobs_and_refuses_bad_ones_one_by_one():
    imgs = [im[None] for im in _images(2, [(5, 7), (3, 4)])]
    header, total = jobs_header([(1, "a", imgs[0].shape), (2, "b", imgs[1].shape)], "pipe")
    payload = b"".join(im.tobytes() for im in imgs)
    assert total == len(payload)
    got, bad = jobs_from_frame(*read_frame(io.BytesIO(encode_head(header, total) + payload)), None)
    assert not bad and [(j.msg_id, j.prompt) for j in got] == [(1, "a"), (2, "b")]
    assert all(np.array_equal(j.frames, im) for j, im in zip(got, imgs))
    header["jobs"][1]["offset"] = total  # outside the payload
    header["jobs"].append({"id": 3, "prompt": 7, "shape": [1, 1, 1, 3], "offset": 0})
    got, bad = jobs_from_frame(header, payload, None)
    assert [j.msg_id for j in got] == [1] and [i for i, _ in bad] == [2, 3]
    got, bad = jobs_from_frame({**header, "via": "shm"}, b"", None)  # a worker without an arena
    assert not got and [i for i, _ in bad] == [1, 2, 3] and "no arena" in bad[0][1]
    with pytest.raises(ProtocolError):  # the frame itself is unreadable
        jobs_from_frame({**header, "via": "carrier pigeon"}, b"", None)


# -- a real worker process ---------------------------------------------------------------------


@needs_memfd
@pytest.mark.parametrize("transport", ["shm", "pipe"])
async def test_a_request_goes_out_as_one_frame_and_arrives_bit_exactly(tmp_path, transport):
    """Ten concurrent infer calls (a request's samples, images of different sizes, 9 MB in all:
    the arena write runs on a thread) reach the worker in one frame, byte for byte, by shared
    memory or by the pipe."""
    w = _worker(tmp_path, transport=transport)
    imgs = _images(3, [(64, 48), (31, 17), (64, 48), (2, 3), (128, 96), (64, 48), (7, 7), (300, 200),
                       (1200, 1200), (1201, 1199)])
    assert sum(im.nbytes for im in imgs) > supervisor.THREAD_WRITE_BYTES
    try:
        await w.wait_ready()
        outs = await asyncio.gather(*(w.infer(im[None], f"p{i}") for i, im in enumerate(imgs)))
        stats = w.transport_stats()
    finally:
        await w.aclose()
    assert w.info["transport"] == transport == stats["transport"]
    for im, out in zip(imgs, outs):
        assert out[0]["sha256"] == _sha(im) and out[0]["shape"] == list(im.shape)
        assert out[0]["raw"] == float(im.astype(np.uint64).sum())
    assert stats[f"frames_{transport}"] == 1 and stats[f"bytes_{transport}"] == sum(im.nbytes for im in imgs)
    other = "pipe" if transport == "shm" else "shm"
    assert stats[f"frames_{other}"] == 0


@needs_memfd
async def test_a_full_arena_waits_for_released_regions_and_never_overwrites_one(tmp_path):
    """A 1 MiB arena (room for 3 images) and 24 concurrent requests of 270 KB each while the
    model is slow: the sender waits for regions the worker has answered, and every image still
    arrives intact."""
    w = _worker(tmp_path, shm_mb=1, max_batch_size=2, max_wait_ms=0)
    w.options.env["JG_FAKE_HEAD_SLEEP_S"] = "0.02"
    imgs = _images(4, [(300, 300)] * 24)
    try:
        await w.wait_ready()
        outs = await asyncio.gather(*(w.infer(im[None], "slow") for im in imgs))
        stats = w.transport_stats()
    finally:
        await w.aclose()
    assert [o[0]["sha256"] for o in outs] == [_sha(im) for im in imgs]
    assert stats["arena_waits"] > 0 and stats["frames_pipe"] == 0
    assert stats["arena_high_water"] <= stats["arena_bytes"] == 1 << 20


@needs_memfd
async def test_no_shared_memory_is_left_after_a_killed_worker_or_a_shutdown(tmp_path):
    shm_before, fds_before = _dev_shm(), _open_memfds()
    w = _worker(tmp_path)
    mark = tmp_path / "hang.mark"
    try:
        await w.wait_ready()
        assert len(_open_memfds()) == len(fds_before) + 1  # the arena of the running worker
        first_pid = w.pid
        hung = asyncio.ensure_future(w.infer(_images(5, [(64, 64)])[0][None], "hang"))
        for _ in range(500):  # until the worker is inside the batch
            if mark.exists():
                break
            await asyncio.sleep(0.01)
        assert mark.exists()
        os.kill(first_pid, signal.SIGKILL)
        with pytest.raises(HeadError, match="crashed"):
            await hung
        await w.wait_ready()  # restarted, with a fresh arena; the old one is closed
        assert w.pid != first_pid and len(_open_memfds()) == len(fds_before) + 1
        im = _images(6, [(40, 30)])[0]
        assert (await w.infer(im[None], "p"))[0]["sha256"] == _sha(im)
        assert w.restarts == 1 and w.transport == "shm"
    finally:
        await w.aclose()
    # The arena is an anonymous memfd: gone once our fd is closed and the worker's mapping ended;
    # it never had a /dev/shm name (other processes on the machine may add theirs meanwhile).
    assert _open_memfds() == fds_before
    # (`sem.mp-<random>`: a multiprocessing semaphore of any process, whose random name may hold "jg")
    assert not [n for n in _dev_shm() - shm_before
                if ("jg" in n or "fake" in n) and not n.startswith("sem.mp-")]


async def test_without_memfd_the_pipe_carries_the_pixels_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(supervisor, "memfd_supported", lambda: False)
    w = _worker(tmp_path)
    im = _images(7, [(50, 60)])[0]
    try:
        await w.wait_ready()
        out = await w.infer(im[None], "p")
        stats = w.transport_stats()
    finally:
        await w.aclose()
    assert out[0]["sha256"] == _sha(im)
    assert w.info["transport"] == "pipe" and "memfd" in w.info["transport_error"]
    assert stats["frames_pipe"] == 1 and stats["frames_shm"] == 0


@needs_memfd
def test_a_worker_that_cannot_map_the_arena_falls_back_to_the_pipe(tmp_path):
    """The worker side of the fallback: an arena it cannot map makes it report "pipe"."""
    import threading

    from judge_gateway.heads import worker
    from tests.support.fake_head_worker import FingerprintHead

    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    rc: list[int] = []
    orig = worker.build_head
    worker.build_head = lambda kind, options: FingerprintHead(kind, options)
    try:
        with os.fdopen(in_r, "rb") as stdin, os.fdopen(out_w, "wb", buffering=0) as stdout:
            t = threading.Thread(target=lambda: rc.append(worker.serve(stdin, stdout)))
            t.start()
            with os.fdopen(in_w, "wb", buffering=0) as send, os.fdopen(out_r, "rb") as recv:
                send.write(encode_frame({"op": "init", "kind": "clip", "name": "f", "options": {},
                                         "arena": {"fd": 987654, "size": 4096}}))
                ready = read_frame(recv)[0]
                im = _images(8, [(4, 5)])[0][None]
                header, total = jobs_header([(1, "p", im.shape)], "pipe")
                send.write(encode_head(header, total) + im.tobytes())
                result = read_frame(recv)[0]
                send.close()
                t.join(10)
    finally:
        worker.build_head = orig
    assert ready["info"]["transport"] == "pipe" and "arena" in ready["info"]["transport_error"]
    assert result["ok"] and result["outputs"][0]["sha256"] == _sha(im[0]) and rc == [0]


@needs_memfd
async def test_a_gateway_request_of_32_images_is_one_shared_memory_frame_and_says_so(tmp_path):
    from judge_gateway.gateway import Gateway
    from judge_gateway.media import ImageMedia
    from judge_gateway.schema import RewardRequest

    cfg = {"judges": {"fp": {"kind": "clip", "options": {"python": fake_head_python(tmp_path)}}}}
    gw = Gateway(validate_config(cfg))
    imgs = _images(9, [(64, 48)] * 32)
    samples = [{"prompt": "a cat", "image": ImageMedia.from_array(im)} for im in imgs]
    try:
        await gw.judges["fp"].worker.wait_ready()
        resp = await gw.score(RewardRequest(samples=samples))
        stats = gw.judges["fp"].worker.transport_stats()
    finally:
        await gw.aclose()
    scores = [r.scores["fp"] for r in resp.results]
    assert all(s.valid for s in scores)
    assert [s.raw for s in scores] == [float(im.astype(np.uint64).sum()) for im in imgs]
    assert {s.details["head"]["transport"] for s in scores} == {"shm"}
    assert stats["frames_shm"] == 1 and stats["bytes_shm"] == 32 * 64 * 48 * 3


@needs_memfd
async def test_a_caller_that_gives_up_leaves_its_region_to_the_worker_until_it_answers(tmp_path):
    """A request cancelled (its deadline) after its frame went out: the worker may still be reading
    the pixels, so the region stays reserved until the worker answers, then is free again."""
    w = _worker(tmp_path, max_wait_ms=0)
    started = tmp_path / "slow.started"
    # the worker is inside the batch (it wrote `started`) before the caller gives up: a cancel that
    # arrived before the batch ran would drop it unrun and answer at once, freeing the region
    w.options.env.update({"JG_FAKE_HEAD_SLEEP_S": "3", "JG_FAKE_HEAD_STARTED": str(started)})
    try:
        await w.wait_ready()
        call = asyncio.ensure_future(w.infer(_images(11, [(100, 100)])[0][None], "slow"))
        for _ in range(3000):
            if started.exists():
                break
            await asyncio.sleep(0.01)
        assert started.exists()
        call.cancel()
        await asyncio.sleep(0.05)
        assert w.transport_stats()["arena_in_use"] == 30016  # 100 x 100 x 3, 64-byte aligned
        for _ in range(3000):
            if w.transport_stats()["arena_in_use"] == 0:
                break
            await asyncio.sleep(0.01)
        assert w.transport_stats()["arena_in_use"] == 0  # released by the worker's (unread) answer
        im = _images(12, [(20, 20)])[0]
        assert (await w.infer(im[None], "p"))[0]["sha256"] == _sha(im)
    finally:
        await w.aclose()
