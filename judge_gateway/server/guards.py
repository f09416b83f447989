"""Guards every request passes, whatever its route: slow clients, header limits, media budgets,
and a JSON 500 as the last resort for a bug.

- `GuardedH11Protocol` (the HTTP protocol `judge-gateway serve` runs): a request's headers
  must arrive within `server.header_timeout_s` of its first byte (or of the connection opening),
  its body within `server.body_timeout_s` of its headers; else 408 and the connection closes.
  Uvicorn has no read timeout of its own, so a client trickling bytes held a connection forever.
  h11 bounds the header block (`server.max_header_bytes`; httptools, uvicorn's default when
  installed, does not).
- `RequestGuardMiddleware`, the one middleware of ours every request passes (outermost but for the
  peer check; one layer instead of four, each with its own receive and send wrappers): refuses
  more than `server.max_headers` headers or `server.max_header_bytes` of them (431), a request
  with both Content-Length and Transfer-Encoding (400, connection closed: h11 lets
  Transfer-Encoding win, a proxy in front may not, and the difference smuggles requests), a body
  over `server.max_body_bytes` (413, declared or counted as it arrives), a request without an API
  key when keys are set (401, auth.py) or, without keys, what a web page in a browser may not send
  (a foreign Host, a cross-site state change, a non-JSON body on a JSON route: origin.py); validates
  the request's media under the `[media]` budgets
  (`media.request_limits`); turns an unexpected exception into a logged 500 with a JSON body; and
  after the response has the heap trimmed when the request was large (heap.HeapTrimmer).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any

import h11
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..config import ServerConfig
from ..exceptions import InvalidInput
from ..media import MediaLimits, request_limits
from .auth import refusal
from .errors import error_bytes, error_response
from .heap import HeapTrimmer
from .origin import OriginPolicy

log = logging.getLogger(__name__)


def _raw_response(status: int, reason: str, body: bytes) -> bytes:
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n")
    return head.encode("ascii") + body


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with deadlines on reading a request (build with `guarded_protocol`)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_timer: asyncio.TimerHandle | None = None
        self._read_phase: str | None = None  # "headers" | "body" | None (nothing being read)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._enter("headers")

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        state = self.conn.their_state
        if state is h11.IDLE:
            self._enter("headers")  # part of a request line or headers is buffered
        elif state is h11.SEND_BODY:
            self._enter("body")
        else:
            self._enter(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._enter(None)
        super().connection_lost(exc)

    def _enter(self, phase: str | None) -> None:
        if phase == self._read_phase:
            return
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None
        self._read_phase = phase
        if phase is not None:
            limit = self.header_timeout_s if phase == "headers" else self.body_timeout_s
            self._read_timer = self.loop.call_later(limit, self._read_timed_out, phase)

    def _read_timed_out(self, phase: str) -> None:
        self._read_timer = None
        self._read_phase = None
        if self.transport.is_closing():
            return
        key = "header_timeout_s" if phase == "headers" else "body_timeout_s"
        limit = self.header_timeout_s if phase == "headers" else self.body_timeout_s
        cycle = self.cycle if phase == "body" else None
        if cycle is None or not cycle.response_started:
            message = f"the request's {phase} did not arrive within server.{key} = {limit:g}s"
            self.transport.write(_raw_response(408, "Request Timeout", error_bytes("request_timeout", message)))
        if cycle is not None:  # the app reads http.disconnect and its replies are dropped
            cycle.disconnected = True
            cycle.message_event.set()
        self.logger.info("closed a connection from %s: %s not received within %gs", self.client, phase, limit)
        self.transport.close()


def guarded_protocol(cfg: ServerConfig) -> type[GuardedH11Protocol]:
    """The protocol class with this config's deadlines (uvicorn instantiates it per connection)."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,),
                {"header_timeout_s": cfg.header_timeout_s, "body_timeout_s": cfg.body_timeout_s})


def uvicorn_options(cfg: ServerConfig) -> dict[str, Any]:
    """Keyword arguments of `uvicorn.run`/`uvicorn.Config` that apply the [server] limits."""
    return {
        "http": guarded_protocol(cfg),
        "h11_max_incomplete_event_size": cfg.max_header_bytes,
        "timeout_keep_alive": cfg.keep_alive_s,
        # uvicorn trusts X-Forwarded-For from 127.0.0.1 unless told otherwise (its default
        # forwarded_allow_ips, or the FORWARDED_ALLOW_IPS variable): any local process could then
        # name an allowed address and pass server.allow_networks. Only the named proxies are trusted.
        "proxy_headers": bool(cfg.trusted_proxies),
        "forwarded_allow_ips": list(cfg.trusted_proxies),
    }


class _TooLarge(InvalidInput):
    """The body grew past server.max_body_bytes as it arrived."""


async def _empty_receive() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


class RequestGuardMiddleware:
    """Outermost but for the peer check: header limits, the body limit, API keys or the origin policy,
    media budgets, a JSON 500 for unexpected errors, the heap trimmed after large requests (the module
    docstring)."""

    def __init__(self, app: ASGIApp, max_headers: int, max_header_bytes: int, media_limits: MediaLimits,
                 max_body_bytes: int, api_keys: Sequence[bytes] = (), trimmer: HeapTrimmer | None = None,
                 origin: OriginPolicy | None = None) -> None:
        self.app = app
        self.max_headers = max_headers
        self.max_header_bytes = max_header_bytes
        self.media_limits = media_limits
        self.max_body_bytes = max_body_bytes
        self.api_keys = list(api_keys)
        self.trimmer = trimmer
        self.origin = origin  # without API keys: what a web page may not send (origin.py)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers", [])
        problem = None
        if len(headers) > self.max_headers:
            problem = f"{len(headers)} request headers, above server.max_headers = {self.max_headers}"
        else:
            size = sum(len(k) + len(v) + 4 for k, v in headers)  # "k: v\r\n"
            if size > self.max_header_bytes:
                # h11 bounds headers still arriving; a block that arrived whole is measured here
                problem = f"request headers of {size} bytes, above server.max_header_bytes = {self.max_header_bytes}"
        if problem is not None:
            await _send_json(send, 431, error_bytes("headers_too_large", problem))
            return
        declared = None
        chunked = False
        for name, value in headers:
            name = name.lower()
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
            elif name == b"transfer-encoding":
                chunked = True
        if declared is not None and chunked:
            # Which one frames the body is ambiguous between proxies and servers (request smuggling):
            # refused, and the connection closed, so nothing after it is read as a request.
            await _send_json(send, 400, error_bytes("ambiguous_body_length", (
                "a request with both Content-Length and Transfer-Encoding is refused: its body length is "
                "ambiguous; send one of them")))
            return
        if self.origin is not None:
            refused_origin = self.origin.check(scope["method"], scope["path"], headers)
            if refused_origin is not None:
                log.info("refused %s %s: %s", scope["method"], scope["path"][:200], refused_origin.message)
                await _send_json(send, refused_origin.status, error_bytes(refused_origin.code, refused_origin.message),
                                 message=refused_origin.message)
                return
        if declared is not None and declared > self.max_body_bytes:
            await self._too_large(send)
            return
        if self.api_keys:
            refused = refusal(scope.get("path", ""), headers, self.api_keys)
            if refused is not None:
                await refused(scope, _empty_receive, send)
                return
        seen = 0
        started = False
        limit = self.max_body_bytes

        async def guarded_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge()
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        released = self.trimmer.released() if self.trimmer is not None else 0
        try:
            with request_limits(self.media_limits):
                try:
                    await self.app(scope, guarded_receive, tracking_send)
                except _TooLarge:
                    if not started:
                        await self._too_large(send)
                except Exception as err:
                    log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
                    if started:
                        raise
                    await _send_json(send, 500, error_bytes(
                        "internal_error", f"{type(err).__name__} (a bug in the gateway; logged)"))
        finally:
            if self.trimmer is not None:
                self.trimmer.after(seen, released)

    async def _too_large(self, send: Send) -> None:
        response = error_response("body_too_large", f"request body exceeds server.max_body_bytes = "
                                  f"{self.max_body_bytes}", 413)
        await response({"type": "http"}, _empty_receive, send)


async def _send_json(send: Send, status: int, body: bytes, message: str | None = None) -> None:
    if message is not None:  # `message` and `status` at the top too: cosmos-rl's clients read them
        body = json.dumps({**json.loads(body), "message": message, "status": "rejected"}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
