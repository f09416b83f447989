"""The HTTP service's layout: routes on APIRouters over app.state, one error body, one
metrics wrapper, the cosmos-rl adapter as one package of small modules.

Behaviour is tested by the protocol tests (test_server, test_cosmos_rl*, test_flow_factory*,
test_admission, test_disconnect); these check the structure that keeps it in one place.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import httpx
import pytest
from fastapi import APIRouter

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.metrics import Metrics
from judge_gateway.server import cosmos_rl, create_app, flow_factory, native
from judge_gateway.server.errors import error_body
from judge_gateway.server.metered import metered
from tests.support.fault_gateway import fault_config

SERVER = Path(__file__).resolve().parents[2] / "judge_gateway" / "server"
KEY = "k" * 32


def _config(prefix: str, profile: str, judges: dict[str, float], base_url: str = "http://127.0.0.1:9/v1",
            **server) -> dict:
    data = fault_config(base_url)
    data["flow_factory"] = {"path_prefix": prefix, "profiles": {profile: {"judges": judges}}}
    data["server"] = server
    return data


async def _closed(app) -> None:
    await app.state.cosmos_rl.aclose()
    await app.state.gateway.aclose()


def _value(metrics: Metrics, name: str, **labels: str) -> float:
    metrics.flush()  # the serving path's updates reach the registry when it is read (metrics.py)
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


# ---- routers -------------------------------------------------------------------------------

def test_every_protocol_is_an_api_router():
    assert isinstance(native.router, APIRouter)
    assert isinstance(flow_factory.router, APIRouter)
    assert isinstance(cosmos_rl.router, APIRouter)
    assert {r.path for r in native.router.routes} == {"/v1/rewards", "/v1/judges", "/healthz", "/readyz", "/metrics"}
    assert {r.path for r in cosmos_rl.router.routes} == {
        "/api/reward/ping", "/api/reward/pin", "/api/reward/enqueue", "/api/reward/pull", "/api/reward/latent_attr"}
    assert {r.path for r in flow_factory.router.routes} == {
        "/{profile}/health", "/{profile}/compute", "/{profile}/load", "/{profile}/offload"}


async def test_every_request_passes_one_middleware_of_ours():
    """Header and body limits, API keys, media budgets, the JSON 500 and the heap trim are one
    layer (guards.RequestGuardMiddleware); the peer check is a second only where it is configured."""
    from judge_gateway.server.guards import RequestGuardMiddleware
    from judge_gateway.server.networks import PeerNetworksMiddleware

    for server, stack in (({}, [RequestGuardMiddleware]),
                          ({"allow_networks": ["127.0.0.1/32"]}, [PeerNetworksMiddleware, RequestGuardMiddleware])):
        app = create_app(Gateway(validate_config(_config("/ff", "p", {"quality": 1.0}, **server))), api_keys=[KEY])
        try:
            assert [m.cls for m in app.user_middleware] == stack
        finally:
            await _closed(app)


def test_route_dependencies_run_on_the_event_loop():
    """A plain `def` dependency runs on FastAPI's thread pool (the one that parses request bodies):
    a thread hop per request, and a probe queued behind body parsing. Every route's are async."""
    def dependencies(dependant):
        for sub in dependant.dependencies:
            yield sub
            yield from dependencies(sub)

    checked = 0
    for router in (native.router, flow_factory.router, cosmos_rl.router):
        for route in router.routes:
            for dep in dependencies(route.dependant):
                assert inspect.iscoroutinefunction(dep.call), (route.path, dep.call)
                checked += 1
    assert checked >= 10  # the gateway, admission and both protocols' services are dependencies


async def test_two_apps_in_one_process_each_serve_their_own_state(fake_backend):
    """The routers are module-level: what a route serves comes from its app's state, so two
    gateways in one process (tests, Ray replicas) never see each other's profiles or keys.
    (Their judges' backend answers: /health is ok only for a profile whose judges can score.)"""
    url = fake_backend.base_url
    app_a = create_app(Gateway(validate_config(_config("/ff-a", "t2i", {"quality": 1.0}, url))), api_keys=[KEY])
    app_b = create_app(Gateway(validate_config(_config("/ff-b", "edit", {"final": 2.0, "quality": 1.0}, url))),
                       api_keys=[])
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app_a), base_url="http://localhost") as a, \
                httpx.AsyncClient(transport=httpx.ASGITransport(app=app_b), base_url="http://localhost") as b:
            auth = {"Authorization": f"Bearer {KEY}"}
            r = await a.get("/ff-a/t2i/health", headers=auth)
            assert (r.status_code, r.json()) == (200, {"status": "ok", "profile": "t2i", "mode": "pointwise",
                                                       "judges": {"quality": 1.0}})
            assert (await a.get("/ff-a/t2i/health")).status_code == 401  # app A's keys
            assert (await a.get("/ff-b/edit/health", headers=auth)).status_code == 404  # app B's prefix
            r = await b.get("/ff-b/edit/health")  # app B has no keys
            assert (r.status_code, r.json()["judges"]) == (200, {"final": 2.0, "quality": 1.0})
            r = await b.get("/ff-b/t2i/health")
            assert (r.status_code, r.json()) == (404, {"error": "no Flow-Factory profile 't2i' (profiles: /ff-b/edit)"})
            names_a = [j["name"] for j in (await a.get("/v1/judges", headers=auth)).json()["judges"]]
            names_b = [j["name"] for j in (await b.get("/v1/judges")).json()["judges"]]
            assert names_a == names_b == list(app_a.state.gateway.judges)
            assert app_a.state.gateway is not app_b.state.gateway
    finally:
        await _closed(app_a)
        await _closed(app_b)


# ---- one error body ------------------------------------------------------------------------

async def test_every_native_refusal_has_the_one_error_body():
    app = create_app(Gateway(validate_config(_config("/ff", "t2i", {"quality": 1.0}, max_body_bytes=4096,
                                                     max_headers=40))), api_keys=[KEY])
    auth = {"Authorization": f"Bearer {KEY}"}
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as c:
            replies = {
                "unauthorized": await c.post("/v1/rewards", json={}),
                "body_too_large": await c.post("/v1/rewards", content=b"x" * 5000, headers=auth),
                "invalid_request": await c.post("/v1/rewards", json={"samples": []}, headers=auth),
                "unknown_judge": await c.post("/v1/rewards", headers=auth,
                                              json={"samples": [{"prompt": "p"}], "judges": ["nope"]}),
                "headers_too_large": await c.get("/v1/judges", headers={**auth, **{f"x-h{i}": "1" for i in range(50)}}),
            }
            not_json = await c.post("/v1/rewards", content=b"{not json", headers={**auth, "content-type": "application/json"})
    finally:
        await _closed(app)
    statuses = {kind: r.status_code for kind, r in replies.items()}
    assert statuses == {"unauthorized": 401, "body_too_large": 413, "invalid_request": 422, "unknown_judge": 400,
                        "headers_too_large": 431}
    for kind, r in replies.items():
        body = r.json()
        assert body["error"]["type"] == kind, body
        extra = {k: v for k, v in body["error"].items() if k not in ("type", "message")}
        assert body["error"] == error_body(kind, body["error"]["message"], **extra)["error"]
    assert replies["unknown_judge"].json()["error"]["field"] == "judges"
    assert replies["invalid_request"].json()["error"]["errors"][0]["field"] == "samples"
    # cosmos-rl clients read a top-level `message` and `status` on a 401: the only keys beside `error`
    assert set(replies["unauthorized"].json()) == {"error", "message", "status"}
    assert {k for r in replies.values() if r.status_code != 401 for k in r.json()} == {"error"}
    assert (not_json.status_code, not_json.json()["error"]["type"]) == (422, "invalid_request")


def _server_sources() -> dict[str, ast.Module]:
    return {str(p.relative_to(SERVER)): ast.parse(p.read_text(encoding="utf-8")) for p in sorted(SERVER.rglob("*.py"))}


def test_the_error_body_is_built_in_one_module():
    """`{"error": {"type": ...}}` written as a literal anywhere but errors.py is a second helper."""
    writers = set()
    for name, tree in _server_sources().items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Dict):
                continue
            for key, value in zip(node.keys, node.values):
                if (isinstance(key, ast.Constant) and key.value == "error" and isinstance(value, ast.Dict)
                        and any(isinstance(k, ast.Constant) and k.value == "type" for k in value.keys)):
                    writers.add(name)
    assert writers == {"errors.py"}


# ---- one metrics wrapper -------------------------------------------------------------------

def test_request_metrics_are_written_in_one_module():
    counters = ("requests", "request_latency", "cancelled_requests")
    writers = set()
    for name, tree in _server_sources().items():
        for node in ast.walk(tree):
            # metrics.count(metrics.requests, ...) / metrics.observe(metrics.request_latency, ...), or .labels()
            if isinstance(node, ast.Attribute) and node.attr in counters:
                writers.add(name)
    assert writers == {"metered.py"}


def test_metered_counts_every_way_a_route_ends():
    m = Metrics()
    with metered(m, "native") as outcome:
        outcome.status = "ok"
    with pytest.raises(RuntimeError), metered(m, "native"):
        raise RuntimeError("a bug")  # left at "error"
    with metered(m, "flow_factory") as outcome:
        outcome.cancelled()
    with metered(m, "flow_factory") as outcome:
        outcome.status = "refused"
    assert _value(m, "judge_gateway_requests_total", api="native", status="ok") == 1.0
    assert _value(m, "judge_gateway_requests_total", api="native", status="error") == 1.0
    assert _value(m, "judge_gateway_requests_total", api="flow_factory", status="cancelled") == 1.0
    assert _value(m, "judge_gateway_requests_total", api="flow_factory", status="refused") == 1.0
    assert _value(m, "judge_gateway_cancelled_requests_total", api="flow_factory") == 1.0
    assert _value(m, "judge_gateway_cancelled_requests_total", api="native") == 0.0
    assert _value(m, "judge_gateway_request_latency_seconds_count", api="native") == 2.0
    assert _value(m, "judge_gateway_request_latency_seconds_count", api="flow_factory") == 2.0
    assert 0.0 <= _value(m, "judge_gateway_request_latency_seconds_sum", api="native") < 1.0


def test_recorded_updates_reach_the_registry_when_it_is_read_or_the_list_is_full(monkeypatch):
    from judge_gateway import metrics as metrics_module

    m = Metrics()
    m.count(m.samples, (), 3)
    m.observe(m.judge_latency, ("j",), 0.02)
    assert m.registry.get_sample_value("judge_gateway_samples_total") == 0.0  # recorded, not applied yet
    assert b"judge_gateway_samples_total 3.0" in m.render()  # a scrape applies them first
    assert m.registry.get_sample_value("judge_gateway_judge_latency_seconds_count", {"judge": "j"}) == 1.0
    monkeypatch.setattr(metrics_module, "FLUSH_AT", 4)
    for _ in range(4):
        m.count(m.scores, ("j", "true"))
    assert m.registry.get_sample_value("judge_gateway_scores_total", {"judge": "j", "valid": "true"}) == 4.0


# ---- the cosmos-rl package -----------------------------------------------------------------

def test_cosmos_rl_is_one_package_of_small_modules():
    package = SERVER / "cosmos_rl"
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in package.glob("*.py")}
    assert set(sizes) == {"__init__.py", "routes.py", "service.py", "payload.py", "envelope.py", "tensors.py",
                          "rescore.py", "entry.py", "jobs.py", "scoring.py", "consumer.py", "heartbeat.py", "pull.py"}
    assert max(sizes.values()) <= 500, sizes
    # its payload module moved in from the package root; the old module paths are gone
    assert not (SERVER.parent / "tensors.py").exists()
    assert not (SERVER / "cosmos_legacy.py").exists()
    assert not (SERVER / "cosmos_rl.py").exists()
    assert cosmos_rl.tensors.__file__ == str(package / "tensors.py")
