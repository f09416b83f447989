"""API keys on every route but liveness: `Authorization: Bearer <key>` (or `X-API-Key`), compared
in constant time with the configured keys. Checked by the one request guard (guards.py), from the
request's raw headers, before its body is read."""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from fastapi.responses import JSONResponse

from .errors import error_body

# Paths that answer without a key: liveness must work for orchestrators.
OPEN_PATHS = frozenset({"/healthz"})


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _bearer_token(headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    auth = _header(headers, b"authorization") or ""
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return _header(headers, b"x-api-key")


def refusal(path: str, headers: Sequence[tuple[bytes, bytes]], keys: Sequence[bytes]) -> JSONResponse | None:
    """The 401 for a request without one of `keys` (ASGI scope headers), else None."""
    if path in OPEN_PATHS:
        return None
    raw_token = _bearer_token(headers) or ""
    token = raw_token.encode()
    if any(hmac.compare_digest(token, k) for k in keys):
        return None
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
