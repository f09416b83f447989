"""The trainer's phase over the wire, for colocated judges (judge_gateway/residency/):

- `POST /v1/residency {"action": "sleep" | "wake", "judges": [...] | null}`: one call between a
  rollout and an update (sleep: the judges give the device back; wake: they load while the next
  rollout generates). Answered once it is done: 200; 409 when a sleep was refused (work still in
  flight after drain_timeout_s: nothing was dropped, the judge stays awake); 503 when one failed
  (the judge is marked not ready and recovered); 400 naming a resident or unknown judge.
- `GET /v1/residency`: every colocated judge's state and the timeline of sleeps and wakes.
- the `X-Judge-Gateway-Residency: sleep` header on a scoring request (residency_header.py).

Authenticated like every route (the app's API-key middleware). Trainers that send nothing
(cosmos-rl's and Flow-Factory's stock clients) are served by wake-on-request and the idle timer.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..residency import NotColocated, ResidencyUnsupported
from ..schema import ResidencyEvent, ResidencyInfo
from .errors import error_response, invalid_request
from .native import validation_errors
from .state import GatewayDep



class ResidencyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["sleep", "wake"] = Field(description="`sleep`: give the device back (waits for the work in "
                                             "flight); `wake`: load the model again now.")
    judges: list[str] | None = Field(None, max_length=1024, description="The judges (a backend's judges sleep "
                                     "together); null: every colocated judge.")


class ResidencyResult(BaseModel):
    action: str
    judges: dict[str, dict[str, Any]] = Field(description="Per judge: `state` after the call, `outcome` (done, "
                                              "already, refused, failed), `reason`, `seconds`.")


class ResidencyReport(BaseModel):
    judges: dict[str, ResidencyInfo] = Field(description="Every colocated judge.")
    timeline: list[ResidencyEvent] = Field(description="Sleeps and wakes, oldest first (the last 2000).")


def answer(action: str, results: dict[str, dict[str, Any]]) -> JSONResponse:
    outcomes = {r["outcome"] for r in results.values()}
    status = 503 if "failed" in outcomes else 409 if "refused" in outcomes else 200
    return JSONResponse(ResidencyResult(action=action, judges=results).model_dump(mode="json"), status_code=status)


router = APIRouter()


@router.post("/v1/residency", response_model=ResidencyResult,
             summary="Put colocated judges to sleep, or wake them (the trainer's phase)",
             responses={400: {"description": "a resident or unknown judge"},
                        409: {"description": "a sleep refused: work in flight past drain_timeout_s (nothing dropped)"},
                        503: {"description": "a sleep or wake failed: the judge is not ready and is being recovered"}})
async def residency_change(request: Request, gateway: GatewayDep) -> JSONResponse:
    try:
        body = ResidencyRequest.model_validate_json(await request.body())
    except ValidationError as err:
        return invalid_request(validation_errors(err))
    try:
        if body.action == "sleep":
            results = await gateway.residency.sleep(body.judges, "told")
        else:
            results = await gateway.residency.wake(body.judges, "told")
    except NotColocated as err:
        return error_response("not_colocated", str(err), 400, field="judges")
    except ResidencyUnsupported as err:
        return error_response("residency_unsupported", str(err), 400)
    return answer(body.action, results)


@router.get("/v1/residency", response_model=ResidencyReport,
            summary="Colocated judges: their states, and the timeline of sleeps and wakes")
async def residency_report(gateway: GatewayDep, since: Annotated[float | None, Query(
        description="Only events at or after this Unix time.")] = None) -> ResidencyReport:
    residency = gateway.residency
    infos = {name: residency.info(name) for name in residency.by_judge}
    return ResidencyReport(judges={k: v for k, v in infos.items() if v is not None},
                           timeline=residency.timeline(since))
