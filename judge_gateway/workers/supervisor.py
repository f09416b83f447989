"""One supervisor for every worker subprocess (the head workers, the cosmos-rl latent decoder).

A `WorkerSupervisor` starts its process, sends it an `init` frame and waits for the worker's
first frame: `{"op": "ready", "info"}` (serving) or `{"op": "fatal", "error"}` (it cannot serve:
a model failed to load). Then every frame the worker sends with an integer `id` resolves the
request of that id (`request`, or a future from `new_request` when a subclass writes its own
frames). When the process ends, every request in flight fails with the subclass's error marked
`crashed` (never lost, never a hang) and the process is restarted with an exponential back-off;
a fatal start marks the supervisor failed, and the next use after `retry_failed_load_s` tries
again. A request given a timeout that passes kills the worker (it is stuck), which restarts.

Subclasses say how to launch (`launch`) and may hook the ready handshake (`on_ready`), each
frame (`on_frame`) and the end of each process (`on_exit`).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import Unavailable
from .framing import (
    MAX_PAYLOAD_BYTES,
    ProtocolError,
    encode_frame,
    encode_head,
    read_frame_async,
)

MAX_BACKOFF_S = 30.0
# A worker that ran this long before it died is "healthy again": its next crash restarts after
# the first back-off.
HEALTHY_RUN_S = 30.0
# A worker's stderr line is kept (logged) up to this many bytes.
STDERR_LINE_CHARS = 2000


class WorkerError(Unavailable):
    """A worker could not answer a request. `crashed`: its process died or was killed with the
    request in flight (it restarts, so asking again can work); `stage`: where the worker says it
    failed ("load": a model could not be loaded)."""

    def __init__(self, message: str, *, crashed: bool = False, stage: str | None = None) -> None:
        super().__init__(message)
        self.crashed = crashed
        self.stage = stage


@dataclass(frozen=True)
class Launch:
    """How to start one worker process."""

    command: list[str]
    env: dict[str, str]
    init: dict[str, Any] = field(default_factory=dict)  # the init frame's fields ("op" is added)
    pass_fds: tuple[int, ...] = ()
    # The level its stderr lines are logged at (on the subclass's module logger).
    stderr_level: int = logging.INFO


class WorkerSupervisor:
    """Start, hand-shake, restart and stop one worker process; route its replies by id.

    `reason` (why it is not ready) reaches replies: readiness, a cell's error, a cosmos-rl pull's
    `errors`. It never quotes the worker's interpreter path or its stderr, which belong to the
    machine's operator: those go to the gateway's log with the reason ("the gateway's log has ..."
    in the reason says where to look)."""

    error_type: type[WorkerError] = WorkerError
    crash_why = "worker crashed with the request in flight"

    def __init__(self, label: str, *, startup_timeout_s: float, restart_backoff_s: float,
                 retry_failed_load_s: float, max_payload: int = MAX_PAYLOAD_BYTES) -> None:
        self.label = label  # how errors and logs name it: "head 'clip'", "torch worker"
        self.startup_timeout_s = startup_timeout_s
        self.restart_backoff_s = restart_backoff_s
        self.retry_failed_load_s = retry_failed_load_s
        self.max_payload = max_payload
        self.state = "stopped"  # stopped | starting | ready | restarting | failed | closed
        self.reason: str | None = "not started (starts at the first probe or request)"
        self.info: dict[str, Any] = {}
        self.restarts = 0
        self.log = logging.getLogger(type(self).__module__)
        self._proc: asyncio.subprocess.Process | None = None
        self._pending: dict[int, asyncio.Future[tuple[dict[str, Any], bytes]]] = {}
        self._ids = itertools.count(1)
        self._ready: asyncio.Event | None = None
        self._runner: asyncio.Task[None] | None = None
        self._failed_at = 0.0
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=20)

    # -- hooks ---------------------------------------------------------------------------------
    def launch(self) -> Launch:
        """The command, environment, init fields and inherited fds of the next process."""
        raise NotImplementedError

    def on_ready(self, proc: asyncio.subprocess.Process) -> None:
        """The worker said ready (`self.info` holds its info); requests may flow after this."""

    def on_frame(self, header: dict[str, Any], payload: bytes) -> None:
        """Each frame after the handshake, before it resolves its request."""

    def on_exit(self) -> None:
        """The process ended (or could not start); drop what belonged to it."""

    def start_failure_hint(self, stderr: list[str]) -> str:
        """Advice logged with the reason of a worker that exited before it was ready, given its
        last stderr lines ("" for none); it may name paths (the log is the operator's)."""
        return ""

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.returncode is None else None

    def ensure_started(self) -> None:
        """Start the supervising task if it is not running (or a failed start may be retried)."""
        if self.state == "closed":
            raise self.error_type(f"{self.label} is closed")
        if self._ready is None:
            self._ready = asyncio.Event()
        if self._runner is not None and not self._runner.done():
            return
        if self.state == "failed" and time.monotonic() - self._failed_at < self.retry_failed_load_s:
            return
        self.state, self.reason = "starting", "loading the model"
        self._ready.clear()
        self._runner = asyncio.get_running_loop().create_task(self._supervise(), name=self.label)

    def readiness(self) -> tuple[bool, str | None]:
        if self.state == "ready":
            return True, None
        return False, f"{self.state}: {self.reason}" if self.reason else self.state

    async def probe(self) -> tuple[bool, str | None]:
        """Readiness, starting the worker on the first probe (so /readyz loads the model)."""
        try:
            self.ensure_started()
        except WorkerError as exc:
            return False, str(exc)
        return self.readiness()

    async def wait_ready(self) -> None:
        self.ensure_started()
        assert self._ready is not None
        if self.state == "ready":
            return
        if self.state == "failed":
            raise self.error_type(f"{self.label} failed to load: {self.reason}")
        try:
            async with asyncio.timeout(self.startup_timeout_s):
                while self.state != "ready":
                    if self.state in ("failed", "closed"):
                        raise self.error_type(f"{self.label} is {self.state}: {self.reason}")
                    await self._ready.wait()
        except TimeoutError:
            raise self.error_type(f"{self.label} not ready after {self.startup_timeout_s}s ({self.reason})") from None

    async def aclose(self, timeout_s: float = 10.0) -> None:
        """Ask the worker to exit (a `shutdown` frame, then end of its stdin), kill it if it has
        not within `timeout_s`; requests still in flight fail."""
        self.state, self.reason = "closed", "closed"
        if self._ready is not None:
            self._ready.set()
        runner, self._runner = self._runner, None
        await self._end_process(timeout_s)
        if runner is not None:
            runner.cancel()
            try:
                await runner
            except (asyncio.CancelledError, Exception):
                pass
        self.fail_pending("closed")

    async def _end_process(self, timeout_s: float) -> None:
        """Ask the running worker to exit (a `shutdown` frame, then end of its stdin), kill it if it
        has not within `timeout_s`."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
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

    async def stop(self, reason: str, timeout_s: float = 10.0) -> None:
        """End the process on purpose and do not restart it (a colocated head put to sleep by its
        worker exiting): as `aclose`, but the supervisor stays usable: its state is "stopped" and
        the next `ensure_started` starts a fresh process. Requests still in flight fail."""
        if self.state == "closed":
            return
        self.state, self.reason = "stopped", reason
        if self._ready is not None:
            self._ready.clear()
        runner, self._runner = self._runner, None
        await self._end_process(timeout_s)
        if runner is not None:
            try:
                await asyncio.wait_for(runner, timeout_s)  # it returns once it sees "stopped"
            except (TimeoutError, asyncio.CancelledError, Exception):
                runner.cancel()
        self.fail_pending(reason)

    # -- requests ------------------------------------------------------------------------------
    def running(self) -> asyncio.subprocess.Process:
        """The live, ready process, or the error saying why there is none."""
        proc = self._proc
        if self.state != "ready" or proc is None or proc.returncode is not None or proc.stdin is None:
            raise self.error_type(f"{self.label} worker is not running ({self.state}: {self.reason})")
        return proc

    def new_request(self) -> tuple[int, asyncio.Future[tuple[dict[str, Any], bytes]]]:
        """A fresh id and the future its reply (header, payload) resolves; the caller writes the
        frame and pops the id from `_pending` when done (see `forget`)."""
        msg_id = next(self._ids)
        fut: asyncio.Future[tuple[dict[str, Any], bytes]] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        return msg_id, fut

    def forget(self, msg_id: int) -> None:
        """A request's caller is done with it: a reply that still comes finds no future."""
        self._pending.pop(msg_id, None)

    async def request(self, header: dict[str, Any], payload: bytes | memoryview = b"", *,
                      timeout: float | None = None) -> tuple[dict[str, Any], bytes]:
        """Send one frame (its `id` added) and await the reply frame of that id."""
        proc = self.running()
        assert proc.stdin is not None
        msg_id, fut = self.new_request()
        try:
            async with asyncio.timeout(timeout):
                proc.stdin.write(encode_head({**header, "id": msg_id}, len(payload)))
                if len(payload):
                    proc.stdin.write(payload)
                await proc.stdin.drain()
                return await fut
        except TimeoutError:
            self.kill()  # a worker that cannot answer in time is stuck: restart it
            raise self.error_type(f"{self.label} gave no answer within {timeout:.0f}s (restarted)",
                                  crashed=True) from None
        except WorkerError:
            raise
        except (ConnectionError, RuntimeError) as exc:
            raise self.error_type(f"{self.label}: lost the worker while sending ({exc})", crashed=True) from None
        finally:
            self.forget(msg_id)

    def kill(self) -> None:
        """Kill the running process; the supervisor fails its requests and restarts it."""
        if self._proc is not None and self._proc.returncode is None:
            self._proc.kill()
            if self.state == "ready":  # from now on, callers wait for the restart
                self.state, self.reason = "restarting", "killed"
                assert self._ready is not None
                self._ready.clear()

    def fail_pending(self, why: str, crashed: bool = False) -> None:
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(self.error_type(f"{self.label}: {why}", crashed=crashed))

    # -- supervision ---------------------------------------------------------------------------
    async def _supervise(self) -> None:
        backoff = self.restart_backoff_s
        while self.state != "closed":
            started = time.monotonic()
            outcome = await self._run_once()
            if self.state in ("closed", "stopped"):  # ended on purpose (aclose, stop)
                return
            if outcome == "fatal":
                self.state, self._failed_at = "failed", time.monotonic()
                assert self._ready is not None
                self._ready.set()  # wake waiters: they see "failed"
                self.log.error("%s: could not start: %s", self.label, self.reason)
                return
            # A crash: restart, backing off while it keeps crashing soon after start.
            self.restarts += 1
            if time.monotonic() - started > HEALTHY_RUN_S:
                backoff = self.restart_backoff_s
            self.state = "restarting"
            self.log.warning("%s: worker died (%s); restart #%d in %.1fs", self.label, self.reason,
                             self.restarts, backoff)
            await asyncio.sleep(backoff)
            backoff = min(MAX_BACKOFF_S, max(backoff * 2, 0.1))

    async def _run_once(self) -> str:
        """Run one worker process to its end: 'fatal' (it could not start or load) or 'exited'."""
        assert self._ready is not None
        self._stderr_tail.clear()
        spec = self.launch()
        try:
            proc = await asyncio.create_subprocess_exec(
                *spec.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=spec.env, start_new_session=True, pass_fds=spec.pass_fds,
                limit=1 << 20,  # stderr lines up to 1 MiB
            )
        except OSError as exc:
            self.on_exit()
            self.reason = (f"cannot start {self.label}: its interpreter could not be run ({type(exc).__name__}; "
                           "the gateway's log names it)")
            self.log.error("%s: cannot start %r: %s", self.label, spec.command[0], exc)
            return "fatal"
        self._proc = proc
        stderr_task = asyncio.create_task(self._pump_stderr(proc, spec.stderr_level))
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(encode_frame({**spec.init, "op": "init"}))
            await proc.stdin.drain()
            first = await read_frame_async(proc.stdout, self.max_payload)
            if first is None or first[0].get("op") != "ready":
                await proc.wait()
                await stderr_task
                if first is not None and first[0].get("op") == "fatal":
                    self.reason = str(first[0].get("error"))
                    if first[0].get("detail"):
                        self.log.error("%s: could not load: %s", self.label, first[0]["detail"])
                else:
                    self.reason = (f"worker exited with code {proc.returncode} before loading (its last stderr "
                                   "lines are in the gateway's log)")
                    self.log.error("%s: worker exited with code %s before loading%s%s", self.label, proc.returncode,
                                   self._tail(), self.start_failure_hint(list(self._stderr_tail)))
                return "fatal"
            self.info = first[0].get("info", {})
            if self.state != "closed":  # closed while it loaded: it is on its way out, not ready
                self.on_ready(proc)
                self.state, self.reason = "ready", None
                self._ready.set()
                self.log.info("%s ready (pid %s): %s", self.label, proc.pid, self.info)
            while (frame := await read_frame_async(proc.stdout, self.max_payload)) is not None:
                header, payload = frame
                self.on_frame(header, payload)
                msg_id = header.get("id")
                fut = self._pending.get(msg_id) if isinstance(msg_id, int) else None
                if fut is not None and not fut.done():
                    fut.set_result(frame)
        except (ProtocolError, ConnectionError) as exc:
            self.log.error("%s: broken worker stream: %s", self.label, exc)
            proc.kill()
        except asyncio.CancelledError:
            if proc.returncode is None:
                proc.kill()
            raise
        finally:
            self._ready.clear()
            if self.state == "ready":
                self.state, self.reason = "restarting", "worker exited"
            self.on_exit()
        code = await proc.wait()
        await stderr_task
        if self.state in ("closed", "stopped"):
            return "exited"
        self.reason = f"worker exited with code {code}"
        self.log.warning("%s: worker exited with code %s%s", self.label, code, self._tail())
        self.fail_pending(f"{self.crash_why} ({self.reason})", crashed=True)
        return "exited"

    async def _pump_stderr(self, proc: asyncio.subprocess.Process, level: int) -> None:
        assert proc.stderr is not None
        while True:
            try:
                line = await proc.stderr.readline()
            except ValueError:  # a line over the reader's limit (dropped): keep draining stderr
                line = b"(a stderr line over 1 MiB, dropped)"
            if not line:
                return
            text = line[:STDERR_LINE_CHARS].decode("utf-8", "replace").rstrip()
            self._stderr_tail.append(text)
            self.log.log(level, "%s worker: %s", self.label, text)

    def _tail(self) -> str:
        lines = [line for line in self._stderr_tail if line.strip()][-3:]
        return f"; last stderr: {' | '.join(lines)}" if lines else ""
