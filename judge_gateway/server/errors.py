"""The gateway's one error body, `{"error": {"type": ..., "message": ..., ...}}`, for every route,
middleware and raw protocol reply of the native API (the protocol adapters answer in their
clients' own shapes), and the handler that gives FastAPI's own validation errors that body."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse


def error_body(kind: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message, **extra}}


def error_response(kind: str, message: str, status: int, *, headers: Mapping[str, str] | None = None,
                   **extra: Any) -> JSONResponse:
    return JSONResponse(error_body(kind, message, **extra), status_code=status, headers=headers)


def error_bytes(kind: str, message: str) -> bytes:
    """The body for a reply written below the app (raw h11 writes, ASGI sends)."""
    return json.dumps(error_body(kind, message)).encode()


def invalid_request(errors: list[dict[str, Any]]) -> JSONResponse:
    """422 for `{field, message}` pairs, all of them in the message too."""
    return error_response("invalid_request", "; ".join(f"{e['field']}: {e['message']}" for e in errors), 422,
                          errors=errors)


async def request_validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's own parameter checks, in the one error body."""
    return invalid_request([{"field": ".".join(map(str, e["loc"])), "message": e["msg"]} for e in exc.errors()])
