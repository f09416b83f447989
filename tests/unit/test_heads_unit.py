"""Head pieces that need no torch: OCR target text and reward, pooling, the framed protocol,
the micro-batcher, the text-embedding cache, config validation of head judges."""

from __future__ import annotations

import io
import os
import queue
import threading
import time

import numpy as np
import pytest

from judge_gateway.config import ConfigError, validate_config
from judge_gateway.heads.batcher import Control, Job, MicroBatcher
from judge_gateway.heads.ocr_text import extract_target_text, is_blank_target, levenshtein, ocr_reward
from judge_gateway.heads.pooling import pool_scores
from judge_gateway.heads.protocol import images_from_payload, images_header
from judge_gateway.heads.models.text_cache import TextEmbeddingCache
from judge_gateway.workers.framing import ProtocolError, encode_frame, read_frame
from tests.support.worker_pipes import worker_on_pipes


@pytest.mark.parametrize("prompt, target", [
    ('a sign that says "Hello World"', "Hello World"),
    ("a sign that says 'Hello World' in red", "Hello World"),
    ("a neon sign \u201cOpen 24h\u201d at night", "Open 24h"),
    ("a poster \u2018Don\u2019t Panic\u2019", "Don\u2019t Panic"),
    ("a mug saying 'don't panic' on a desk", "don't panic"),
    ('first "A" then "B"', "A"),
    ("don't stop me now", None),
    ("a red bicycle", None),
    ('an empty sign ""', ""),  # blank: the judge calls it not_applicable (is_blank_target)
    # cosmos-rl's prompt.split('"')[1]: one double quote, the rest of the prompt is the target
    ('a sign that says "Hello World', "Hello World"),
    ('a sign " Open ', " Open "),  # as written: its spaces count in the reward's length
])
def test_target_text_from_quotes(prompt, target):
    assert extract_target_text(prompt) == target


def test_blank_targets_are_ascii_spaces_only_as_cosmos_rl_reads_them():
    assert is_blank_target("") and is_blank_target("   ")
    assert not is_blank_target("\t") and not is_blank_target("\u00a0")  # cosmos-rl strips " " only


def test_ocr_reward_matches_the_reference_formula():
    assert ocr_reward("Hello World", [])[0] == pytest.approx(1 - 10 / 11)  # the reference's example
    assert ocr_reward("Hello World", ["hello", "world"])[0] == 1.0  # case and spaces ignored
    assert ocr_reward("Hello", ["Big Hello World sign"])[0] == 1.0  # substring
    reward, details = ocr_reward("Hello World", ["Hallo World"])
    assert reward == pytest.approx(1 - 1 / 11) and details["edit_distance"] == 1
    assert ocr_reward("ab", ["xyzxyzxyz"])[0] == 0.0  # distance clipped to the target length
    assert levenshtein("kitten", "sitting") == 3
    # cosmos-rl removes ASCII spaces only (model/ocr.py 56-57): a tab in the target stays a character
    assert ocr_reward("Hello\tWorld", ["Hello World"])[0] == pytest.approx(1 - 1 / 11)


def test_pooling():
    assert pool_scores([1, 2, 6], "mean") == 3
    assert pool_scores([1, 2, 6], "min") == 1
    assert pool_scores([1, 2, 6, 4], "topk_mean", 2) == 5
    with pytest.raises(ValueError):
        pool_scores([], "mean")
    with pytest.raises(ValueError):
        pool_scores([1.0, float("nan")], "mean")


def test_frames_roundtrip_without_pickle():
    frames = np.arange(2 * 3 * 4 * 3, dtype=np.uint8).reshape(2, 3, 4, 3)
    data = encode_frame({"op": "score", "id": 7, "prompt": "p", **images_header(frames)}, frames.tobytes())
    header, payload = read_frame(io.BytesIO(data))
    assert header["id"] == 7 and header["prompt"] == "p"
    assert np.array_equal(images_from_payload(header, payload), frames)
    assert read_frame(io.BytesIO(b"")) is None


def test_malformed_frames_are_refused():
    with pytest.raises(ProtocolError):
        read_frame(io.BytesIO(encode_frame({"op": "x"})[:-2]))  # cut inside the frame
    with pytest.raises(ProtocolError):
        images_from_payload({"shape": [1, 2, 2, 3], "dtype": "uint8"}, b"\0" * 5)  # size mismatch
    with pytest.raises(ProtocolError):
        images_from_payload({"shape": [1, 2, 2, 3], "dtype": "float32"}, b"\0" * 12)
    with pytest.raises(ValueError):
        images_header(np.zeros((2, 2, 3), dtype=np.uint8))


def _job(i: int, n: int = 1) -> Job:
    return Job(msg_id=i, frames=np.full((n, 2, 2, 3), i, dtype=np.uint8), prompt=f"p{i}")


def test_batcher_collects_concurrent_jobs_up_to_the_batch_size():
    calls: list[int] = []

    def infer(images, prompts):
        calls.append(len(images))
        return [{"raw": float(im[0, 0, 0]), "prompt": p} for im, p in zip(images, prompts)]

    b = MicroBatcher(infer, max_batch_size=4, max_wait_ms=50)
    q: queue.Queue = queue.Queue()
    for i in range(3):
        q.put(_job(i, n=2))  # 6 items
    jobs, others = b.collect(q)
    assert [j.msg_id for j in jobs] == [0, 1] and not others  # stops once 4 items are held
    out = b.run(jobs)
    assert calls == [4] and [o["raw"] for o in out[1]] == [1.0, 1.0] and out[1][0]["prompt"] == "p1"


def test_batcher_waits_at_most_max_wait_and_keeps_controls_in_order():
    b = MicroBatcher(lambda ims, ps: [{} for _ in ims], max_batch_size=64, max_wait_ms=30)
    q: queue.Queue = queue.Queue()
    q.put(_job(1))
    t0 = time.monotonic()
    jobs, _ = b.collect(q)
    assert len(jobs) == 1 and 0.02 < time.monotonic() - t0 < 1.0
    q.put(_job(2))
    q.put(Control(msg_id=3, op="stats"))
    q.put(_job(4))
    jobs, others = b.collect(q)
    assert [j.msg_id for j in jobs] == [2] and others[0].msg_id == 3


def test_batcher_isolates_a_bad_job():
    def infer(images, prompts):
        if "bad" in prompts:
            raise ValueError("cannot score this one")
        return [{"raw": 1.0} for _ in images]

    b = MicroBatcher(infer, max_batch_size=8, max_wait_ms=0)
    out = b.run([_job(1), Job(msg_id=2, frames=np.zeros((1, 2, 2, 3), np.uint8), prompt="bad"), _job(3)])
    assert isinstance(out[2], ValueError) and out[1] == [{"raw": 1.0}] and out[3] == [{"raw": 1.0}]


def test_batcher_stages_preparation_per_slice_and_isolates_a_bad_one():
    prepared_slices: list[list[str]] = []

    def prepare(images, prompts):
        if "bad" in prompts:
            raise ValueError("cannot preprocess this one")
        prepared_slices.append(list(prompts))
        return [int(im[0, 0, 0]) * 10 for im in images]

    def infer(images, prompts, prepared):
        assert len(prepared) == len(images)
        return [{"raw": float(v)} for v in prepared]

    b = MicroBatcher(infer, max_batch_size=2, max_wait_ms=0, prepare=prepare)
    jobs = [_job(1), _job(2), _job(3)]
    staged = b.stage(jobs)
    assert staged is not None and len(staged.slices) == 2 and prepared_slices == [["p1", "p2"], ["p3"]]
    out = b.run(jobs, staged)
    assert out == {1: [{"raw": 10.0}], 2: [{"raw": 20.0}], 3: [{"raw": 30.0}]}
    assert b.stats()["prepare_s"] >= 0 and b.stats()["items"] == 3
    bad = Job(msg_id=9, frames=np.zeros((1, 2, 2, 3), np.uint8), prompt="bad")
    out = b.run([_job(4), bad], b.stage([_job(4), bad]))
    assert out[4] == [{"raw": 40.0}] and isinstance(out[9], ValueError)


@pytest.mark.parametrize("overlap", [True, False])
def test_worker_prepares_the_next_batch_while_the_current_one_runs(monkeypatch, overlap):
    """With overlap, the stager thread preprocesses batch k+1 while batch k is in its forward
    pass: the first forward waits for the second batch's preparation, which could not happen
    without the overlap. Without it (the cpu default) the stages take turns on one thread."""
    from judge_gateway.heads import worker
    from judge_gateway.heads.models.base import HeadModel

    second_prepared = threading.Event()
    overlapped: list[bool] = []

    class StagedHead(HeadModel):
        def load(self):
            return {"model": "staged-fake"}

        def prepare(self, images, prompts):
            if "second" in prompts:
                second_prepared.set()
            return [int(im[0, 0, 0]) for im in images]

        def infer(self, images, prompts, prepared=None):
            if "first" in prompts:
                overlapped.append(second_prepared.wait(timeout=10 if overlap else 0.2))
            return [{"raw": float(v)} for v in prepared]

    monkeypatch.setattr(worker, "build_head", lambda kind, options: StagedHead(kind, options))
    with worker_on_pipes(join_s=10) as (send, recv, rc):
        send.write(encode_frame({"op": "init", "kind": "clip", "name": "f",
                                 "options": {"max_batch_size": 1, "max_wait_ms": 0,
                                             "overlap_preprocessing": overlap}}))
        assert read_frame(recv)[0]["op"] == "ready"
        for i, prompt in ((1, "first"), (2, "second")):
            frames = np.full((1, 2, 2, 3), i, np.uint8)
            send.write(encode_frame({"op": "score", "id": i, "prompt": prompt, **images_header(frames)},
                                    frames.tobytes()))
        results = {h["id"]: h for h, _ in (read_frame(recv), read_frame(recv))}
        send.write(encode_frame({"op": "stats", "id": 3}))
        stats = read_frame(recv)[0]
    assert overlapped == [overlap] and rc == [0]
    assert results[1]["outputs"] == [{"raw": 1.0}] and results[2]["outputs"] == [{"raw": 2.0}]
    assert stats["op"] == "stats" and stats["stats"]["items"] == 2


def test_text_cache_encodes_each_prompt_once_and_evicts_lru():
    encoded: list[list[str]] = []

    def encode(prompts):
        encoded.append(list(prompts))
        return [f"emb:{p}" for p in prompts]

    cache = TextEmbeddingCache(capacity=2)
    assert cache.get_many(["a"] * 8, encode) == ["emb:a"] * 8
    assert cache.get_many(["a", "b"], encode) == ["emb:a", "emb:b"]
    assert encoded == [["a"], ["b"]] and cache.hits == 1
    cache.get_many(["c"], encode)  # evicts "a", the least recently used
    cache.get_many(["a"], encode)
    assert encoded[-1] == ["a"] and cache.stats()["text_encoded"] == 4


def test_head_config_validates_and_names_the_key():
    ok = validate_config({"judges": {"pick": {"kind": "pickscore", "options": {
        "device": "cuda:1", "dtype": "bf16", "max_batch_size": 16, "pooling": "topk_mean", "top_k": 2}}}})
    assert ok.judge_options("pick").device == "cuda:1"
    cases = [
        ({"kind": "clip", "options": {"device": "gpu0"}}, "judges.h.options.device"),
        ({"kind": "clip", "options": {"dtype": "int8"}}, "judges.h.options.dtype"),
        ({"kind": "hpsv2", "options": {"max_batch_size": 0}}, "judges.h.options.max_batch_size"),
        ({"kind": "ocr", "options": {"pooling": "max"}}, "judges.h.options.pooling"),
        ({"kind": "ocr", "options": {"checkpoint": "x"}}, "judges.h.options.checkpoint"),
        ({"kind": "clip", "backend": "b", "options": {}}, "judges.h.backend"),
        ({"kind": "clip_score"}, "judges.h.kind"),
    ]
    for judge, key in cases:
        with pytest.raises(ConfigError) as err:
            validate_config({"judges": {"h": judge}})
        assert key in str(err.value), (key, str(err.value))


async def test_a_missing_interpreter_is_a_head_error_not_a_crash(tmp_path, caplog):
    """The cell and readiness say the interpreter could not be run; its path is the operator's and
    goes to the gateway's log only."""
    from judge_gateway.gateway import Gateway
    from judge_gateway.schema import RewardRequest
    from tests.conftest import png_bytes

    cfg = {"judges": {"clip": {"kind": "clip", "options": {"python": str(tmp_path / "no-python")}}}}
    gw = Gateway(validate_config(cfg))
    try:
        response = await gw.score(RewardRequest(samples=[{"prompt": "a cat", "image": png_bytes(1)}]))
        s = response.results[0].scores["clip"]
        assert not s.valid and s.error.code.value == "head_error"
        assert "interpreter could not be run" in s.error.message and "no-python" not in s.error.message
        ready, reason = (await gw.readiness(fresh=True))["clip"]
        assert not ready and "interpreter could not be run" in reason and str(tmp_path) not in reason
        assert str(tmp_path / "no-python") in caplog.text
    finally:
        await gw.aclose()


def test_every_gateway_side_head_module_needs_no_torch():
    """The gateway (judge_gateway.gateway) loads in its venv without torch; heads/ holds
    gateway-side and worker-side modules side by side: the gateway side of every family (and the
    package faces it passes through) loads without torch too."""
    import subprocess
    import sys

    gateway_side = ["judge_gateway.gateway", "judge_gateway.heads", "judge_gateway.heads.judge", "judge_gateway.heads.supervisor",
                    "judge_gateway.heads.protocol", "judge_gateway.heads.shm", "judge_gateway.heads.pooling",
                    "judge_gateway.heads.ocr_text",
                    "judge_gateway.heads.geneval.judge", "judge_gateway.heads.geneval.rules",
                    "judge_gateway.heads.videoalign.judge", "judge_gateway.heads.videoalign.config",
                    "judge_gateway.heads.models", "judge_gateway.heads.preprocess"]
    code = (f"import importlib, sys\nfor m in {gateway_side!r}:\n    importlib.import_module(m)\n"
            "sys.exit('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


async def test_a_non_finite_head_output_is_an_invalid_head_error_not_a_valid_null():
    """An fp16 head that overflows gives NaN / inf: the cell is invalid, never `valid: true` with
    a JSON null (or inf) reward."""
    from judge_gateway.gateway import Gateway
    from judge_gateway.schema import RewardRequest
    from tests.conftest import png_bytes

    class NanWorker:
        info = {"model": "stub", "pid": 0}

        def ensure_started(self):
            pass

        def readiness(self):
            return True, None

        async def infer(self, frames, prompt):
            return [{"raw": float(prompt)} for _ in range(len(frames))]

        async def aclose(self):
            pass

    gw = Gateway(validate_config({"judges": {"c": {"kind": "clip"}}}))
    gw.judges["c"].worker = NanWorker()  # type: ignore[attr-defined]
    try:
        resp = await gw.score(RewardRequest(samples=[{"prompt": p, "image": png_bytes(1)}
                                                     for p in ("nan", "inf", "0.25")]))
    finally:
        await gw.aclose()
    nan, inf, ok = (r.scores["c"] for r in resp.results)
    for bad in (nan, inf):
        assert not bad.valid and bad.error.code.value == "head_error" and "non-finite" in bad.error.message
    assert ok.valid and ok.reward == 0.25


def test_reference_preprocessing_runs_in_processes_while_the_forward_thread_has_none(monkeypatch):
    """A staged head whose transform runs in ProcessPreprocessor: every image is transformed in
    another process, and while a batch is in its forward pass (overlap on, as on a GPU), the
    worker process runs no preprocessing threads (the old pool's were `preprocess_*`)."""
    from judge_gateway.heads import worker
    from judge_gateway.heads.models.base import HeadModel
    from judge_gateway.heads.preprocess.pool import ProcessPreprocessor, TransformSpec

    pool = ProcessPreprocessor(TransformSpec("tests.support.fake_transforms:where_it_ran", {"scale": 10}), 2)
    seen_threads: list[set[str]] = []

    class PooledHead(HeadModel):
        def load(self):
            pool.start()
            return {"model": "pooled-fake"}

        def prepare(self, images, prompts):
            return [row for part in pool.map(images) for row in part]

        def infer(self, images, prompts, prepared=None):
            seen_threads.append({t.name for t in threading.enumerate()})
            return [{"raw": float(p["value"]), "details": {"pid": p["pid"]}} for p in prepared]

        def close(self):
            pool.close()

    monkeypatch.setattr(worker, "build_head", lambda kind, options: PooledHead(kind, options))
    monkeypatch.setattr(worker.atexit, "register", lambda fn: None)  # closed below, not at pytest's exit
    with worker_on_pipes() as (send, recv, rc):
        send.write(encode_frame({"op": "init", "kind": "clip", "name": "f",
                                 "options": {"max_batch_size": 4, "max_wait_ms": 0,
                                             "overlap_preprocessing": True}}))
        assert read_frame(recv)[0]["op"] == "ready"
        for i in range(3):
            frames = np.stack([np.full((6, 5, 3), i * 4 + k, np.uint8) for k in range(4)])
            send.write(encode_frame({"op": "score", "id": i, "prompt": "p", **images_header(frames)},
                                    frames.tobytes()))
        results = {h["id"]: h for h, _ in (read_frame(recv) for _ in range(3))}
    pool.close()
    assert rc == [0]
    for i in range(3):
        out = results[i]["outputs"]
        assert [o["raw"] for o in out] == [10.0 * (i * 4 + k) for k in range(4)]
        assert all(o["details"]["pid"] != os.getpid() for o in out)
    assert pool.pids and os.getpid() not in pool.pids
    assert seen_threads and all(not any("preprocess" in name for name in names) for names in seen_threads)


def test_preprocess_options_are_typed_and_the_old_thread_option_is_refused():
    from judge_gateway.config import PickScoreOptions

    assert PickScoreOptions(device="cuda:0").preprocess_mode() == "device"
    assert PickScoreOptions(device="cpu").preprocess_mode() == "reference"
    assert PickScoreOptions(device="cuda", preprocess="reference").preprocess_mode() == "reference"
    with pytest.raises(ValueError, match="preprocess_processes"):
        PickScoreOptions(preprocess_threads=4)
    with pytest.raises(ValueError):
        PickScoreOptions(preprocess="gpu")
    with pytest.raises(ValueError):
        PickScoreOptions(preprocess_processes=0)


@pytest.mark.parametrize("kind", ["hpsv3", "videoalign"])
def test_qwen2_vl_heads_prepare_on_their_device_by_default_on_cuda(kind):
    """hpsv3 and videoalign take `preprocess` too (no processes: their reference transform runs
    in the worker); the default follows the device like the CLIP family's."""
    from judge_gateway.heads.factory import head_options
    from judge_gateway.heads.models.base import HeadLoadError

    assert head_options(kind, {"device": "cuda:0"}).preprocess_mode() == "device"
    assert head_options(kind, {"device": "cpu"}).preprocess_mode() == "reference"
    assert head_options(kind, {"device": "cuda", "preprocess": "reference"}).preprocess_mode() == "reference"
    assert head_options(kind, {"preprocess": "device"}).preprocess_mode() == "device"
    with pytest.raises(HeadLoadError, match="preprocess_processes: Extra inputs are not permitted"):
        head_options(kind, {"preprocess_processes": 2})


def test_a_failing_transform_fails_its_batch_and_the_pool_keeps_serving():
    """An image the transform refuses fails that batch (its exception, named); the next batches,
    larger ones too (the shared blocks grow), are transformed as usual by the same processes."""
    from judge_gateway.heads.preprocess.pool import ProcessPreprocessor, TransformSpec

    pool = ProcessPreprocessor(TransformSpec("tests.support.fake_transforms:mean_or_fail"), 2)
    try:
        pool.start()
        assert pool.item == ((1,), "<f8")  # one float64 per image, written into the output block
        good = [np.full((4, 4, 3), v, np.uint8) for v in (1, 2, 3)]
        assert pool.map(good)[0].tolist() == [[1.0], [2.0], [3.0]]
        with pytest.raises(ValueError, match="all-255 image refused"):
            pool.map([*good, np.full((4, 4, 3), 255, np.uint8)])
        big = [np.full((900, 700, 3), v, np.uint8) for v in range(6)]  # > the 1 MiB first block
        assert pool.map(big)[0].ravel().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        assert pool.pids and os.getpid() not in pool.pids
    finally:
        pool.close()


def test_cosine_in_the_model_dtype_is_flow_factorys_transformers_arithmetic():
    from pydantic import ValidationError

    from judge_gateway.config.head_options import ClipOptions

    assert ClipOptions(dtype="bf16", cosine_dtype="model").cosine_dtype == "model"
    with pytest.raises(ValidationError, match="library = 'transformers'"):
        ClipOptions(library="open_clip", model="ViT-L-14", cosine_dtype="model")
