"""workers/supervisor.py: the one supervisor of every worker subprocess, over a real stdlib worker
(tests/support/fake_framed_worker.py), and the latent decoder's script on the shared framing."""

from __future__ import annotations

import asyncio
import re
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from judge_gateway.latents import LatentDecoderError, LatentDecoderSupervisor
from judge_gateway.config import LatentDecoderConfig
from judge_gateway.workers.framing import encode_frame, read_frame
from judge_gateway.workers.supervisor import Launch, WorkerError, WorkerSupervisor

ROOT = Path(__file__).resolve().parents[2]


class FakeSupervisor(WorkerSupervisor):
    def __init__(self, mode: str = "ok", stderr_level: int = logging.INFO) -> None:
        super().__init__("fake worker", startup_timeout_s=20, restart_backoff_s=0.05, retry_failed_load_s=60)
        self.mode = mode
        self.stderr_level = stderr_level
        self.exits = 0

    def launch(self) -> Launch:
        return Launch([sys.executable, "-I", str(ROOT / "tests" / "support" / "fake_framed_worker.py"), self.mode],
                      dict(os.environ), stderr_level=self.stderr_level)

    def on_exit(self) -> None:
        self.exits += 1


async def test_replies_go_to_their_request_by_id_with_their_payloads():
    sup = FakeSupervisor()
    try:
        await sup.wait_ready()
        assert sup.info == {"pid": sup.pid} and sup.state == "ready"
        payloads = [bytes([i]) * (i * 1_000_003) for i in range(1, 5)]  # up to 4 MB, in flight together
        replies = await asyncio.gather(*(sup.request({"op": "echo"}, p) for p in payloads))
        assert [(h["n"], out) for h, out in replies] == [(len(p), p) for p in payloads]
        assert sup._pending == {}
    finally:
        await sup.aclose()


async def test_a_reply_that_overtakes_an_earlier_request_goes_to_its_own_caller():
    """The worker answers the second request first: matching replies in order (FIFO) would give
    each caller the other's payload."""
    sup = FakeSupervisor()
    try:
        await sup.wait_ready()
        slow = asyncio.ensure_future(sup.request({"op": "later", "s": 0.5}, b"slow" * 1000))
        await asyncio.sleep(0.05)  # its frame is written before the next one's
        fast = asyncio.ensure_future(sup.request({"op": "echo"}, b"fast"))
        done, _ = await asyncio.wait({slow, fast}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        assert done == {fast} and fast.result()[1] == b"fast" and fast.result()[0]["n"] == 4
        head, out = await asyncio.wait_for(slow, 10)
        assert out == b"slow" * 1000 and head["n"] == 4000 and head["id"] < fast.result()[0]["id"]
        assert sup._pending == {}
    finally:
        await sup.aclose()


async def test_a_worker_killed_with_requests_in_flight_fails_each_and_restarts():
    sup = FakeSupervisor()
    try:
        await sup.wait_ready()
        old = sup.pid
        calls = [asyncio.ensure_future(sup.request({"op": "sleep", "s": 30})) for _ in range(3)]
        await asyncio.sleep(0.2)
        os.kill(old, signal.SIGKILL)
        t0 = time.monotonic()
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert time.monotonic() - t0 < 5  # failed at once, not at a timeout
        assert all(isinstance(r, WorkerError) and r.crashed for r in results), results
        assert all("fake worker: worker crashed with the request in flight (worker exited with code -9)" in str(r)
                   for r in results)
        await sup.wait_ready()
        assert sup.restarts == 1 and sup.pid not in (None, old) and sup.exits == 1
        assert (await sup.request({"op": "echo"}, b"again"))[1] == b"again"
    finally:
        await sup.aclose()


async def test_stop_ends_the_worker_on_purpose_and_the_next_start_runs_a_fresh_one():
    """A colocated head asleep by its worker exiting (heads/residency.py): not a crash, no restart."""
    sup = FakeSupervisor()
    try:
        await sup.wait_ready()
        old = sup.pid
        await sup.stop("asleep")
        assert sup.state == "stopped" and sup.pid is None and sup.restarts == 0
        assert sup.readiness() == (False, "stopped: asleep")
        await asyncio.sleep(0.2)  # nothing restarts it
        assert sup.pid is None and sup.restarts == 0
        await sup.wait_ready()  # the wake: a fresh process
        assert sup.pid not in (None, old) and sup.restarts == 0
        assert (await sup.request({"op": "echo"}, b"x"))[0]["n"] == 1
    finally:
        await sup.aclose()


async def test_a_worker_that_dies_mid_request_fails_it_and_the_next_request_is_served():
    sup = FakeSupervisor()
    try:
        await sup.wait_ready()
        with pytest.raises(WorkerError, match=r"in flight \(worker exited with code 7\)") as err:
            await sup.request({"op": "die"})
        assert err.value.crashed
        await sup.wait_ready()
        assert (await sup.request({"op": "echo"}, b"x"))[0]["n"] == 1 and sup.restarts == 1
    finally:
        await sup.aclose()


async def test_a_stderr_line_over_the_reader_limit_neither_stops_supervision_nor_hangs_requests():
    """A worker's stderr line longer than the reader's 1 MiB line limit (a library dumping a
    tensor, a traceback of a huge prompt) must not end the stderr pump (asyncio raises ValueError
    there): the worker's next death would then skip failing its in-flight requests (they would
    hang) and stderr would no longer be drained."""
    sup = FakeSupervisor()
    try:
        await sup.wait_ready()
        assert (await sup.request({"op": "shout", "n": 3 * 1024 * 1024}))[0]["ok"] is True
        assert (await sup.request({"op": "shout", "n": 10}))[0]["ok"] is True  # still drained
        with pytest.raises(WorkerError, match=r"in flight \(worker exited with code 7\)$"):  # its stderr: the log's
            await asyncio.wait_for(sup.request({"op": "die"}), 10)
        await asyncio.wait_for(sup.wait_ready(), 20)
        assert sup.restarts == 1 and (await sup.request({"op": "echo"}, b"ok"))[1] == b"ok"
    finally:
        await sup.aclose()


@pytest.mark.parametrize("level", [logging.INFO, logging.WARNING])
async def test_a_worker_stderr_line_is_logged_at_its_launch_level(caplog, level):
    caplog.set_level(logging.DEBUG, logger=__name__)
    sup = FakeSupervisor(stderr_level=level)
    try:
        await sup.wait_ready()
        assert (await sup.request({"op": "shout", "n": 5}))[0]["ok"] is True
        for _ in range(100):  # the stderr pump runs beside the reply
            if any("xxxxx" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0.02)
        lines = [r for r in caplog.records if r.getMessage() == "fake worker worker: xxxxx"]
        assert [(r.name, r.levelno) for r in lines] == [(__name__, level)]
    finally:
        await sup.aclose()


def test_the_latent_decoder_stderr_is_logged_at_warning_so_it_shows_by_default():
    # The CLI logs WARNING and up unless --verbose; the decoder's stderr (VAE load messages,
    # warnings, tracebacks) went straight to the gateway's stderr before it was piped.
    assert LatentDecoderSupervisor(LatentDecoderConfig(python=sys.executable)).launch().stderr_level == logging.WARNING


async def test_a_request_past_its_timeout_kills_the_stuck_worker_which_restarts():
    sup = FakeSupervisor()
    try:
        await sup.wait_ready()
        old = sup.pid
        t0 = time.monotonic()
        with pytest.raises(WorkerError, match=r"fake worker gave no answer within 1s \(restarted\)") as err:
            await sup.request({"op": "sleep", "s": 30}, timeout=1.0)
        assert err.value.crashed and 0.9 < time.monotonic() - t0 < 5
        await sup.wait_ready()
        assert sup.pid not in (None, old) and sup.restarts == 1
    finally:
        await sup.aclose()


@pytest.mark.parametrize("mode, reason", [
    ("fatal", "model 'x' not found"),
    ("exit", "worker exited with code 3 before loading (its last stderr lines are in the gateway's log)"),
])
async def test_a_worker_that_cannot_start_fails_the_supervisor_with_its_reason(mode, reason, caplog):
    """The reason reaches replies (readiness, cells, pulls) and never quotes the worker's stderr:
    its last lines go to the gateway's log."""
    sup = FakeSupervisor(mode)
    try:
        with pytest.raises(WorkerError, match=re.escape(f"fake worker is failed: {reason}")):
            await sup.wait_ready()
        assert sup.readiness() == (False, f"failed: {reason}") and sup.restarts == 0
        if mode == "exit":
            assert "cannot start: told to" not in str(sup.readiness())
            assert "last stderr: cannot start: told to" in caplog.text
        with pytest.raises(WorkerError, match=re.escape(f"fake worker failed to load: {reason}")):
            await sup.wait_ready()  # within retry_failed_load_s: no new process
        with pytest.raises(WorkerError, match="worker is not running"):
            await sup.request({"op": "echo"})
    finally:
        await sup.aclose()


async def test_aclose_asks_the_worker_to_exit_and_refuses_later_use():
    sup = FakeSupervisor()
    await sup.wait_ready()
    proc = sup._proc
    await sup.aclose()
    assert proc is not None and proc.returncode == 0  # it exited on the shutdown frame, not killed
    assert sup.state == "closed"
    with pytest.raises(WorkerError, match="fake worker is closed"):
        sup.ensure_started()


def test_the_latent_worker_script_speaks_the_shared_framing_without_the_package():
    """Run as a script (as the gateway runs it under the torch venv, which cannot import
    judge_gateway): the handshake, a reply that repeats its request's id, shutdown."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen([sys.executable, "-I", str(ROOT / "judge_gateway" / "latent_worker.py")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd="/")
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(encode_frame({"op": "init"}))
        proc.stdin.flush()
        assert read_frame(proc.stdout) == ({"op": "ready", "info": {}}, b"")
        proc.stdin.write(encode_frame({"op": "nope", "id": 7}, b"123"))
        proc.stdin.flush()
        assert read_frame(proc.stdout) == ({"id": 7, "ok": False, "error": "ValueError: unknown op 'nope'"}, b"")
        proc.stdin.write(encode_frame({"op": "shutdown"}))
        proc.stdin.flush()
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_the_torch_worker_runs_under_the_supervisor_and_restarts_after_a_kill():
    # This interpreter has no torch: `ping` reaches the worker and comes back as its error.
    worker = LatentDecoderSupervisor(LatentDecoderConfig(python=sys.executable, start_timeout_s=30))
    try:
        with pytest.raises(LatentDecoderError, match="ModuleNotFoundError: No module named 'torch'") as err:
            await worker.ping()
        assert not err.value.crashed and worker.state == "ready"
        old = worker.pid
        os.kill(old, signal.SIGKILL)
        while worker.pid == old:  # until the supervisor has seen it die
            await asyncio.sleep(0.02)
        with pytest.raises(LatentDecoderError, match="ModuleNotFoundError"):
            await worker.ping()  # waits out the restart, then is answered
        assert worker.pid not in (None, old) and worker.restarts == 1
    finally:
        await worker.aclose()
    assert worker.pid is None
