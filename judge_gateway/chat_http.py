"""POST /chat/completions on one replica: the whole HTTP/1.1 request (its head, prebuilt once per
replica, and the body the pool serialised once per call) written to a kept-alive connection in one
transport write, the reply read by httptools' parser; failures raised as the OpenAI SDK's exception
types, so the backend pool's retries and fault mapping read them as before.

The SDK's request path cost ~1.1 ms of CPU per call here, aiohttp's ~0.5 ms (its request object,
header multidicts, URL, cookie jar and timers, a task per body write: ~21% of a yes/no request's
gateway CPU in issue 34's profile); this one is a bytes join, one write and a parse. The SDK keeps
everything else (model listing for readiness).

Connections: one per call in flight, kept alive and reused while the server keeps them (its
`Connection: close`, or an error, ends one); a kept connection the server closed while it sat idle
(uvicorn's keep-alive timeout) fails before any byte of a reply, and the call is then sent once more
on a new connection (the server never read it). Timeouts as the SDK's: `connect_timeout_s` to
connect, `timeout_s` between two reads of a reply (not in total: a long rubric reply may take
minutes; the judge's deadline bounds the whole call).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections import deque
from typing import Any
from urllib.parse import urlsplit

import httptools
import openai

from .exceptions import Unavailable

try:  # the HTTP library of the installed SDK: httpx2 from openai 3, httpx before
    import httpx2 as _http
except ImportError:  # pragma: no cover - older openai
    import httpx as _http  # type: ignore[no-redef]

MAX_REPLY_BYTES = 64 << 20  # a chat completion is kilobytes; more is a broken server


class ConnectTimeout(Unavailable, TimeoutError):
    """No connection within connect_timeout_s (its name says "Connect": backends reads it as down)."""


class ConnectFailed(Unavailable, ConnectionError):
    """The connection could not be made (refused, unreachable, no such host); the cause says how."""


class ReplyCut(Unavailable, OSError):
    """The server closed a connection before its reply ended (not a ConnectionError: the replica was
    there, backends reads it as a failed connection, not as a down server)."""

    def __init__(self, reply_started: bool) -> None:
        super().__init__("the server closed the connection before its reply ended"
                         + ("" if reply_started else " (no reply byte)"))
        self.reply_started = reply_started


class _Reply(asyncio.Protocol):
    """One connection: writes a request, parses its reply (httptools), then waits for the next."""

    def __init__(self, read_timeout_s: float) -> None:
        self.read_timeout_s = read_timeout_s
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.used = False  # has carried a call: a close before its reply may be the server's idle timeout
        self._parser = httptools.HttpResponseParser(self)
        self._reset()

    def _reset(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._done: asyncio.Future[tuple[int, bytes, str, bool]] | None = None
        self._body: list[bytes] = []
        self._size = 0
        self._received = False
        self._content_type = ""
        self._last_header = b""
        self._timer: asyncio.TimerHandle | None = None

    # ---- the call ---------------------------------------------------------------------------

    async def send(self, data: bytes) -> tuple[int, bytes, str, bool, bool]:
        """(status, body, content type, keep-alive, True), or raises OSError (ReplyCut) / TimeoutError."""
        assert self.transport is not None
        self._body, self._size, self._received, self._content_type = [], 0, False, ""
        self._done = self._loop.create_future()
        self.used = True
        self.transport.write(data)  # one write: the head and the body, already joined
        self._arm()
        try:
            status, body, content_type, keep = await self._done
        finally:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        return status, body, content_type, keep, True

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(self.read_timeout_s, self._timed_out)

    def _timed_out(self) -> None:
        self._timer = None
        self._fail(TimeoutError(f"no reply byte within {self.read_timeout_s:g} s"))

    def _fail(self, err: BaseException) -> None:
        done = self._done
        if done is not None and not done.done():
            done.set_exception(err)
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    # ---- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._done is None or self._done.done():
            self.close()  # bytes nobody asked for: this connection cannot be trusted again
            return
        self._received = True
        self._arm()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ReplyCut(True))
        except httptools.HttpParserError as err:
            self._fail(OSError(f"unreadable HTTP reply: {err}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        done = self._done
        if done is not None and not done.done():
            done.set_exception(ReplyCut(self._received))

    # ---- httptools callbacks ------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-type":
            self._content_type = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > MAX_REPLY_BYTES:
            self._fail(OSError(f"a reply over {MAX_REPLY_BYTES} bytes"))
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        done = self._done
        if done is not None and not done.done():
            keep = self._parser.should_keep_alive()
            done.set_result((self._parser.get_status_code(), b"".join(self._body), self._content_type, keep))


class ChatSession:
    """One replica's connections, made on (and bound to) the event loop that uses it."""

    def __init__(self, base_url: str, api_key: str, timeout_s: float, connect_timeout_s: float) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        host = parts.netloc.rpartition("@")[2]
        self._head = (f"POST {parts.path or '/'}{'?' + parts.query if parts.query else ''} HTTP/1.1\r\n"
                      f"Host: {host}\r\nContent-Type: application/json\r\nAccept: application/json\r\n"
                      f"Authorization: Bearer {api_key}\r\nUser-Agent: judge-gateway\r\n"
                      "Content-Length: ").encode("latin-1")
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._idle: deque[_Reply] = deque()
        self._busy: set[_Reply] = set()
        self._closed = False

    def _request(self) -> Any:
        return _http.Request("POST", self.url)

    async def _connect(self) -> _Reply:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(lambda: _Reply(self.timeout_s), self._host, self._port,
                                                       ssl=self._ssl)
        except TimeoutError:
            raise ConnectTimeout(f"no connection within {self.connect_timeout_s:g} s") from None
        except OSError as err:
            raise ConnectFailed(str(err)) from err
        return conn

    def _checkout(self) -> _Reply | None:
        while self._idle:
            conn = self._idle.pop()  # the most recent: the least likely to have been closed by the server
            if not conn.closed:
                return conn
        return None

    async def post(self, body: bytes) -> Any:
        """The reply's JSON; an SDK exception (APIConnectionError, APITimeoutError, APIStatusError
        and its subclasses) when the call fails."""
        if self._closed:
            raise openai.APIConnectionError(message="the backend's session is closed", request=self._request())
        data = b"".join((self._head, str(len(body)).encode("ascii"), b"\r\n\r\n", body))
        try:
            status, reply, content_type = await self._exchange(data)
        except ConnectTimeout as err:  # the connect phase: the replica is not there
            raise openai.APIConnectionError(message="Connection timed out.", request=self._request()) from err
        except TimeoutError as err:
            raise openai.APITimeoutError(request=self._request()) from err
        except OSError as err:  # refused, reset, closed mid-reply
            raise openai.APIConnectionError(message=f"Connection error: {err}", request=self._request()) from err
        if status >= 400:
            raise _status_error(status, reply, content_type, self._request())
        try:
            return json.loads(reply)
        except ValueError as err:
            raise openai.APIResponseValidationError(
                response=_http.Response(status, content=reply, request=self._request()),
                body=reply.decode(errors="replace"), message=f"the reply is not JSON ({err})") from None

    async def _exchange(self, data: bytes) -> tuple[int, bytes, str]:
        conn = self._checkout()
        kept = conn is not None
        for attempt in range(2):
            if conn is None:
                conn = await self._connect()
            self._busy.add(conn)
            try:
                status, reply, content_type, keep, _ = await conn.send(data)
            except ReplyCut as err:
                conn.close()
                # A kept connection the server closed while it was idle, before any reply byte: the
                # request was never read there; once more on a new connection.
                if kept and attempt == 0 and not err.reply_started:
                    conn, kept = None, False
                    continue
                raise
            except BaseException:  # a timeout, a cancelled caller: the connection is mid-reply, unusable
                conn.close()
                raise
            finally:
                self._busy.discard(conn)
            if keep and not conn.closed and not self._closed:
                self._idle.append(conn)
            else:
                conn.close()
            return status, reply, content_type
        raise AssertionError("unreachable")  # pragma: no cover

    async def close(self) -> None:
        self._closed = True
        for conn in [*self._idle, *self._busy]:
            conn.close()
        self._idle.clear()


def _status_error(status: int, data: bytes, content_type: str, request: Any) -> openai.APIStatusError:
    response = _http.Response(status, content=data, headers={"Content-Type": content_type}, request=request)
    try:
        body: object = json.loads(data)
    except ValueError:
        body = data.decode(errors="replace")
    error = body.get("error", body) if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    text = f"Error code: {status}" + (f" - {message}" if isinstance(message, str) and message else "")
    kind = {400: openai.BadRequestError, 401: openai.AuthenticationError, 403: openai.PermissionDeniedError,
            404: openai.NotFoundError, 409: openai.ConflictError, 422: openai.UnprocessableEntityError,
            429: openai.RateLimitError}.get(status)
    if kind is None:
        kind = openai.InternalServerError if status >= 500 else openai.APIStatusError
    return kind(text, response=response, body=body)
