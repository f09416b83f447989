"""A dead backend fails fast (issue 33): once every replica is known down (connections refused, or
its readiness probe failing) and none answered for `down_after_s`, a call raises
backend_unavailable within about a second with the reason, however long its deadline; the first
answer (to a call, or to the one shared check a second) closes the circuit again. A replica that
answered recently and then refuses is a transient fault: retried until the deadline as before."""

from __future__ import annotations

import asyncio
import re
import time

from judge_gateway import backends
from judge_gateway.backends import RECHECK_DOWN_EVERY_S, BackendPool, BackendUnavailable
from judge_gateway.config import BackendConfig
from tests.support.fake_openai import FakeOpenAIServer, free_port

# "At once" here: well under the calls' 60 s deadline on a loaded 2-core machine (bench/dead_backend.py
# measures the real figure, a few milliseconds once the clients exist).
FAST_S = 10.0
YES_NO = {"messages": [{"role": "user", "content": "q"}], "max_tokens": 1, "logprobs": True, "top_logprobs": 5}


def _pool(url: str, **cfg) -> BackendPool:
    return BackendPool("judge_vlm", BackendConfig(model="fake-yes", base_urls=[url], **cfg))


async def _timed_call(pool: BackendPool, deadline_s: float = 60.0) -> tuple[float, BaseException | dict]:
    started = time.monotonic()
    try:
        with backends.deadline_at(time.monotonic() + deadline_s):
            got: BaseException | dict = await pool.chat(**YES_NO)
    except BackendUnavailable as exc:
        got = exc
    return time.monotonic() - started, got


async def test_a_backend_that_never_answered_fails_at_once_with_the_reason_and_no_url():
    port = free_port()
    pool = _pool(f"http://127.0.0.1:{port}/v1")
    try:
        first_s, first = await _timed_call(pool)
        again_s, again = await _timed_call(pool)
    finally:
        await pool.aclose()
    for took, got in ((first_s, first), (again_s, again)):
        assert isinstance(got, BackendUnavailable), got
        assert took < FAST_S, took  # not the call's 60 s deadline
        message = str(got)
        assert message.startswith("backend 'judge_vlm' is down (it never answered): replica 1 of 1: cannot connect "
                                  "(ConnectionRefusedError)"), message
        assert str(port) not in message and "127.0.0.1" not in message
    assert pool.stats()[0]["down"] is True


async def test_the_first_answer_closes_the_circuit():
    port = free_port()
    pool = _pool(f"http://127.0.0.1:{port}/v1")
    server = None
    try:
        _, got = await _timed_call(pool)
        assert isinstance(got, BackendUnavailable) and pool.down()
        server = await asyncio.to_thread(FakeOpenAIServer(port=port).start)
        back = time.monotonic()
        while True:  # calls fail fast until the next shared check (one a second) sees it answer
            took, got = await _timed_call(pool)
            if not isinstance(got, BaseException):
                break
            assert took < FAST_S and time.monotonic() - back < RECHECK_DOWN_EVERY_S + FAST_S, got
            await asyncio.sleep(0.1)
        assert got["choices"][0]["logprobs"]["content"]
        assert not pool.down() and pool.stats()[0]["down"] is False
    finally:
        await pool.aclose()
        if server is not None:
            server.stop()


async def test_a_replica_that_answered_recently_is_a_transient_fault_and_is_waited_out():
    """A server restarting right after it answered: the call waits it out (retried until its
    deadline), a real reply rather than backend_unavailable."""
    server = await asyncio.to_thread(FakeOpenAIServer().start)
    port = server.port
    pool = _pool(server.base_url)  # down_after_s: the default 10 s
    restarted = None
    try:
        assert (await pool.chat(**YES_NO))["choices"]
        await asyncio.to_thread(server.kill)

        async def restart_later() -> FakeOpenAIServer:
            await asyncio.sleep(1.5)
            return await asyncio.to_thread(FakeOpenAIServer(port=port).start)

        restart = asyncio.ensure_future(restart_later())
        took, got = await _timed_call(pool, deadline_s=30)
        restarted = await restart
    finally:
        await pool.aclose()
        if restarted is not None:
            restarted.stop()
    assert not isinstance(got, BaseException), got
    assert took >= 1.0, took  # it did wait for the restart


async def test_a_fault_outlasting_down_after_s_stops_the_retries_of_calls_in_flight():
    server = await asyncio.to_thread(FakeOpenAIServer().start)
    pool = _pool(server.base_url, down_after_s=1.0)
    try:
        assert (await pool.chat(**YES_NO))["choices"]
        await asyncio.to_thread(server.kill)
        took, got = await _timed_call(pool, deadline_s=60)
        assert isinstance(got, BackendUnavailable), got
        assert took < 1.0 + FAST_S, took  # down_after_s, plus a back-off step: not the 60 s deadline
        assert re.search(r"is down \(no answer for \d+ s\): replica 1 of 1: cannot connect", str(got)), got
        after_s, after = await _timed_call(pool, deadline_s=60)
        assert isinstance(after, BackendUnavailable) and after_s < FAST_S, (after_s, after)
    finally:
        await pool.aclose()


async def test_a_refusing_readiness_probe_marks_it_down_and_a_slow_one_does_not():
    port = free_port()
    pool = _pool(f"http://127.0.0.1:{port}/v1")
    try:
        ready, reason = await pool.probe(timeout_s=2)
        assert not ready and "cannot connect (ConnectionRefusedError)" in (reason or "")
        assert pool.down()  # known down before any call was made
        took, got = await _timed_call(pool)
        assert isinstance(got, BackendUnavailable) and took < FAST_S, (took, got)
    finally:
        await pool.aclose()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        await asyncio.sleep(30)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    slow = _pool(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")
    try:
        ready, reason = await slow.probe(timeout_s=0.3)
        assert not ready and "no answer within 0.3s" in (reason or "")
        assert not slow.down()  # slow is not gone: its calls are still tried
    finally:
        await slow.aclose()
        server.close()


async def test_calls_to_a_down_backend_share_one_check_of_about_a_second():
    """Twenty calls arriving at once while the backend is down (it refused before, and now takes
    connections but answers nothing) wait for one shared check, bounded at about a second, not
    for their reads (60 s)."""
    connections = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(True)
        await reader.read(65536)
        await asyncio.sleep(30)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    pool = _pool(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", timeout_s=60)
    try:
        pool.replicas[0].mark_down("cannot connect (ConnectionRefusedError)")  # what a refused call records
        assert pool.down()
        started = time.monotonic()
        results = await asyncio.gather(*(_timed_call(pool) for _ in range(20)))
        took = time.monotonic() - started
    finally:
        await pool.aclose()
        server.close()
    assert all(isinstance(got, BackendUnavailable) for _, got in results), results
    assert "replica 1 of 1: cannot connect (ConnectionRefusedError)" in str(results[0][1])
    assert took < backends.RECHECK_TIMEOUT_S + FAST_S, took  # not the 60 s read timeout
    # one shared check (its model list asks up to three times on a connection that fails otherwise
    # than by a refusal; a timeout ends it): never a connection per call
    assert 1 <= len(connections) <= 3, len(connections)


async def test_one_live_replica_keeps_the_circuit_closed():
    live = await asyncio.to_thread(FakeOpenAIServer().start)
    dead = f"http://127.0.0.1:{free_port()}/v1"
    pool = BackendPool("p", BackendConfig(model="fake-yes", base_urls=[dead, live.base_url], eject_after_failures=1))
    try:
        replies = [await pool.chat(**YES_NO) for _ in range(6)]
        assert not pool.down()
    finally:
        await pool.aclose()
        live.stop()
    assert all(r["choices"] for r in replies)


async def test_down_after_s_zero_counts_any_refusal_as_down():
    server = await asyncio.to_thread(FakeOpenAIServer().start)
    pool = _pool(server.base_url, down_after_s=0.0)
    try:
        assert (await pool.chat(**YES_NO))["choices"]
        await asyncio.to_thread(server.kill)
        took, got = await _timed_call(pool)
    finally:
        await pool.aclose()
    assert isinstance(got, BackendUnavailable) and took < FAST_S, (took, got)


async def test_what_cannot_score_is_one_list_for_every_protocol_dead_backends_and_failed_heads():
    """Gateway.unscorable, behind Flow-Factory's per-profile /health and the cosmos-rl ping: a VLM
    judge whose backend is down and a head whose worker cannot start are listed with the reason; a
    head still loading is not (its requests wait for the load)."""
    from judge_gateway.config import validate_config
    from judge_gateway.gateway import Gateway

    gw = Gateway(validate_config({
        "backends": {"dead": {"model": "m", "base_urls": [f"http://127.0.0.1:{free_port()}/v1"]}},
        "judges": {"vlm": {"kind": "yes_no", "backend": "dead", "template": "image_quality@1"},
                   "broken": {"kind": "ocr", "options": {"python": "/nonexistent/bin/python"}},
                   "loading": {"kind": "ocr"}}}))
    try:
        first = await gw.unscorable(["vlm", "broken", "loading"])
        assert set(first) <= {"vlm", "broken"} and "cannot connect (ConnectionRefusedError)" in first["vlm"]
        for _ in range(100):  # the broken head's start fails within moments
            later = await gw.unscorable(["vlm", "broken", "loading"])
            if "broken" in later:
                break
            await asyncio.sleep(0.1)
        assert later["broken"].startswith("failed: cannot start head 'broken'"), later
        assert "loading" not in later
    finally:
        await gw.aclose()
