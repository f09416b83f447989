"""Gateway side of a head: start, feed and supervise one worker process.

The worker runs `python -m judge_gateway.heads.worker` under the head's configured interpreter.
Requests go out as frames on its stdin; results come back on its stdout and resolve futures by
id. Score requests are coalesced: every `infer` call made in one turn of the event loop (a
request's samples) goes out in one frame, the pixels written into the worker's shared-memory
arena (shm.py) with one `pwritev`, or through the pipe where no arena could be had. When the
worker dies, every in-flight request fails with HeadError (never hangs) and the worker is
restarted with an exponential back-off. A model that fails to load marks the head failed with
the worker's reason; the next request after `retry_failed_load_s` tries again.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import HeadOptions
from .protocol import (
    PREFIX,
    ProtocolError,
    decode_header,
    decode_prefix,
    encode_frame,
    encode_head,
    images_header,
    jobs_header,
)
from .shm import Arena, memfd_supported

log = logging.getLogger(__name__)
REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_BACKOFF_S = 30.0


class HeadError(RuntimeError):
    """The worker could not produce a result for a request (crashed, failed to load, refused).
    `crashed`: the worker died with the item in flight; it respawns, so scoring again can work."""

    def __init__(self, message: str, *, crashed: bool = False) -> None:
        super().__init__(message)
        self.crashed = crashed


@dataclass
class _Outgoing:
    """A scoring job waiting for the sender: one `infer` call."""

    msg_id: int
    prompt: str
    frames: np.ndarray  # C-contiguous uint8 [n, H, W, 3]
    fut: asyncio.Future[Any]


# The pipe carries at most this much per frame; bigger batches go as several frames.
PIPE_FRAME_BYTES = 64 * 1024 * 1024
# Frames at least this large are written into the arena on a thread (pwritev drops the GIL).
THREAD_WRITE_BYTES = 8 * 1024 * 1024


class HeadWorker:
    def __init__(self, name: str, kind: str, options: HeadOptions) -> None:
        self.name = name
        self.kind = kind
        self.options = options
        self.state = "stopped"  # stopped | starting | ready | restarting | failed | closed
        self.reason: str | None = "not started (starts at the first probe or request)"
        self.info: dict[str, Any] = {}
        self.restarts = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)
        self._ready: asyncio.Event | None = None
        self._runner: asyncio.Task[None] | None = None
        self._failed_at = 0.0
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=20)
        # Sending side of the running worker process (see _run_once / _send_loop).
        self._outbox: list[_Outgoing] = []
        self._wake: asyncio.Event | None = None
        self._arena: Arena | None = None
        self._arena_error: str | None = None
        self._job_region: dict[int, int] = {}  # job id -> start of its frame's region
        self._region_refs: dict[int, int] = {}  # region start -> jobs not answered yet
        self.transport_counts = {"frames_shm": 0, "frames_pipe": 0, "bytes_shm": 0, "bytes_pipe": 0,
                                 "arena_waits": 0}

    # -- public API ----------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.returncode is None else None

    def ensure_started(self) -> None:
        """Start the supervising task if it is not running (or a failed load may be retried)."""
        if self.state == "closed":
            raise HeadError(f"head {self.name!r} is closed")
        if self._ready is None:
            self._ready = asyncio.Event()
        if self._runner is not None and not self._runner.done():
            return
        if self.state == "failed" and time.monotonic() - self._failed_at < self.options.retry_failed_load_s:
            return
        self.state, self.reason = "starting", "loading the model"
        self._ready.clear()
        self._runner = asyncio.get_running_loop().create_task(self._supervise(), name=f"head-{self.name}")

    def readiness(self) -> tuple[bool, str | None]:
        if self.state == "ready":
            return True, None
        return False, f"{self.state}: {self.reason}" if self.reason else self.state

    async def probe(self) -> tuple[bool, str | None]:
        """Readiness, starting the worker on the first probe (so /readyz loads the model)."""
        try:
            self.ensure_started()
        except HeadError as exc:
            return False, str(exc)
        return self.readiness()

    async def wait_ready(self) -> None:
        self.ensure_started()
        assert self._ready is not None
        if self.state == "ready":
            return
        if self.state == "failed":
            raise HeadError(f"head {self.name!r} failed to load: {self.reason}")
        try:
            async with asyncio.timeout(self.options.startup_timeout_s):
                while self.state != "ready":
                    if self.state in ("failed", "closed"):
                        raise HeadError(f"head {self.name!r} is {self.state}: {self.reason}")
                    await self._ready.wait()
        except TimeoutError:
            raise HeadError(
                f"head {self.name!r} not ready after {self.options.startup_timeout_s}s ({self.reason})"
            ) from None

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
        proc = self._proc
        if proc is None or proc.returncode is not None or self._wake is None:
            raise HeadError(f"head {self.name!r} worker is not running ({self.state}: {self.reason})")
        msg_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        # The sender wakes after the other ready tasks of this loop turn: a request's samples
        # that reach this point together go out in one frame.
        self._outbox.append(_Outgoing(msg_id, prompt, np.ascontiguousarray(frames), fut))
        self._wake.set()
        try:
            reply = await fut
        except asyncio.CancelledError:
            self._cancel_job(msg_id)
            raise
        finally:
            self._pending.pop(msg_id, None)
        if not reply.get("ok"):
            raise HeadError(f"head {self.name!r}: {reply.get('error', 'unknown error')}")
        outputs = reply.get("outputs")
        if not isinstance(outputs, list) or len(outputs) != len(frames):
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
        reply = await self._request({"op": "stats"})
        return reply.get("stats", {})

    async def aclose(self, timeout_s: float = 10.0) -> None:
        self.state, self.reason = "closed", "closed"
        if self._ready is not None:
            self._ready.set()
        runner, self._runner = self._runner, None
        proc = self._proc
        if proc is not None and proc.returncode is None:
            try:
                assert proc.stdin is not None
                proc.stdin.write(encode_frame({"op": "shutdown"}))
                proc.stdin.close()  # end of stdin ends the worker
            except (ConnectionError, RuntimeError):
                pass
            try:
                await asyncio.wait_for(proc.wait(), timeout_s)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if runner is not None:
            runner.cancel()
            try:
                await runner
            except (asyncio.CancelledError, Exception):
                pass
        self._fail_pending("head closed")

    # -- internals -----------------------------------------------------------------------------
    async def _request(self, header: dict[str, Any], payload: bytes | memoryview = b"") -> dict[str, Any]:
        proc = self._proc
        if proc is None or proc.returncode is not None or proc.stdin is None:
            raise HeadError(f"head {self.name!r} worker is not running ({self.state}: {self.reason})")
        msg_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        try:
            proc.stdin.write(encode_frame({**header, "id": msg_id}, payload))
            await proc.stdin.drain()
            return await fut
        except asyncio.CancelledError:
            # Its request was abandoned (client gone): the worker drops the item if still queued;
            # a result that comes anyway finds no future and is discarded.
            if header.get("op") == "score" and proc.returncode is None and not proc.stdin.is_closing():
                proc.stdin.write(encode_frame({"op": "cancel", "id": msg_id}))
            raise
        except (ConnectionError, RuntimeError) as exc:
            raise HeadError(f"head {self.name!r}: lost the worker while sending ({exc})") from None
        finally:
            self._pending.pop(msg_id, None)

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
        size = 0
        for item in items:
            if chunks and size + item.frames.nbytes <= limit:
                chunks[-1].append(item)
                size += item.frames.nbytes
            else:
                chunks.append([item])
                size = item.frames.nbytes
        return chunks

    async def _send_frame(self, proc: asyncio.subprocess.Process, items: list[_Outgoing]) -> None:
        arena = self._arena
        try:
            assert proc.stdin is not None
            described = [(o.msg_id, o.prompt, o.frames.shape) for o in items]
            if arena is not None and sum(o.frames.nbytes for o in items) <= arena.size:
                header, total = jobs_header(described, "shm")
                start = await self._alloc(arena, total)
                arrays = [o.frames for o in items]
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
                    proc.stdin.write(memoryview(o.frames).cast("B"))
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

    def _fail_pending(self, why: str, crashed: bool = False) -> None:
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(HeadError(f"head {self.name!r}: {why}", crashed=crashed))

    def _command(self) -> tuple[list[str], dict[str, str]]:
        python = self.options.python or sys.executable
        env = {**os.environ, **self.options.env}
        # The worker imports judge_gateway from this checkout whatever its interpreter.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        return [python, "-m", "judge_gateway.heads.worker"], env

    async def _supervise(self) -> None:
        backoff = self.options.restart_backoff_s
        while self.state != "closed":
            started = time.monotonic()
            outcome = await self._run_once()
            if self.state == "closed":
                return
            if outcome == "fatal":
                self.state, self._failed_at = "failed", time.monotonic()
                assert self._ready is not None
                self._ready.set()  # wake waiters: they see "failed"
                log.error("head %s: model load failed: %s", self.name, self.reason)
                return
            # A crash: restart, backing off while it keeps crashing soon after start.
            self.restarts += 1
            if time.monotonic() - started > 30.0:
                backoff = self.options.restart_backoff_s
            self.state = "restarting"
            log.warning("head %s: worker died (%s); restart #%d in %.1fs",
                        self.name, self.reason, self.restarts, backoff)
            await asyncio.sleep(backoff)
            backoff = min(MAX_BACKOFF_S, max(backoff * 2, 0.1))

    async def _run_once(self) -> str:
        """Run one worker process to its end: 'fatal' (load failed) or 'exited'."""
        assert self._ready is not None
        cmd, env = self._command()
        self._stderr_tail.clear()
        self._arena = arena = self._open_arena()
        try:
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env, start_new_session=True,
                pass_fds=(arena.fd,) if arena is not None else (),
            )
        except OSError as exc:
            self._close_arena()
            self.reason = f"cannot start worker {cmd[0]!r}: {exc}"
            return "fatal"
        self._proc = proc
        stderr_task = asyncio.create_task(self._pump_stderr(proc))
        self._wake = wake = asyncio.Event()
        sender: asyncio.Task[None] | None = None
        try:
            assert proc.stdin is not None and proc.stdout is not None
            opts = self.options.model_dump(mode="json", exclude={"env", "python"})
            init: dict[str, Any] = {"op": "init", "kind": self.kind, "name": self.name, "options": opts}
            if arena is not None:
                init["arena"] = {"fd": arena.fd, "size": arena.size}
            proc.stdin.write(encode_frame(init))
            await proc.stdin.drain()
            first = await self._read_frame(proc.stdout)
            if first is None or first.get("op") != "ready":
                await proc.wait()
                await stderr_task
                if first is not None and first.get("op") == "fatal":
                    self.reason = str(first.get("error"))
                else:
                    self.reason = f"worker exited with code {proc.returncode} before loading{self._tail()}"
                return "fatal"
            self.info = first.get("info", {})
            if self._arena_error and "transport_error" not in self.info:
                self.info["transport_error"] = self._arena_error
            if self.info.get("transport") != "shm":
                self._close_arena()  # the worker could not map it: the pipe carries the pixels
            sender = asyncio.create_task(self._send_loop(proc, wake), name=f"head-{self.name}-sender")
            self.state, self.reason = "ready", None
            self._ready.set()
            log.info("head %s ready (pid %s): %s", self.name, proc.pid, self.info)
            while True:
                frame = await self._read_frame(proc.stdout)
                if frame is None:
                    break
                if frame.get("op") == "result":
                    self._release(frame.get("id"))
                fut = self._pending.get(frame.get("id")) if isinstance(frame.get("id"), int) else None
                if fut is not None and not fut.done():
                    fut.set_result(frame)
        except (ProtocolError, ConnectionError) as exc:
            log.error("head %s: broken worker stream: %s", self.name, exc)
            proc.kill()
        except asyncio.CancelledError:
            if proc.returncode is None:
                proc.kill()
            raise
        finally:
            self._ready.clear()
            if self.state == "ready":
                self.state, self.reason = "restarting", "worker exited"
            if sender is not None:
                sender.cancel()
            self._wake = None
            self._outbox.clear()
            # Our fd and region book-keeping go with this worker (its own mapping ends with it).
            self._close_arena()
        code = await proc.wait()
        await stderr_task
        self.reason = f"worker exited with code {code}{self._tail()}"
        self._fail_pending(f"worker crashed while scoring ({self.reason})", crashed=True)
        return "exited"

    async def _read_frame(self, stream: asyncio.StreamReader) -> dict[str, Any] | None:
        try:
            prefix = await stream.readexactly(PREFIX.size)
            head_len, payload_len = decode_prefix(prefix)
            header = decode_header(await stream.readexactly(head_len))
            if payload_len:
                await stream.readexactly(payload_len)  # workers send none today
        except asyncio.IncompleteReadError:
            return None
        return header

    async def _pump_stderr(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        while line := await proc.stderr.readline():
            text = line.decode("utf-8", "replace").rstrip()
            self._stderr_tail.append(text)
            log.info("head %s worker: %s", self.name, text)

    def _tail(self) -> str:
        lines = [line for line in self._stderr_tail if line.strip()][-3:]
        return f"; last stderr: {' | '.join(lines)}" if lines else ""
