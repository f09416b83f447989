"""POST /chat/completions on one replica straight through aiohttp, failing with the OpenAI SDK's
own exception types, so the backend pool's retries and fault mapping read them as before.

The SDK's request path (options models, header objects, its httpx-on-aiohttp transport, the
response wrapper) cost ~1.1 ms of CPU per call here, more than the rest of a yes/no judgement
on the gateway; this one is an aiohttp POST of bytes already serialised and a json.loads. The
SDK keeps everything else (model listing for readiness).
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import openai

try:  # the HTTP library of the installed SDK: httpx2 from openai 3, httpx before
    import httpx2 as _http
except ImportError:  # pragma: no cover - older openai
    import httpx as _http  # type: ignore[no-redef]


class ChatSession:
    """One replica's connection pool, made on (and bound to) the event loop that uses it."""

    def __init__(self, base_url: str, api_key: str, timeout_s: float, connect_timeout_s: float) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.headers = {"Content-Type": "application/json", "Accept": "application/json",
                        "Authorization": f"Bearer {api_key}"}
        # As the SDK's timeout: connect_timeout_s to connect, timeout_s for each read (not in total:
        # a long rubric reply may take minutes; the judge's deadline bounds the whole call).
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, sock_read=timeout_s)
        # no connection cap here: the pool's semaphore is the replica's concurrency limit
        self._session = aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0))

    def _request(self) -> Any:
        return _http.Request("POST", self.url)

    async def post(self, body: bytes) -> Any:
        """The reply's JSON; an SDK exception (APIConnectionError, APITimeoutError, APIStatusError
        and its subclasses) when the call fails."""
        try:
            async with self._session.post(self.url, data=body, headers=self.headers) as resp:
                data = await resp.read()
                status = resp.status
                content_type = resp.headers.get("Content-Type", "")
        except aiohttp.ConnectionTimeoutError as err:  # the connect phase: the replica is not there
            raise openai.APIConnectionError(message="Connection timed out.", request=self._request()) from err
        except (TimeoutError, aiohttp.SocketTimeoutError) as err:
            raise openai.APITimeoutError(request=self._request()) from err
        except aiohttp.ClientError as err:  # refused, reset, closed mid-reply
            raise openai.APIConnectionError(message=f"Connection error: {err}", request=self._request()) from err
        if status >= 400:
            raise _status_error(status, data, content_type, self._request())
        try:
            return json.loads(data)
        except ValueError as err:
            raise openai.APIResponseValidationError(
                response=_http.Response(status, content=data, request=self._request()), body=data.decode(errors="replace"),
                message=f"the reply is not JSON ({err})") from None

    async def close(self) -> None:
        await self._session.close()


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
