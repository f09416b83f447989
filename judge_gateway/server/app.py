"""The app factory: the middleware (peer networks, auth, body and header limits), app.state for the
routers' dependencies, and the routers of the native API and the enabled protocol adapters."""

from __future__ import annotations

import uuid
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._version import __version__
from ..config import check_api_key
from ..exceptions import InvalidInput
from ..gateway import Gateway
from ..store import ResultStore, make_store
from ..watch import Watch
from ..work_queue import make_work_queue
from . import cosmos_rl, flow_factory, native, watching
from .admission import Admission
from .auth import require_api_key
from .errors import error_response, request_validation_error
from .guards import RequestGuardMiddleware
from .heap import ReleaseMemoryMiddleware
from .networks import PeerNetworksMiddleware
from .origin import OriginPolicy


class BodyLimitMiddleware:
    """Refuse bodies over the limit with 413, whether or not Content-Length is sent."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes:
                    await self._reject(send)
                    return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge()
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._reject(send)

    async def _reject(self, send: Send) -> None:
        response = error_response("body_too_large", f"request body exceeds server.max_body_bytes = {self.max_bytes}",
                                  413)
        await response({"type": "http"}, _empty_receive, send)


class _TooLarge(InvalidInput):
    pass


async def _empty_receive() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


def create_app(gateway: Gateway, *, api_keys: list[str] | None = None,
               store: ResultStore | None = None) -> FastAPI:
    """The service for one gateway. API keys default to the config's server section; the result
    store of the async protocols to the config's [store] section."""
    cfg = gateway.config.server
    keys = [check_api_key(k).encode() for k in (api_keys if api_keys is not None else cfg.resolved_api_keys())]
    result_store = store if store is not None else make_store(gateway.config.store)
    instance = uuid.uuid4().hex  # this process among the replicas sharing the store
    # store.queue: accepted cosmos-rl work on a Redis Stream that every replica on this Redis serves
    queue = make_work_queue(result_store, gateway.config.store.queue, instance)
    watch = Watch(gateway)  # [watch]: shadow judges over what the routes below score
    cosmos = cosmos_rl.CosmosRLService(gateway, result_store, gateway.config.cosmos_rl, queue, instance, watch,
                                       persistence=gateway.config.store.persistence)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # A Redis without AOF loses accepted work when it is killed: refuse or warn (store.persistence).
        await result_store.check_persistence(gateway.config.store.persistence)
        if gateway.config.cosmos_rl.enabled:
            await cosmos.start()
        await watch.start()
        yield
        await cosmos.aclose()
        await watch.aclose()  # after cosmos-rl: its last results are handed over first
        await result_store.aclose()
        await gateway.aclose()

    app = FastAPI(
        title="judge-gateway",
        version=__version__,
        description=(
            "Rewards for RL of image and video generators: VLM judges over vLLM and local scorer "
            "heads, one score schema. Invalid scores are explicit (`valid=false` with an error "
            "code), never a silent number."
        ),
        lifespan=lifespan,
    )
    app.state.gateway = gateway
    app.state.api_keys = keys  # what auth.require_api_key compares with
    if keys:
        app.add_middleware(BaseHTTPMiddleware, dispatch=require_api_key)  # innermost: added first

    # freed heap back to the OS after large bodies and decoded media
    app.add_middleware(ReleaseMemoryMiddleware, budget=gateway.media_budget)
    app.add_middleware(BodyLimitMiddleware, max_bytes=cfg.max_body_bytes)
    # Header count, [media] budgets, JSON 500 for a bug: outermost but for the peer check.
    # Without API keys a web page in the user's browser can reach the port: foreign Host names,
    # cross-site state changes and non-JSON bodies on JSON routes are refused there (origin.py).
    ff = gateway.config.flow_factory
    origin = None if keys else OriginPolicy(
        cfg.allowed_hosts, json_paths=("/v1/rewards",),
        json_suffix_under=(ff.path_prefix + "/", "/compute") if ff.enabled else None)
    app.add_middleware(RequestGuardMiddleware, max_headers=cfg.max_headers, max_header_bytes=cfg.max_header_bytes,
                       media_limits=gateway.config.media.limits(), origin=origin)
    if cfg.allow_networks:  # outermost: a refused peer reaches nothing else
        app.add_middleware(PeerNetworksMiddleware, networks=cfg.allow_networks)
    app.add_exception_handler(RequestValidationError, request_validation_error)
    # What the routers' dependencies read (state.py); one Admission: both APIs load the same judges.
    app.state.admission = Admission(cfg.admission, gateway.metrics, capacity=gateway.capacity(),
                                    backend_slots=gateway.backend_slots(), budget=gateway.media_budget,
                                    busy=gateway.media_backlog)
    app.state.cosmos_rl = cosmos
    app.state.watch = watch
    app.state.flow_factory = flow_factory.FlowFactoryService(gateway, gateway.config.flow_factory)
    app.include_router(native.router)
    app.include_router(watching.router)
    native.document_reward_request(app)
    if gateway.config.cosmos_rl.enabled:
        app.include_router(cosmos_rl.router)
    if gateway.config.flow_factory.enabled:
        app.include_router(flow_factory.router, prefix=gateway.config.flow_factory.path_prefix)
    return app
