"""API keys on every route but liveness: `Authorization: Bearer <key>` (or `X-API-Key`), compared
in constant time with the keys the app factory keeps on `app.state.api_keys`."""

from __future__ import annotations

import hmac

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.middleware.base import RequestResponseEndpoint
from starlette.responses import Response

from .errors import error_body

# Paths that answer without a key: liveness must work for orchestrators.
OPEN_PATHS = frozenset({"/healthz"})


def _bearer_token(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("x-api-key")


async def require_api_key(request: Request, call_next: RequestResponseEndpoint) -> Response:
    """The dispatch of a BaseHTTPMiddleware (what `@app.middleware("http")` makes)."""
    if request.url.path not in OPEN_PATHS:
        keys: list[bytes] = request.app.state.api_keys
        raw_token = _bearer_token(request) or ""
        token = raw_token.encode()
        if not any(hmac.compare_digest(token, k) for k in keys):
            message = "missing or wrong API key (send Authorization: Bearer <key>)"
            if raw_token == "None":  # old cosmos-rl clients send the literal `Bearer None`
                message = ("the client sent `Authorization: Bearer None` (no token configured in the "
                           "trainer); this gateway requires an API key: set the reward service token")
            return JSONResponse(
                # `message` too: cosmos-rl clients read it
                {**error_body("unauthorized", message), "message": message, "status": "unauthorized"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
    return await call_next(request)
