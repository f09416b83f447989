"""Gateway side of a head: start, feed and supervise one worker process.

The worker runs `python -m judge_gateway.heads.worker` under the head's configured interpreter.
Requests go out as frames on its stdin; results come back on its stdout and resolve futures by
id. When the worker dies, every in-flight request fails with HeadError (never hangs) and the
worker is restarted with an exponential back-off. A model that fails to load marks the head
failed with the worker's reason; the next request after `retry_failed_load_s` tries again.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .options import HeadOptions
from .protocol import PREFIX, ProtocolError, decode_header, decode_prefix, encode_frame, images_header

log = logging.getLogger(__name__)
REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_BACKOFF_S = 30.0


class HeadError(RuntimeError):
    """The worker could not produce a result for a request (crashed, failed to load, refused)."""


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

    async def infer(self, frames: np.ndarray, prompt: str) -> list[dict[str, Any]]:
        """Per-frame outputs of the model for uint8 [n, H, W, 3] frames and one prompt."""
        await self.wait_ready()
        header = {"op": "score", "prompt": prompt, **images_header(frames)}
        reply = await self._request(header, memoryview(np.ascontiguousarray(frames)).cast("B"))
        if not reply.get("ok"):
            raise HeadError(f"head {self.name!r}: {reply.get('error', 'unknown error')}")
        outputs = reply.get("outputs")
        if not isinstance(outputs, list) or len(outputs) != len(frames):
            raise HeadError(f"head {self.name!r} returned a malformed result")
        return outputs

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

    def _fail_pending(self, why: str) -> None:
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(HeadError(f"head {self.name!r}: {why}"))

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
        try:
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env, start_new_session=True,
            )
        except OSError as exc:
            self.reason = f"cannot start worker {cmd[0]!r}: {exc}"
            return "fatal"
        self._proc = proc
        stderr_task = asyncio.create_task(self._pump_stderr(proc))
        try:
            assert proc.stdin is not None and proc.stdout is not None
            opts = self.options.model_dump(mode="json", exclude={"env", "python"})
            proc.stdin.write(encode_frame({"op": "init", "kind": self.kind, "name": self.name, "options": opts}))
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
            self.state, self.reason = "ready", None
            self._ready.set()
            log.info("head %s ready (pid %s): %s", self.name, proc.pid, self.info)
            while True:
                frame = await self._read_frame(proc.stdout)
                if frame is None:
                    break
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
        code = await proc.wait()
        await stderr_task
        self.reason = f"worker exited with code {code}{self._tail()}"
        self._fail_pending(f"worker crashed while scoring ({self.reason})")
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
