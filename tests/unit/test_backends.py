"""Backend pool: least-outstanding balancing, retries across replicas, ejection, deadlines."""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest

from judge_gateway.backends import (
    BUSY_COUNTS_AS_READY_S,
    BackendError,
    BackendPool,
    BackendUnavailable,
)
from judge_gateway.config import BackendConfig
from tests.support.fake_openai import FakeOpenAIServer, free_port

YES_NO = {"messages": [{"role": "user", "content": "q"}], "max_tokens": 1, "logprobs": True, "top_logprobs": 5}


@pytest.fixture(scope="module")
def two_backends():
    a = FakeOpenAIServer().start()
    b = FakeOpenAIServer().start()
    yield a, b
    a.stop()
    b.stop()


async def test_load_spreads_over_replicas(two_backends):
    a, b = two_backends
    before = (a.counters["requests"], b.counters["requests"])
    pool = BackendPool("p", BackendConfig(model="fake-yes", base_urls=[a.base_url, b.base_url]))
    try:
        await asyncio.gather(*(pool.chat(**YES_NO) for _ in range(40)))
    finally:
        await pool.aclose()
    served = (a.counters["requests"] - before[0], b.counters["requests"] - before[1])
    assert sum(served) == 40
    assert min(served) >= 10, served  # least-outstanding keeps both busy


async def test_dead_replica_is_retried_elsewhere_then_ejected(two_backends):
    a, _ = two_backends
    dead = f"http://127.0.0.1:{free_port()}/v1"
    cfg = BackendConfig(model="fake-yes", base_urls=[dead, a.base_url], max_retries=2,
                        eject_after_failures=2, eject_cooldown_s=60, connect_timeout_s=1)
    pool = BackendPool("p", cfg)
    try:
        results = [await pool.chat(**YES_NO) for _ in range(10)]
        stats = {s["base_url"]: s for s in pool.stats()}
    finally:
        await pool.aclose()
    assert all(r["choices"][0]["logprobs"]["content"] for r in results)  # every call answered
    assert stats[dead]["ejected"] is True and stats[dead]["served"] == 0
    assert stats[a.base_url]["served"] == 10


async def test_all_replicas_down_is_backend_unavailable():
    cfg = BackendConfig(model="m", base_urls=[f"http://127.0.0.1:{free_port()}/v1"], max_retries=1,
                        connect_timeout_s=1)
    pool = BackendPool("p", cfg)
    try:
        with pytest.raises(BackendUnavailable):
            await pool.chat(**YES_NO)
    finally:
        await pool.aclose()


async def test_client_errors_are_not_retried(two_backends):
    a, _ = two_backends
    before = a.counters["requests"]
    pool = BackendPool("p", BackendConfig(model="fake-400", base_urls=[a.base_url], max_retries=3))
    try:
        with pytest.raises(BackendError, match="HTTP 400"):
            await pool.chat(**YES_NO)
    finally:
        await pool.aclose()
    assert a.counters["requests"] - before == 1


async def test_concurrency_limit_per_replica():
    slow = FakeOpenAIServer(stall_s=0.2).start()
    pool = BackendPool("p", BackendConfig(model="fake-stall", base_urls=[slow.base_url], max_concurrency=3))
    try:
        await asyncio.gather(*(pool.chat(**YES_NO) for _ in range(12)))
    finally:
        await pool.aclose()
        slow.stop()
    assert slow.counters["requests"] == 12
    assert slow.counters["max_inflight"] == 3  # never more than the limit, and the limit is used


async def test_a_slow_model_list_is_busy_not_down_when_the_replica_just_answered_a_call():
    """A vLLM server under load can be slow to list its models; if it answered a scoring call
    recently it is up, and the gateway must not refuse enqueues (503) because of it. A replica
    that never answered (or not lately) and does not list its models in time is not ready."""
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)  # reads the request, never answers
        await asyncio.sleep(30)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = BackendPool("p", BackendConfig(model="m", base_urls=[f"http://127.0.0.1:{port}/v1"]))
    try:
        ready, reason = await pool.probe(timeout_s=0.3)
        assert not ready and "replica 1 of 1: no answer within" in (reason or "")
        replica = pool.replicas[0]
        replica.answered_at = time.monotonic() - (BUSY_COUNTS_AS_READY_S + 1)  # answered, but long ago
        assert (await pool.probe(timeout_s=0.3))[0] is False
        pool._record(replica, ok=True)  # what an answered call records
        assert await pool.probe(timeout_s=0.3) == (True, None)
    finally:
        await pool.aclose()
        server.close()


async def test_a_probe_that_meets_reset_connections_asks_again_and_a_refusal_is_reported_at_once():
    """vLLM's server closes a connection idle for 5 s, the probe interval; one closed as the probe
    writes reads as a reset. A probe asks again rather than report the replica down (which made
    cosmos-rl enqueues answer 503); a server that refuses connections is not ready at once."""
    connections = []
    resets = 2  # one call of the SDK's aiohttp transport opens two connections before it gives up

    async def resets_first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(True)
        await reader.readuntil(b"\r\n\r\n")
        if len(connections) <= resets:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()  # closed with linger 0: the client reads a reset
            return
        body = b'{"object": "list", "data": [{"id": "m", "object": "model", "created": 0, "owned_by": "x"}]}'
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                     + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(resets_first, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = BackendPool("p", BackendConfig(model="m", base_urls=[f"http://127.0.0.1:{port}/v1"]))
    try:
        assert await pool.probe(timeout_s=5) == (True, None)
        assert len(connections) > resets
    finally:
        await pool.aclose()
        server.close()
    dead = BackendPool("p", BackendConfig(model="m", base_urls=[f"http://127.0.0.1:{free_port()}/v1"]))
    try:
        started = time.monotonic()
        ready, reason = await dead.probe(timeout_s=5)
        assert not ready and "replica 1 of 1: cannot connect (ConnectionRefusedError)" in (reason or ""), reason
        assert time.monotonic() - started < 1.0  # not asked again
    finally:
        await dead.aclose()
