"""The native API: POST /v1/rewards, GET /v1/judges, /healthz, /readyz, /metrics."""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ValidationError

from ..gateway import Gateway, RequestTooLargeError, UnknownJudgeError
from ..json_body import JSON_RULES, JSONBodyError, check_json_counts
from ..schema import ErrorBody, JudgeInfo, RewardRequest, RewardResponse
from .admission import Admission, Refused
from .disconnect import CLIENT_CLOSED, ClientDisconnected, unless_disconnected


class JudgeList(BaseModel):
    judges: list[JudgeInfo]


def _error(kind: str, message: str, status: int, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": {"type": kind, "message": message, **extra}}, status_code=status)


def validation_errors(err: ValidationError) -> list[dict[str, Any]]:
    """Pydantic errors as `{field, message}` pairs a person can act on."""
    out = []
    for e in err.errors(include_url=False, include_input=False):
        field = ".".join(str(p) for p in e["loc"])
        msg = e["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        if e["type"] == "json_invalid":
            msg += f" ({JSON_RULES})"
        out.append({"field": field, "message": msg})
    return out


def parse_reward_request(body: bytes) -> RewardRequest:
    """Validate a JSON body (run in a worker thread: media headers are sniffed here)."""
    check_json_counts(body)  # JSONBodyError before a parse that would not fit in memory
    return RewardRequest.model_validate_json(body)


def install(app: FastAPI, gateway: Gateway, admission: Admission) -> None:
    metrics = gateway.metrics
    responses = {400: {"model": ErrorBody}, 401: {"model": ErrorBody}, 413: {"model": ErrorBody},
                 422: {"model": ErrorBody},
                 429: {"model": ErrorBody, "description": "overloaded (server.admission): retry after Retry-After"}}

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"field": ".".join(map(str, e["loc"])), "message": e["msg"]} for e in exc.errors()]
        return _error("invalid_request", "; ".join(f"{e['field']}: {e['message']}" for e in errors), 422,
                      errors=errors)

    @app.post(
        "/v1/rewards",
        response_model=RewardResponse,
        responses=responses,
        summary="Score samples with judges",
        description=(
            "Every (sample, judge) pair runs concurrently. A judge that fails on a sample gives "
            "that cell `valid=false` with an error code; the other cells still score. The "
            "combined reward follows the configured combine policy."
        ),
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RewardRequest"}}},
            }
        },
    )
    async def create_rewards(request: Request) -> Any:
        started = time.perf_counter()
        status = "error"
        try:
            body = await request.body()  # before the slot: a slow upload never holds one
            async with admission.slot("native", until=lambda wait: unless_disconnected(request, wait)):
                try:
                    reward_request = await run_in_threadpool(parse_reward_request, body)
                except ValidationError as err:
                    status = "invalid"
                    errors = validation_errors(err)
                    return _error("invalid_request",
                                  "; ".join(f"{e['field']}: {e['message']}" for e in errors), 422, errors=errors)
                except JSONBodyError as err:
                    status = "invalid"
                    return _error("invalid_request", str(err), 422)
                try:
                    # A client that leaves (its timeout) takes its judge calls with it.
                    response = await unless_disconnected(request, gateway.score(reward_request))
                except ClientDisconnected:
                    status = "cancelled"
                    metrics.cancelled_requests.labels("native").inc()
                    return Response(status_code=CLIENT_CLOSED)
                except UnknownJudgeError as err:
                    status = "invalid"
                    return _error("unknown_judge", str(err), 400, field="judges")
                except RequestTooLargeError as err:
                    status = "invalid"
                    return _error("too_many_samples", str(err), 413, field="samples")
                status = "ok"
                # Serialised here so the response model is not validated twice.
                return Response(response.model_dump_json(), media_type="application/json")
        except ClientDisconnected:  # while waiting for a slot
            status = "cancelled"
            metrics.cancelled_requests.labels("native").inc()
            return Response(status_code=CLIENT_CLOSED)
        except Refused as err:
            status = "refused"
            return JSONResponse({"error": {"type": "overloaded", "message": str(err)}}, status_code=429,
                                headers={"Retry-After": str(err.retry_after_s)})
        finally:
            metrics.requests.labels("native", status).inc()
            metrics.request_latency.labels("native").observe(time.perf_counter() - started)

    @app.get("/v1/judges", response_model=JudgeList, summary="Configured judges, with template versions and readiness")
    async def list_judges() -> JudgeList:
        return JudgeList(judges=await gateway.judge_infos())

    @app.get("/healthz", summary="Liveness: the process answers")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", summary="Readiness: every judge's backend reachable and serving its model",
             responses={503: {"description": "some judge is not ready; the body says which and why"}})
    async def readyz() -> JSONResponse:
        ready = await gateway.readiness()
        judges = {name: {"ready": ok, "reason": reason} for name, (ok, reason) in ready.items()}
        all_ready = all(ok for ok, _ in ready.values())
        return JSONResponse({"ready": all_ready, "judges": judges}, status_code=200 if all_ready else 503)

    @app.get("/metrics", summary="Prometheus metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    original_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        # The reward body is validated in a worker thread, so FastAPI does not see its model;
        # put its schema into the document by hand.
        if app.openapi_schema:
            return app.openapi_schema
        schema = original_openapi()
        req = RewardRequest.model_json_schema(ref_template="#/components/schemas/{model}")
        defs = req.pop("$defs", {})
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.update(defs)
        components["RewardRequest"] = req
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
