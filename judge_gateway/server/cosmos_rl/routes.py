"""The cosmos-rl routes: POST /api/reward/{ping,pin,enqueue,pull,latent_attr} over CosmosRLService
(`pin` is the path the original's README gives for ping).

Their bodies are the original service's (`message`, `status`; ours add `error`), not the native
API's error body: cosmos-rl's client reads them.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated
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
    """A refusal in the original's shape."""
    resp = JSONResponse({"message": message, "error": message, "status": "rejected"}, status_code=status)
    if retry_after is not None:
        resp.headers["Retry-After"] = retry_after
    return resp


@router.post("/api/reward/ping", summary="cosmos-rl: ping (form field info_data, only logged)")
@router.post("/api/reward/pin", summary="cosmos-rl: ping under the path its README names (`/api/reward/pin`)")
async def ping(request: Request) -> JSONResponse:
    try:
        fields = await form_fields(request)
    except PayloadError:
        fields = {}
    log.info("cosmos-rl ping: %s", fields.get("info_data", "")[:500])
    return JSONResponse({"message": "Ping request received", "status": "ok"})


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
    # The original defaults a missing `type` to dance_grpo (cosmos_rl.default_pull_type).
    uid, reward = fields.get("uuid", ""), fields.get("type") or service.cfg.default_pull_type
    if not uid:
        return bad("pull needs the form field `uuid` (and `type`, the reward name)")
    try:
        code, body = await service.pull(uid, reward, type_given=bool(fields.get("type")))
    except StoreError as err:
        return JSONResponse({"uuid": uid, "type": reward, "status": "unavailable",
                             "message": f"result store unavailable: {err}"}, status_code=503,
                            headers={"Retry-After": "2"})
    return JSONResponse(body, status_code=code)


@router.post("/api/reward/latent_attr",
             summary="cosmos-rl: set latent decoder attributes (form field `fields`, a JSON object)")
async def latent_attr(request: Request, service: CosmosRLDep) -> JSONResponse:
    try:
        fields = await form_fields(request)
        code, body = service.set_latent_attr(fields.get("fields"))
    except PayloadError as err:
        return bad(str(err))
    return JSONResponse(body, status_code=code)
