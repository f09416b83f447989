"""The app factory: the middleware (peer networks; the request guard: header and body limits, API
keys, media budgets), app.state for the routers' dependencies, and the routers of the native API
and the enabled protocol adapters."""

from __future__ import annotations

import uuid
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError

from .._version import __version__
from ..config import check_api_key
from ..gateway import Gateway
from ..store import ResultStore, make_store
from ..watch import Watch
from ..work_queue import make_work_queue
from . import cosmos_rl, flow_factory, native, residency, watching
from .admission import Admission
from .errors import request_validation_error
from .guards import RequestGuardMiddleware
from .heap import HeapTrimmer
from .networks import PeerNetworksMiddleware
from .origin import OriginPolicy


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
        # Colocated judges: each server's sleep mode is checked (ResidencyUnsupported refuses the
        # start, naming the fix), then the idle timers run.
        await gateway.residency.start()
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
    app.state.api_keys = keys
    # Without API keys a web page in the user's browser can reach the port: foreign Host names,
    # cross-site state changes and non-JSON bodies on JSON routes are refused there (origin.py).
    ff = gateway.config.flow_factory
    origin = None if keys else OriginPolicy(
        cfg.allowed_hosts, json_paths=("/v1/rewards",),
        json_suffix_under=(ff.path_prefix + "/", "/compute") if ff.enabled else None)
    # Header and body limits, API keys or the origin policy, [media] budgets, a JSON 500 for a bug,
    # the freed heap given back after large requests: one middleware (guards.py), outermost but for
    # the peer check.
    app.add_middleware(RequestGuardMiddleware, max_headers=cfg.max_headers, max_header_bytes=cfg.max_header_bytes,
                       media_limits=gateway.config.media.limits(), max_body_bytes=cfg.max_body_bytes,
                       api_keys=keys, trimmer=HeapTrimmer(gateway.media_budget), origin=origin)
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
    app.include_router(residency.router)
    app.include_router(watching.router)
    native.document_reward_request(app)
    if gateway.config.cosmos_rl.enabled:
        app.include_router(cosmos_rl.router)
    if gateway.config.flow_factory.enabled:
        app.include_router(flow_factory.router, prefix=gateway.config.flow_factory.path_prefix)
    return app
