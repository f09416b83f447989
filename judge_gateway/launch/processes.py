"""Supervised child processes of `judge-gateway up`: start in a session of their own (so a stop
reaches the process and everything it started), wait for a health URL with progress, restart
with back-off when one dies, stop with SIGTERM then SIGKILL. Each writes its output to
`<run_dir>/<name>.log` and its PID to `<name>.pid` while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from ..exceptions import Unavailable
from .plan import ProcessPlan

Say = Callable[[str], None]
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when `up` itself dies (even by SIGKILL), so no server is orphaned."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def descendants(pid: int) -> list[int]:
    """Every live process under `pid` (read from /proc; empty where there is none)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Running (a zombie, exited but not yet reaped, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return state != "Z"


class StartFailed(Unavailable):
    """A process exited, or never answered its health URL, during its first start."""


class Child:
    def __init__(self, plan: ProcessPlan, run_dir: Path, say: Say) -> None:
        self.plan = plan
        self.run_dir = run_dir
        self.say = say
        self.proc: asyncio.subprocess.Process | None = None
        self.state = "stopped"  # starting | ready | restarting | stopped | failed
        self.restarts = 0
        self.log_path = run_dir / f"{plan.name}.log"
        self.pid_path = run_dir / f"{plan.name}.pid"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    async def start(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"===== {time.strftime('%Y-%m-%dT%H:%M:%S')} up starts {self.plan.name}: "
                      f"{' '.join(self.plan.argv)}\n".encode())
            log.flush()
            self.proc = await asyncio.create_subprocess_exec(
                *self.plan.argv, env={**os.environ, **self.plan.env}, stdin=asyncio.subprocess.DEVNULL,
                stdout=log, stderr=asyncio.subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent)
        self.pid_path.write_text(f"{self.proc.pid}\n")
        self.state = "starting"

    def last_log_line(self) -> str:
        try:
            with self.log_path.open("rb") as f:
                f.seek(max(0, self.log_path.stat().st_size - 4096))
                lines = [ln for ln in f.read().decode(errors="replace").replace("\r", "\n").splitlines() if ln.strip()]
            return lines[-1].strip()[:160] if lines else ""
        except OSError:
            return ""

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    async def wait_healthy(self, stop: asyncio.Event, progress_every_s: float = 15.0) -> None:
        """Until GET health_url is 200; StartFailed when the process exits or the time runs out."""
        assert self.proc is not None
        started = last_said = time.monotonic()
        async with httpx.AsyncClient(timeout=5.0, trust_env=False) as client:
            while not stop.is_set():
                if self.proc.returncode is not None:
                    raise StartFailed(f"{self.plan.name} exited with code {self.proc.returncode} before answering "
                                      f"{self.plan.health_url}; last lines of {self.log_path}:\n{self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(self.plan.health_url)).status_code == 200:
                        self.state = "ready"
                        self.say(f"{self.plan.name} is ready after {time.monotonic() - started:.0f} s "
                                 f"(pid {self.proc.pid})")
                        return
                now = time.monotonic()
                if now - started > self.plan.startup_timeout_s:
                    raise StartFailed(f"{self.plan.name} did not answer {self.plan.health_url} within "
                                      f"{self.plan.startup_timeout_s:.0f} s; last lines of {self.log_path}:\n"
                                      f"{self.log_tail()}")
                if now - last_said >= progress_every_s:
                    last_said = now
                    self.say(f"waiting for {self.plan.name} ({now - started:.0f} s): {self.last_log_line()}")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)

    async def supervise(self, stop: asyncio.Event) -> None:
        """Restart the process whenever it dies, with a doubling back-off, until `stop`."""
        backoff = self.plan.restart_backoff_s
        while not stop.is_set():
            assert self.proc is not None
            waiter = asyncio.ensure_future(self.proc.wait())
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if stop.is_set():
                waiter.cancel()
                return
            code = self.proc.returncode
            self.state = "restarting"
            self.pid_path.unlink(missing_ok=True)
            self.say(f"{self.plan.name} (pid {self.proc.pid}) died with code {code}; restarting in {backoff:g} s "
                     f"(log {self.log_path})")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), backoff)
            if stop.is_set():
                return
            self.restarts += 1
            try:
                await self.start()
                await self.wait_healthy(stop)
                backoff = self.plan.restart_backoff_s
            except (StartFailed, OSError) as exc:
                self.say(f"restart of {self.plan.name} failed: {str(exc).splitlines()[0]}")
                backoff = min(backoff * 2, self.plan.restart_backoff_max_s)
                await self._signal(signal.SIGKILL)

    async def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM to the process's session, SIGKILL after `grace_s`; returns once it is gone."""
        proc = self.proc
        if proc is None:
            return
        # Its processes, including those in sessions of their own (a gateway's head workers), which
        # a signal to its group does not reach: each must be gone when this returns.
        family = descendants(proc.pid)
        started = time.monotonic()
        if proc.returncode is None:
            self.say(f"stopping {self.plan.name} (pid {proc.pid})")
            await self._signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), grace_s)
            except TimeoutError:
                self.say(f"{self.plan.name} (pid {proc.pid}) still running after {grace_s:g} s: SIGKILL")
        await self._signal(signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 10.0)
        while (left := [p for p in family if alive(p)]) and time.monotonic() - started < grace_s:
            await asyncio.sleep(0.2)
        for pid in left:
            self.say(f"{self.plan.name}: its process {pid} outlived it: SIGKILL")
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.pid_path.unlink(missing_ok=True)
        self.state = "stopped"

    async def _signal(self, sig: int) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)
        if sig == signal.SIGTERM:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)
