"""Stop a request's scoring when its HTTP client goes away.

A trainer that gives up on a request (Flow-Factory's client times out after 60 s) sends it
again; if the gateway kept scoring the abandoned copy, every retry would double the work. Once a
route has read the whole body, the ASGI server's `receive()` has nothing left to deliver but
`http.disconnect`, which it sends when the connection closes: a watcher waits for it and cancels
the work. Cancelling reaches every judge call of the request: the backend's HTTP request is
closed (vLLM aborts a request whose client went away) and a head's items still queued in its
worker are dropped there (heads/supervisor.py sends the worker a `cancel`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request

from ..exceptions import JudgeGatewayError

T = TypeVar("T")

# nginx's "client closed request": the status logged for a request whose client left first.
CLIENT_CLOSED = 499


class ClientDisconnected(JudgeGatewayError):
    """The HTTP client closed the connection before the work finished; the work was cancelled."""


async def _disconnected(request: Request) -> None:
    """Return when the client has gone. Call only after the body was read in full."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """The result of `work`, or ClientDisconnected (with `work` cancelled and finished) when the
    client disconnects first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done() and watcher.exception() is not None:
            return await task  # the connection cannot be watched: just finish the work
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        if watcher.done() and not watcher.cancelled():
            watcher.exception()  # retrieved: a failed watcher is not logged as unhandled
        watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    # Wait for the cancellation to unwind (backend connections closed, head items cancelled).
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    raise ClientDisconnected("the client disconnected before the reply was ready")
