"""The native API: POST /v1/rewards, GET /v1/judges, /healthz, /readyz, /metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ValidationError

from ..gateway import Gateway, GroupTooLargeError, RequestTooLargeError, UnknownJudgeError
from ..json_body import JSON_RULES, JSONBodyError, check_json_counts
from ..schema import ErrorBody, JudgeInfo, RewardRequest, RewardResponse
from ..watch import BadTags
from .admission import Admission, Refused
from .disconnect import CLIENT_CLOSED, ClientDisconnected, unless_disconnected
from .errors import error_response, invalid_request
from .metered import Outcome, metered
from .state import AdmissionDep, GatewayDep
from .residency_header import BadResidencyHeader, chained, sleep_after, sleep_task
from .watching import after_response, request_tags


class JudgeList(BaseModel):
    judges: list[JudgeInfo]


def validation_errors(err: ValidationError) -> list[dict[str, Any]]:
    """Pydantic errors as `{field, message}` pairs a person can act on."""
    out = []
    for e in err.errors(include_url=False, include_input=False):
        field = ".".join(str(p) for p in e["loc"])
        msg = e["msg"]
        msg = msg.removeprefix("Value error, ")
        if e["type"] == "json_invalid":
            msg += f" ({JSON_RULES})"
        out.append({"field": field, "message": msg})
    return out


def parse_reward_request(body: bytes) -> RewardRequest:
    """Validate a JSON body (run in a worker thread: media headers are sniffed here)."""
    check_json_counts(body)  # JSONBodyError before a parse that would not fit in memory
    return RewardRequest.model_validate_json(body)


router = APIRouter()

REWARD_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody}, 401: {"model": ErrorBody}, 413: {"model": ErrorBody}, 422: {"model": ErrorBody},
    429: {"model": ErrorBody, "description": "overloaded (server.admission): retry after Retry-After"},
}


# A body this small is validated on the event loop: that takes ~0.1 ms, less than the hand-off to
# a worker thread and back; larger ones (base64 media to decode and probe) go to a thread.
INLINE_PARSE_BYTES = 64 << 10


async def score_body(request: Request, gateway: Gateway, admission: Admission, body: bytes,
                     outcome: Outcome) -> Response:
    """One admitted reward request: validate the body, reserve what its media decode to (the
    process-wide budget) and its heads' queue room, score it while the client waits."""
    try:
        if len(body) <= INLINE_PARSE_BYTES:
            reward_request = parse_reward_request(body)
        else:
            reward_request = await run_in_threadpool(parse_reward_request, body)
    except ValidationError as err:
        outcome.status = "invalid"
        return invalid_request(validation_errors(err))
    except JSONBodyError as err:
        outcome.status = "invalid"
        return error_response("invalid_request", str(err), 422)
    try:
        tags = request_tags(request, reward_request.run, reward_request.step)
    except BadTags as err:
        outcome.status = "invalid"
        return error_response("invalid_request", str(err), 422, field=err.field)
    try:
        then_sleep = sleep_after(request)
    except BadResidencyHeader as err:
        outcome.status = "invalid"
        return error_response("invalid_request", str(err), 422, field="X-Judge-Gateway-Residency")
    try:
        # A client that leaves (its timeout) takes its judge calls with it.
        response = await unless_disconnected(request, admission.scored("native", gateway, reward_request))
    except UnknownJudgeError as err:
        outcome.status = "invalid"
        return error_response("unknown_judge", str(err), 400, field="judges")
    except RequestTooLargeError as err:
        outcome.status = "invalid"
        return error_response("too_many_samples", str(err), 413, field="samples")
    except GroupTooLargeError as err:
        outcome.status = "invalid"
        return error_response("group_too_large", str(err), 422, field="samples")
    outcome.status = "ok"
    # Serialised here so the response model is not validated twice.
    return Response(response.model_dump_json(), media_type="application/json",
                    background=chained(after_response(request, "native", tags, reward_request.samples, response),
                                       sleep_task(request, response.judges) if then_sleep else None))


@router.post(
    "/v1/rewards",
    response_model=RewardResponse,
    responses=REWARD_RESPONSES,
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
async def create_rewards(request: Request, gateway: GatewayDep, admission: AdmissionDep) -> Any:
    with metered(gateway.metrics, "native") as outcome:
        try:
            body = await request.body()  # before the slot: a slow upload never holds one
            async with admission.slot("native", until=lambda wait: unless_disconnected(request, wait)):
                return await score_body(request, gateway, admission, body, outcome)
        except ClientDisconnected:  # while waiting for a slot, or while scoring
            outcome.cancelled()
            return Response(status_code=CLIENT_CLOSED)
        except Refused as err:
            outcome.status = "refused"
            return error_response("overloaded", str(err), 429, headers={"Retry-After": str(err.retry_after_s)})


@router.get("/v1/judges", response_model=JudgeList, summary="Configured judges, with template versions and readiness")
async def list_judges(gateway: GatewayDep) -> JudgeList:
    return JudgeList(judges=await gateway.judge_infos())


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: every judge's backend serving its model (or busy: answered a call in the last 30 s)",
            responses={503: {"description": "some judge is not ready; the body says which and why"}})
async def readyz(gateway: GatewayDep, admission: AdmissionDep) -> JSONResponse:
    ready = await gateway.readiness()
    judges: dict[str, dict[str, Any]] = {name: {"ready": ok, "reason": reason} for name, (ok, reason) in ready.items()}
    for name, unit in gateway.residency.by_judge.items():  # colocated: asleep is ready (a call wakes it)
        judges[name]["residency"] = unit.state
    all_ready = all(ok for ok, _ in ready.values())
    # The overload bounds in force (derived from the judges' capacity unless configured).
    return JSONResponse({"ready": all_ready, "judges": judges, "admission": admission.describe()},
                        status_code=200 if all_ready else 503)


@router.get("/metrics", summary="Prometheus metrics")
async def prometheus(gateway: GatewayDep) -> Response:
    return Response(gateway.metrics.render(), media_type=CONTENT_TYPE_LATEST)


def document_reward_request(app: FastAPI) -> None:
    """Two things FastAPI cannot see, written into the app's OpenAPI document: the reward body is
    validated in a worker thread, so its model's schema is added by hand; and a parameter that
    fails FastAPI's own checks is answered in the one error body (errors.request_validation_error),
    not FastAPI's HTTPValidationError, so the 422s say ErrorBody."""
    original_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = original_openapi()
        req = RewardRequest.model_json_schema(ref_template="#/components/schemas/{model}")
        defs = req.pop("$defs", {})
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.update(defs)
        components["RewardRequest"] = req
        if components.pop("HTTPValidationError", None) is not None:
            components.pop("ValidationError", None)
            components["ErrorBody"] = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
            for methods in schema.get("paths", {}).values():
                for op in methods.values():
                    reply = op.get("responses", {}).get("422")
                    if reply is not None:
                        reply["description"] = "Invalid request (the body names the field)"
                        reply["content"] = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
