"""Gateway side of a head: feed one worker process, supervised by workers/supervisor.py.

The worker runs `python -m judge_gateway.heads.worker` under the head's configured interpreter.
Requests go out as frames (workers/framing.py) on its stdin; results come back on its stdout and
resolve futures by id. Score requests are coalesced: every `infer` call made in one turn of
the event loop (a request's samples) goes out in one frame, the pixels written into the worker's shared-memory
arena (shm.py) with one `pwritev`, or through the pipe where no arena could be had. When the
worker dies, every in-flight request fails with HeadError (never hangs) and the worker is
restarted with an exponential back-off. A model that fails to load marks the head failed with
the worker's reason; the next request after `retry_failed_load_s` tries again.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import KINDS, HeadOptions
from ..workers.framing import MAX_HEADER_BYTES, encode_frame, encode_head
from ..extras import install_command
from ..workers.supervisor import Launch, WorkerError, WorkerSupervisor
from .protocol import HeadItem, ItemsJob, images_header, jobs_header
from .shm import Arena, memfd_supported

# The judge_gateway package this gateway runs: its workers import this same package (below).
PACKAGE_DIR = Path(__file__).resolve().parents[1]
_package_path: str | None = None


def package_path_entry() -> str:
    """A private folder holding nothing but a link to PACKAGE_DIR, for the worker's PYTHONPATH.

    Whatever interpreter runs a head (the gateway's own, or a head venv with torch), its worker
    then imports the very package the gateway runs, so the two always speak the same protocol;
    nothing else of the gateway's environment leaks in (putting the package's parent folder on
    the path would add a repository checkout's other folders, or a whole site-packages of
    another venv, ahead of the head venv's own packages). The head's interpreter provides
    judge-gateway's dependencies (installing judge-gateway there gives them). Made once per
    process with mkdtemp (private to this user), removed at exit."""
    global _package_path
    if _package_path is None:
        folder = tempfile.mkdtemp(prefix="judge-gateway-pkg-")
        os.symlink(PACKAGE_DIR, os.path.join(folder, "judge_gateway"))
        atexit.register(shutil.rmtree, folder, True)
        _package_path = folder
    return _package_path


class HeadError(WorkerError):
    """The worker could not produce a result for a request (crashed, failed to load, refused).
    `crashed`: the worker died with the item in flight; it respawns, so scoring again can work."""


@dataclass
class _Outgoing:
    """A scoring job waiting for the sender: one `infer` call (frames and a prompt) or one
    `infer_items` call (a brought head's samples)."""

    msg_id: int
    prompt: str
    frames: np.ndarray  # C-contiguous uint8 [n, H, W, 3]
    fut: asyncio.Future[Any]
    items: list[HeadItem] | None = None
    header_bytes: int = 0  # what its description adds to a frame's JSON header (items: their metadata)

    @property
    def arrays(self) -> list[np.ndarray]:
        return [a for item in self.items for a in item.arrays()] if self.items is not None else [self.frames]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)

    def described(self) -> tuple[int, str, tuple[int, ...]] | ItemsJob:
        if self.items is not None:
            return ItemsJob.of(self.msg_id, self.items)
        return self.msg_id, self.prompt, self.frames.shape


# The pipe carries at most this much per frame; bigger batches go as several frames.
PIPE_FRAME_BYTES = 64 * 1024 * 1024
# A frame's jobs describe themselves in its JSON header (a brought head's items with their
# metadata): jobs whose descriptions would pass this go in the next frame.
HEADER_BUDGET_BYTES = MAX_HEADER_BYTES // 2
ITEM_HEADER_BYTES = 512  # an item's description besides its metadata, at most
# Frames at least this large are written into the arena on a thread (pwritev drops the GIL).
THREAD_WRITE_BYTES = 8 * 1024 * 1024


class HeadSupervisor(WorkerSupervisor):
    error_type = HeadError
    crash_why = "worker crashed while scoring"

    def __init__(self, name: str, kind: str, options: HeadOptions) -> None:
        super().__init__(f"head {name!r}", startup_timeout_s=options.startup_timeout_s,
                         restart_backoff_s=options.restart_backoff_s,
                         retry_failed_load_s=options.retry_failed_load_s)
        self.name = name
        self.kind = kind
        self.options = options
        # Sending side of the running worker process (see on_ready / _send_loop).
        self._outbox: list[_Outgoing] = []
        self._wake: asyncio.Event | None = None
        self._sender: asyncio.Task[None] | None = None
        self._arena: Arena | None = None
        self._arena_error: str | None = None
        self._job_region: dict[int, int] = {}  # job id -> start of its frame's region
        self._region_refs: dict[int, int] = {}  # region start -> jobs not answered yet
        self.transport_counts = {"frames_shm": 0, "frames_pipe": 0, "bytes_shm": 0, "bytes_pipe": 0,
                                 "arena_waits": 0}
        # Called each time a worker process is ready (a colocated head's unit: heads/residency.py).
        self.ready_listeners: list[Callable[[], None]] = []

    # -- public API ----------------------------------------------------------------------------
    @property
    def transport(self) -> str:
        """How pixels reach the running worker: "shm" or "pipe"."""
        return str(self.info.get("transport", "pipe"))

    def transport_stats(self) -> dict[str, Any]:
        arena = self._arena
        return {"transport": self.transport, **self.transport_counts,
                "arena_bytes": arena.size if arena else 0, "arena_in_use": arena.in_use if arena else 0,
                "arena_high_water": arena.high_water if arena else 0}

    async def infer(self, frames: np.ndarray, prompt: str) -> list[dict[str, Any]]:
        """Per-frame outputs of the model for uint8 [n, H, W, 3] frames and one prompt."""
        await self.wait_ready()
        images_header(frames)  # refuse anything but uint8 [n, H, W, 3] here, not in the worker
        return await self._submit(prompt, np.ascontiguousarray(frames), None, len(frames))

    async def infer_items(self, items: list[HeadItem]) -> list[dict[str, Any]]:
        """A brought head's outputs, one per item (a groupwise head's items are one group)."""
        if not items:
            return []
        await self.wait_ready()
        for item in items:
            for arr in item.arrays():
                images_header(arr)
        items = [_contiguous(item) for item in items]
        described = sum(ITEM_HEADER_BYTES + len(json.dumps(item.metadata)) for item in items)
        return await self._submit("", items[0].frames, items, len(items), described)

    async def _submit(self, prompt: str, frames: np.ndarray, items: list[HeadItem] | None,
                      expected: int, header_bytes: int = 0) -> list[dict[str, Any]]:
        self.running()  # ready: on_ready set _wake before the state became ready
        assert self._wake is not None
        msg_id, fut = self.new_request()
        # The sender wakes after the other ready tasks of this loop turn: a request's samples
        # that reach this point together go out in one frame.
        self._outbox.append(_Outgoing(msg_id, prompt, frames, fut, items, header_bytes))
        self._wake.set()
        try:
            reply, _ = await fut
        except asyncio.CancelledError:
            self._cancel_job(msg_id)
            raise
        finally:
            self.forget(msg_id)
        if not reply.get("ok"):
            raise HeadError(f"head {self.name!r}: {reply.get('error', 'unknown error')}")
        outputs = reply.get("outputs")
        if not isinstance(outputs, list) or len(outputs) != expected:
            raise HeadError(f"head {self.name!r} returned a malformed result")
        return outputs

    def _cancel_job(self, msg_id: int) -> None:
        """Its caller gave up (client gone): a job not sent yet is skipped by the sender; a sent one
        is dropped by the worker if still queued, and answered either way (which frees its region).
        One synchronous write: it cannot land inside a frame, which is written without awaits."""
        if any(o.msg_id == msg_id for o in self._outbox):
            return
        proc = self._proc
        if proc is None or proc.returncode is not None or proc.stdin is None or proc.stdin.is_closing():
            return
        proc.stdin.write(encode_frame({"op": "cancel", "id": msg_id}))

    async def stats(self) -> dict[str, Any]:
        await self.wait_ready()
        reply, _ = await self.request({"op": "stats"})
        return reply.get("stats", {})

    # -- the supervisor's hooks ----------------------------------------------------------------
    def launch(self) -> Launch:
        python = self.options.python or sys.executable
        env = {**os.environ, **self.options.env}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_path_entry(), env.get("PYTHONPATH")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._arena = arena = self._open_arena()
        # The fields the config set: the worker rebuilds the kind's model from them (its defaults
        # and validators are the config's; a brought head refuses per-frame fields it was not given).
        opts = self.options.model_dump(mode="json", exclude={"env", "python"}, exclude_unset=True)
        init: dict[str, Any] = {"kind": self.kind, "name": self.name, "options": opts}
        if arena is not None:
            init["arena"] = {"fd": arena.fd, "size": arena.size}
        return Launch([python, "-m", "judge_gateway.heads.worker"], env, init,
                      pass_fds=(arena.fd,) if arena is not None else ())

    def on_ready(self, proc: asyncio.subprocess.Process) -> None:
        package = self.info.get("package")
        if package and Path(package).resolve() != PACKAGE_DIR:
            self.log.warning("head %r: the worker imported judge_gateway from %s, the gateway runs %s "
                             "(a judge_gateway folder in the working directory shadows it?)",
                             self.name, package, PACKAGE_DIR)
        if self._arena_error and "transport_error" not in self.info:
            self.info["transport_error"] = self._arena_error
        if self.info.get("transport") != "shm":
            self._close_arena()  # the worker could not map it: the pipe carries the pixels
        self._wake = wake = asyncio.Event()
        self._sender = asyncio.create_task(self._send_loop(proc, wake), name=f"head-{self.name}-sender")
        for listener in self.ready_listeners:
            listener()

    def start_failure_hint(self, stderr: list[str]) -> str:
        missing = next((line for line in reversed(stderr) if "No module named" in line), None)
        if missing is None:
            return ""
        python = self.options.python or sys.executable
        spec = KINDS.get(self.kind)
        extra = spec.extra if spec is not None else None
        return (f". The head's interpreter {python} lacks a package the worker imports ({missing.strip()}): "
                f"install judge-gateway there with the head's libraries"
                + (f", `{install_command(extra, python)}`" if extra else
                   " (its set-up script; see the docs' page of the head)"))

    def on_frame(self, header: dict[str, Any], payload: bytes) -> None:
        if header.get("op") == "result":
            self._release(header.get("id"))

    def on_exit(self) -> None:
        sender, self._sender = self._sender, None
        if sender is not None:
            sender.cancel()
        self._wake = None
        self._outbox.clear()
        # Our fd and region book-keeping go with this worker (its own mapping ends with it).
        self._close_arena()

    # -- internals -----------------------------------------------------------------------------
    async def _send_loop(self, proc: asyncio.subprocess.Process, wake: asyncio.Event) -> None:
        """Send what `infer` queued, as few frames as the arena / pipe limits allow."""
        while True:
            await wake.wait()
            wake.clear()
            while self._outbox:
                queued, self._outbox = self._outbox, []
                live = [o for o in queued if not o.fut.done()]  # cancelled callers: skip
                for chunk in self._chunks(live):
                    await self._send_frame(proc, chunk)

    def _chunks(self, items: list[_Outgoing]) -> list[list[_Outgoing]]:
        limit = self._arena.size // 4 if self._arena is not None else PIPE_FRAME_BYTES
        chunks: list[list[_Outgoing]] = []
        size = described = 0
        for item in items:
            if chunks and size + item.nbytes <= limit and described + item.header_bytes <= HEADER_BUDGET_BYTES:
                chunks[-1].append(item)
                size += item.nbytes
                described += item.header_bytes
            else:
                chunks.append([item])
                size, described = item.nbytes, item.header_bytes
        return chunks

    async def _send_frame(self, proc: asyncio.subprocess.Process, items: list[_Outgoing]) -> None:
        arena = self._arena
        try:
            assert proc.stdin is not None
            described = [o.described() for o in items]
            if arena is not None and sum(o.nbytes for o in items) <= arena.size:
                header, total = jobs_header(described, "shm")
                start = await self._alloc(arena, total)
                arrays = [a for o in items for a in o.arrays]
                try:
                    if total >= THREAD_WRITE_BYTES:  # keep the loop serving while pages are copied
                        wrote = await asyncio.to_thread(arena.write_on_own_fd(start, arrays)[1])
                    else:
                        wrote = arena.write(start, arrays)
                    if wrote != total:
                        raise RuntimeError("short write into the arena")
                except BaseException:
                    if arena is self._arena:
                        arena.free(start)  # nobody will answer for it
                    raise
                if arena is not self._arena:
                    raise RuntimeError("the worker ended while the frame was written")
                self._region_refs[start] = len(items)
                for o in items:
                    self._job_region[o.msg_id] = start
                header["region"] = start
                proc.stdin.write(encode_head(header, 0))
                self.transport_counts["frames_shm"] += 1
                self.transport_counts["bytes_shm"] += total
            else:  # no arena, or one job larger than all of it: the pipe carries the pixels
                header, total = jobs_header(described, "pipe")
                proc.stdin.write(encode_head(header, total))
                for o in items:  # no await in between: frames never interleave
                    for arr in o.arrays:
                        proc.stdin.write(memoryview(arr).cast("B"))
                self.transport_counts["frames_pipe"] += 1
                self.transport_counts["bytes_pipe"] += total
            await proc.stdin.drain()
        except (ConnectionError, RuntimeError, OSError) as exc:
            for o in items:
                if not o.fut.done():
                    o.fut.set_exception(HeadError(f"head {self.name!r}: lost the worker while sending ({exc})"))

    async def _alloc(self, arena: Arena, nbytes: int) -> int:
        """A region of the arena, waiting while the worker still holds the space (back-pressure)."""
        if arena.released is None:
            arena.released = asyncio.Event()
        while (start := arena.alloc(nbytes)) is None:
            self.transport_counts["arena_waits"] += 1
            arena.released.clear()
            await arena.released.wait()
            if arena is not self._arena:
                raise RuntimeError("the worker ended while the frame waited for shared memory")
        return start

    def _release(self, msg_id: Any) -> None:
        """The worker answered a job: once every job of its frame has, the region is free again."""
        start = self._job_region.pop(msg_id, None) if isinstance(msg_id, int) else None
        if start is None:
            return
        self._region_refs[start] -= 1
        if self._region_refs[start] == 0:
            del self._region_refs[start]
            if self._arena is not None:
                self._arena.free(start)

    def _open_arena(self) -> Arena | None:
        self._arena_error = None
        if self.options.transport != "shm":
            return None
        if not memfd_supported():
            self._arena_error = "no memfd_create on this platform"
            return None
        try:
            return Arena(self.options.shm_mb * 1024 * 1024, f"jg-head-{self.name}")
        except OSError as exc:
            self._arena_error = f"cannot create a shared-memory arena: {exc}"
            return None

    def _close_arena(self) -> None:
        arena, self._arena = self._arena, None
        self._job_region.clear()
        self._region_refs.clear()
        if arena is not None:
            if arena.released is not None:
                arena.released.set()  # wake a sender waiting for space: it sees the arena is gone
            arena.close()


def _contiguous(item: HeadItem) -> HeadItem:
    """The item with C-contiguous arrays (what the arena and the pipe write byte for byte)."""
    c = np.ascontiguousarray
    return HeadItem(item.prompt, item.medium, c(item.frames), item.fps, item.metadata, item.group_id,
                    [c(a) for a in item.condition_images], [c(a) for a in item.condition_videos])
