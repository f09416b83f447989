"""The chat call's HTTP client (chat_http.ChatSession) against a raw socket server: the request goes
out in one piece and its connection is kept for the next call; a kept connection the server closed
while idle is replaced without a failure; a stalled reply times out, a refused connection, a reset
mid-reply and an error status fail as the OpenAI SDK's exceptions the backend pool reads."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest

from judge_gateway.backends import _as_fault
from judge_gateway.chat_http import ChatSession
from tests.support.fake_openai import free_port

REPLY = json.dumps({"choices": [{"message": {"content": "Yes"}}]}).encode()


class RawServer:
    """A server whose behaviour per request a test sets: answer (keep-alive or close), stall, reset."""

    def __init__(self) -> None:
        self.mode = "answer"
        self.requests: list[bytes] = []
        self.reads_per_request: list[int] = []
        self.connections = 0
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                body = await reader.readexactly(length)
                self.requests.append(head + body)
                if self.mode == "stall":
                    await asyncio.sleep(30)
                if self.mode == "reset":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"partial")
                    await writer.drain()
                    writer.transport.abort()
                    return
                status = b"503 Service Unavailable" if self.mode == "503" else b"200 OK"
                payload = b'{"error": {"message": "busy"}}' if self.mode == "503" else REPLY
                close = self.mode == "close"
                writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(payload)).encode() + (b"\r\nConnection: close" if close else b"")
                             + b"\r\n\r\n" + payload)
                await writer.drain()
                if close:
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            return

    def drop_idle(self) -> None:
        """Close every connection, as uvicorn's keep-alive timeout does to idle ones."""
        for w in self.writers:
            w.close()
        self.writers.clear()

    async def stop(self) -> None:
        self.drop_idle()
        self.server.close()


@pytest.fixture
async def raw():
    server = RawServer()
    url = await server.start()
    yield server, url
    await server.stop()


async def test_calls_reuse_one_connection_and_send_the_body_as_given(raw) -> None:
    server, url = raw
    session = ChatSession(url, "k", timeout_s=5, connect_timeout_s=2)
    try:
        bodies = [json.dumps({"n": i}).encode() for i in range(5)]
        for body in bodies:
            assert (await session.post(body))["choices"][0]["message"]["content"] == "Yes"
    finally:
        await session.close()
    assert server.connections == 1
    head, _, sent = server.requests[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n") and b"Authorization: Bearer k" in head
    assert [r.partition(b"\r\n\r\n")[2] for r in server.requests] == bodies


async def test_a_kept_connection_the_server_closed_is_replaced_without_a_failure(raw) -> None:
    server, url = raw
    session = ChatSession(url, "k", timeout_s=5, connect_timeout_s=2)
    try:
        await session.post(b"{}")
        server.drop_idle()
        await asyncio.sleep(0.05)  # the close reaches the client: its kept connection is marked closed
        await session.post(b"{}")
        server.mode = "close"  # the server says Connection: close: the next call opens a new one
        await session.post(b"{}")
        server.mode = "answer"
        await session.post(b"{}")
    finally:
        await session.close()
    assert server.connections == 3 and len(server.requests) == 4


async def test_failures_are_the_sdk_exceptions_the_pool_maps(raw) -> None:
    server, url = raw
    session = ChatSession(url, "k", timeout_s=0.3, connect_timeout_s=2)
    try:
        server.mode = "stall"
        with pytest.raises(openai.APITimeoutError):
            await session.post(b"{}")
        server.mode = "reset"
        with pytest.raises(openai.APIConnectionError) as reset:
            await session.post(b"{}")
        assert "(ReplyCut)" in str(_as_fault(reset.value, "backend 'b'"))  # a transient fault: retried
        server.mode = "503"
        with pytest.raises(openai.InternalServerError, match="busy"):
            await session.post(b"{}")
    finally:
        await session.close()
    refused = ChatSession(f"http://127.0.0.1:{free_port()}/v1", "k", timeout_s=1, connect_timeout_s=1)
    with pytest.raises(openai.APIConnectionError) as down:
        await refused.post(b"{}")
    await refused.close()
    assert str(_as_fault(down.value, "backend 'b'")) == "backend 'b': cannot connect (ConnectionRefusedError)"
