"""The cosmos-rl routes: POST /api/reward/{ping,pin,enqueue,pull,latent_attr} over CosmosRLService
(`pin` is the path cosmos-rl's reward service README gives for ping).

cosmos-rl's reward service (`reward_service/` in cosmos-rl) answers an enqueue with `{"uuid"}`, a
pull with the stored scores (200) or, while it has none, 400 `{"message": "Not found scores for
<uuid>"}` (its README: "400 Not Ready"), and 500 `{"message"}` on an error. Its trainer client
(`cosmos_rl/reward/remote_calculator.py`, 0.4.7) retries a pull answered 408/425/429 and gives up
on any other 4xx, so a pending pull answers 425 here by default (cosmos_rl.pending_status). Our bodies keep its
shape (`message`, `status`; ours add `error`, `reason`), not the native API's error body, and
this module alone picks each status code: the service says what happened (pull.py's outcomes),
`pull_response` maps it.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from ...json_body import JSONBodyError, parse_json
from ...store import StoreError
from ...watch import BadTags
from ..disconnect import CLIENT_CLOSED, ClientDisconnected, unless_disconnected
from ..metered import metered
from ..watching import request_tags
from .payload import JudgeUnready
from .pull import (
    Expired,
    Failed,
    NeverAccepted,
    NotAsked,
    NotAUuid,
    Pulled,
    Scored,
    StillScoring,
)
from .service import CosmosRLService, QueueFull
from .tensors import PayloadError

log = logging.getLogger(__name__)

MAX_FORM_FIELDS = 64  # pull and ping forms carry two


async def cosmos_rl_of(request: Request) -> CosmosRLService:
    return request.app.state.cosmos_rl


CosmosRLDep = Annotated[CosmosRLService, Depends(cosmos_rl_of)]

router = APIRouter()


async def form_fields(request: Request) -> dict[str, str]:
    """Form-encoded fields (what the clients send), or a JSON object."""
    body = await request.body()
    ctype = request.headers.get("content-type", "")
    if "json" in ctype or body.lstrip()[:1] == b"{":
        try:
            data = parse_json(body or b"{}")
        except JSONBodyError as err:
            raise PayloadError(str(err)) from None
        if not isinstance(data, dict):
            raise PayloadError("JSON body must be an object")
        return {k: json.dumps(v) if isinstance(v, (dict, list)) else str(v) for k, v in data.items()}
    try:
        # a bound keeps a huge form from becoming a huge dict
        parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
    except UnicodeDecodeError:
        raise PayloadError("form body is not UTF-8") from None
    except ValueError as err:  # more fields than the bound
        raise PayloadError(f"form body refused: {err} (at most {MAX_FORM_FIELDS})") from None
    return {k: v[0] for k, v in parsed.items()}


def bad(message: str, status: int = 400, retry_after: str | None = None) -> JSONResponse:
    """A refusal in the shape of cosmos-rl's reward service (`message`, `status`)."""
    resp = JSONResponse({"message": message, "error": message, "status": "rejected"}, status_code=status)
    if retry_after is not None:
        resp.headers["Retry-After"] = retry_after
    return resp


@router.post("/api/reward/ping", summary="cosmos-rl: ping (form field info_data); 200 with `ready` and `not_ready` (reward -> why)")
@router.post("/api/reward/pin", summary="cosmos-rl: ping under the path its README names (`/api/reward/pin`)")
async def ping(request: Request, service: CosmosRLDep) -> JSONResponse:
    """cosmos-rl's answer (200, its message), plus `ready` and, when false, `not_ready`: reward name
    -> why it cannot be scored now (its judge's backend down, its model failed to load), for the
    rewards `info_data`'s reward_fn names (every mapped one when it names none)."""
    try:
        fields = await form_fields(request)
    except PayloadError:
        fields = {}
    info = fields.get("info_data", "")
    log.info("cosmos-rl ping: %s", info[:500])
    not_ready = await service.not_ready(info)
    body: dict[str, Any] = {"message": "Ping request received", "status": "ok", "ready": not not_ready}
    if not_ready:
        body["not_ready"] = not_ready
    return JSONResponse(body)


@router.post("/api/reward/enqueue", summary="cosmos-rl: enqueue `<JSON>\\n<tensor bytes>`; 400 with the reason if invalid")
async def enqueue(request: Request, service: CosmosRLDep) -> JSONResponse:
    with metered(service.gateway.metrics, "cosmos_rl") as outcome:
        try:
            tags = request_tags(request)
        except BadTags as err:
            outcome.status = "invalid"
            return bad(str(err))
        body = await request.body()
        try:
            uid = await service.enqueue(body, until=lambda work: unless_disconnected(request, work), tags=tags)
        except ClientDisconnected:
            outcome.cancelled()
            return bad("the client disconnected before the request was accepted", CLIENT_CLOSED)
        except PayloadError as err:
            outcome.status = "invalid"
            return bad(str(err))
        except QueueFull as err:
            outcome.status = "rejected"
            return bad(str(err), 503, retry_after="1")
        except JudgeUnready as err:
            outcome.status = "rejected"
            return bad(str(err), err.status, retry_after="10" if err.status == 503 else None)
        except StoreError as err:
            return bad(f"result store unavailable: {err}", 503, retry_after="2")
        outcome.status = "ok"
        return JSONResponse({"uuid": uid})


@router.post("/api/reward/pull", summary="cosmos-rl: pull (form fields uuid, type); non-200 with `status` while not ready")
async def pull(request: Request, service: CosmosRLDep) -> JSONResponse:
    try:
        fields = await form_fields(request)
    except PayloadError as err:
        return bad(str(err))
    # cosmos-rl's reward service reads a missing `type` as dance_grpo (cosmos_rl.default_pull_type).
    uid, reward = fields.get("uuid", ""), fields.get("type") or service.cfg.default_pull_type
    if not uid:
        return bad("pull needs the form field `uuid` (and `type`, the reward name)")
    try:
        outcome = await service.pull(uid, reward)
    except StoreError as err:
        return JSONResponse({"uuid": uid, "type": reward, "status": "unavailable",
                             "message": f"result store unavailable: {err}"}, status_code=503,
                            headers={"Retry-After": "2"})
    code, body = pull_response(uid, reward, outcome, service.cfg.pending_status, type_given=bool(fields.get("type")))
    return JSONResponse(body, status_code=code)


def pull_response(uid: str, reward: str, outcome: Pulled, pending_status: int, *,
                  type_given: bool = True) -> tuple[int, dict[str, Any]]:
    """A pull's status code and body: 200 with the result envelope (a failed request's filled one
    under on_failed = fill); `pending_status` (cosmos_rl.pending_status: 425 by default, which
    cosmos-rl's trainer polls through; 400, the reward service README's "Not Ready") while it is
    scored; 404 for a uuid never given out or a reward the request did not ask for; 410 for a result the store no longer has; 500 for a failed request
    under on_failed = error."""
    base = {"uuid": uid, "type": reward}
    match outcome:
        case Scored(envelope):
            return 200, envelope
        case StillScoring():
            return pending_status, {**base, "status": "pending", "message": f"Not found scores for {uid}: still scoring"}
        case Failed(_, filled) if filled is not None:
            return 200, filled
        case Failed(reason, _):
            return 500, {**base, "status": "failed", "message": f"request {uid} failed: {reason}", "reason": reason}
        case NotAsked(skipped, asked):
            if skipped:
                msg = f"reward {reward!r} had weight <= 0 in this request and was skipped"
            else:
                msg = f"this request did not ask for reward {reward!r} (it asked for {', '.join(asked)})"
                if not type_given:
                    msg += (f"; the pull had no `type` field, which means {reward!r} "
                            "(cosmos_rl.default_pull_type): send `type`")
            return 404, {**base, "status": "unknown", "message": msg}
        case Expired(gone):
            return 410, {**base, "status": "expired", "reason": gone,
                         "message": f"Not found scores for {uid}: the request's result is gone ({gone}); "
                                    "enqueue it again"}
        case NotAUuid():
            return 404, {**base, "status": "unknown",
                         "message": f"Not found scores for {uid[:80]!r}: not a uuid this gateway gave out"}
        case NeverAccepted():
            return 404, {**base, "status": "unknown",
                         "message": f"Not found scores for {uid}: this gateway never accepted such a request "
                                    "(or forgot it after store.forget_after_s)"}
    raise AssertionError(f"unhandled pull outcome {outcome!r}")


@router.post("/api/reward/latent_attr",
             summary="cosmos-rl: set latent decoder attributes (form field `fields`, a JSON object)")
async def latent_attr(request: Request, service: CosmosRLDep) -> JSONResponse:
    try:
        fields = await form_fields(request)
        body = service.set_latent_attr(fields.get("fields"))
    except PayloadError as err:
        return bad(str(err))
    return JSONResponse(body)
