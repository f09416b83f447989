"""A colocated VLM judge against a server with vLLM's sleep endpoints (tests/support/fake_vllm_sleep.py,
a process) and injected faults: a slow wake, a server that dies during its wake, a sleep refused while
it is busy. Every request resolves within its deadline; none is sent to a sleeping server; a sleep
never drops work. Plus what the routes say (POST / GET /v1/residency, the header, /readyz, /metrics)
and the refusals at start (a CPU vLLM, a server without dev mode)."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.residency import ResidencyUnsupported
from judge_gateway.server import create_app
from tests.conftest import png_bytes
from tests.support.fake_openai import free_port
from tests.support.fake_vllm_sleep import FakeSleepingVllm

IMAGE = "data:image/png;base64," + base64.b64encode(png_bytes(1)).decode()
DEADLINE_S = 1.0


def judge_config(base_url: str, deadline_s: float = DEADLINE_S, **residency: Any) -> dict:
    table = {"mode": "colocated", "idle_sleep_s": None, **residency}
    return {"backends": {"vlm": {"model": "fake-judge", "base_urls": [base_url], "max_retries": 0,
                                 "retry_for_s": 1}},
            "judges": {"alignment": {"kind": "yes_no", "backend": "vlm", "template": "vqa_alignment@1",
                                     "deadline_s": deadline_s, "residency": table}}}


@pytest.fixture(scope="module")
def servers():
    """One fake server process for the module (a test that has it die leaves a fresh one in its place)."""
    held = [FakeSleepingVllm(free_port())]
    yield held
    held[0].stop()


@pytest.fixture
def server(servers):
    if not servers[0].alive():
        servers[0].stop()
        servers[0] = FakeSleepingVllm(servers[0].port)
    servers[0].reset()
    return servers[0]


@asynccontextmanager
async def served(data: dict, start: bool = True) -> AsyncIterator[tuple[Gateway, httpx.AsyncClient]]:
    gateway = Gateway(validate_config(data))
    app = create_app(gateway)
    try:
        if start:
            await gateway.residency.start()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost",
                                     timeout=60) as client:
            yield gateway, client
    finally:
        await app.state.cosmos_rl.aclose()
        await gateway.aclose()


async def score(client: httpx.AsyncClient, headers: dict[str, str] | None = None) -> tuple[dict, float]:
    started = time.monotonic()
    r = await client.post("/v1/rewards", json={"samples": [{"prompt": "a red bicycle", "image": IMAGE}]},
                          headers=headers or {})
    assert r.status_code == 200, r.text
    return r.json()["results"][0]["scores"]["alignment"], time.monotonic() - started


async def test_a_sleeping_judge_wakes_on_the_next_request_and_none_reaches_it_asleep(server):
    async with served(judge_config(server.base_url)) as (gateway, client):
        r = await client.post("/v1/residency", json={"action": "sleep"})
        assert r.status_code == 200 and r.json()["judges"]["alignment"] == {
            "state": "asleep", "outcome": "done", "seconds": r.json()["judges"]["alignment"]["seconds"]}
        stats = server.stats()
        assert stats["sleeping"] and stats["sleep_modes"] == ["wait"]  # never vLLM's default `abort`
        ready = (await client.get("/readyz")).json()
        assert ready["ready"] and ready["judges"]["alignment"]["residency"] == "asleep"
        cell, _ = await score(client)
        assert cell["valid"], cell
        stats = server.stats()
        assert stats["wakes"] == 1 and stats["calls_while_asleep"] == 0 and not stats["sleeping"]
        info = (await client.get("/v1/judges")).json()["judges"][0]["residency"]
        assert info["mode"] == "colocated" and info["state"] == "awake" and info["wakes"] == 1
        assert info["last_wake_s"] is not None and info["replicas"] == [{"replica": 1, "state": "awake"}]
        report = (await client.get("/v1/residency")).json()
        assert [(e["event"], e["trigger"]) for e in report["timeline"]] == [("sleep", "told"), ("wake", "request")]
        metrics = (await client.get("/metrics")).text
        assert 'judge_gateway_residency_wakes_total{judge="alignment",outcome="ok"} 1.0' in metrics
        assert 'judge_gateway_residency_sleeps_total{judge="alignment",outcome="ok",trigger="told"} 1.0' in metrics
        assert 'judge_gateway_residency_state{judge="alignment",state="awake"} 1.0' in metrics
        assert "judge_gateway_residency_wake_seconds_count" in metrics


async def test_a_slow_wake_fails_requests_at_their_deadline_then_the_judge_serves(server):
    server.faults(wake_delay_s=2.0)
    async with served(judge_config(server.base_url, wake_timeout_s=30)) as (gateway, client):
        assert (await client.post("/v1/residency", json={"action": "sleep"})).status_code == 200
        results = await asyncio.gather(*(score(client) for _ in range(4)))
        for cell, elapsed in results:
            assert not cell["valid"] and cell["error"]["code"] == "backend_unavailable", cell
            assert "did not wake in time" in cell["error"]["message"]
            assert elapsed < DEADLINE_S + 1.5  # resolved at its deadline, not at the wake's end
        unit = gateway.residency.by_judge["alignment"]
        while unit.state != "awake":  # the wake went on and finished
            await unit._event().wait()
        cell, _ = await score(client)
        assert cell["valid"] and server.stats()["calls_while_asleep"] == 0


async def test_a_server_that_dies_during_its_wake_fails_requests_with_the_reason_and_comes_back(servers, server):
    port = server.port
    async with served(judge_config(server.base_url, wake_timeout_s=5)) as (gateway, client):
        assert (await client.post("/v1/residency", json={"action": "sleep"})).status_code == 200
        server.faults(die_on_wake=True)
        cell, elapsed = await score(client)
        assert not cell["valid"] and cell["error"]["code"] == "backend_unavailable", cell
        assert "could not wake" in cell["error"]["message"] and elapsed < DEADLINE_S + 1.5
        assert server.proc.wait(10) == 1  # it died
        ready = (await client.get("/readyz")).json()["judges"]["alignment"]
        assert not ready["ready"] and ready["residency"] == "failed"
        server.stop()
        servers[0] = FakeSleepingVllm(port)  # `up` restarts a dead server: a fresh one is awake
        gateway._readiness_at = 0.0  # the next readiness probe is fresh
        cell, _ = await score(client)
        assert cell["valid"], cell
        assert gateway.residency.by_judge["alignment"].state == "awake"
        assert (await client.get("/readyz")).json()["judges"]["alignment"]["ready"]


async def test_a_sleep_waits_for_work_in_flight_and_is_refused_when_it_cannot_drain(server):
    server.faults(chat_delay_s=2.0)  # in flight longer than the drain, however loaded the machine
    async with served(judge_config(server.base_url, deadline_s=10, drain_timeout_s=0.2)) as (gateway, client):
        scoring = asyncio.create_task(score(client))
        unit = gateway.residency.by_judge["alignment"]
        while unit.in_flight == 0:
            await asyncio.sleep(0.01)
        r = await client.post("/v1/residency", json={"action": "sleep"})
        assert r.status_code == 409 and r.json()["judges"]["alignment"]["outcome"] == "refused"
        assert "still in flight" in r.json()["judges"]["alignment"]["reason"]
        cell, _ = await scoring
        assert cell["valid"] and server.stats()["aborted"] == 0  # the work in flight was never dropped
        assert unit.state == "awake"


async def test_a_server_that_refuses_to_sleep_while_busy_leaves_the_judge_awake(server):
    server.faults(chat_delay_s=2.0, refuse_sleep_while_busy=True)
    async with served(judge_config(server.base_url, deadline_s=10)) as (gateway, client):
        async with httpx.AsyncClient(timeout=10) as direct:  # another client keeps the server busy
            busy = asyncio.create_task(direct.post(f"{server.base_url}/chat/completions",
                                                   json={"model": "fake-judge", "messages": []}))
            while server.stats()["in_flight"] == 0:
                await asyncio.sleep(0.01)
            r = await client.post("/v1/residency", json={"action": "sleep", "judges": ["alignment"]})
            assert r.status_code == 409 and "refused to sleep now (HTTP 409)" in r.json()["judges"]["alignment"]["reason"]
            assert (await busy).status_code == 200
        assert gateway.residency.by_judge["alignment"].state == "awake" and not server.stats()["sleeping"]
        cell, _ = await score(client)
        assert cell["valid"]


async def test_level_2_reloads_the_weights_at_the_wake(server):
    async with served(judge_config(server.base_url, level=2)) as (gateway, client):
        await client.post("/v1/residency", json={"action": "sleep"})
        assert server.stats()["level"] == 2
        r = await client.post("/v1/residency", json={"action": "wake"})
        assert r.status_code == 200 and r.json()["judges"]["alignment"]["outcome"] == "done"
        assert server.stats()["reloads"] == 1


async def test_the_header_puts_the_judges_to_sleep_after_the_response(server):
    async with served(judge_config(server.base_url)) as (gateway, client):
        cell, _ = await score(client, {"X-Judge-Gateway-Residency": "sleep"})
        assert cell["valid"]
        assert gateway.residency.by_judge["alignment"].state == "asleep" and server.stats()["sleeping"]
        assert gateway.residency.timeline()[-1].trigger == "header"
        r = await client.post("/v1/rewards", json={"samples": [{"prompt": "x", "image": IMAGE}]},
                              headers={"X-Judge-Gateway-Residency": "nap"})
        assert r.status_code == 422 and r.json()["error"]["field"] == "X-Judge-Gateway-Residency"


async def test_residency_calls_are_checked_and_authenticated(server):
    data = judge_config(server.base_url)
    data["judges"]["steady"] = {"kind": "yes_no", "backend": "other", "template": "vqa_alignment@1"}
    data["backends"]["other"] = {"model": "fake-judge", "base_urls": [server.base_url]}
    data["server"] = {"api_keys": ["secret"]}
    async with served(data) as (gateway, client):
        assert (await client.post("/v1/residency", json={"action": "sleep"})).status_code == 401
        auth = {"Authorization": "Bearer secret"}
        r = await client.post("/v1/residency", json={"action": "sleep", "judges": ["steady"]}, headers=auth)
        assert r.status_code == 400 and "'steady' is resident" in r.json()["error"]["message"]
        r = await client.post("/v1/residency", json={"action": "nap"}, headers=auth)
        assert r.status_code == 422 and r.json()["error"]["errors"][0]["field"] == "action"
        assert (await client.get("/v1/residency", headers=auth)).json()["judges"]["alignment"]["state"] == "awake"


async def test_flow_factorys_offload_and_load_put_a_profiles_judges_to_sleep_and_wake_them(server):
    data = judge_config(server.base_url)
    data["flow_factory"] = {"profiles": {"t2i": {"judges": {"alignment": 1.0}}}}
    async with served(data) as (gateway, client):
        r = await client.post("/flow-factory/t2i/offload")
        assert r.status_code == 200 and r.json()["status"] == "ok"
        assert r.json()["residency"]["alignment"]["state"] == "asleep" and server.stats()["sleeping"]
        r = await client.post("/flow-factory/t2i/load")
        assert r.json()["residency"]["alignment"]["state"] == "awake" and not server.stats()["sleeping"]
        assert [e.trigger for e in gateway.residency.timeline()] == ["flow_factory", "flow_factory"]


@pytest.mark.parametrize("faults, reason", [
    ({"device": "cpu"}, "is vLLM on the CPU .* sleep mode works on CUDA and ROCm GPUs"),
    ({"no_dev_mode": True}, "has no sleep endpoints .* VLLM_SERVER_DEV_MODE=1 and pass --enable-sleep-mode"),
    ({"enable_sleep_mode": False}, "was started without --enable-sleep-mode"),
])
async def test_a_server_that_cannot_sleep_is_refused_at_start(server, faults, reason):
    server.faults(**faults)
    async with served(judge_config(server.base_url), start=False) as (gateway, _):
        with pytest.raises(ResidencyUnsupported, match=reason):
            await gateway.residency.start()


async def test_the_watch_report_and_its_page_show_the_sleeps_and_wakes_of_a_run(server, tmp_path):
    from judge_gateway.browse import charts
    from judge_gateway.browse.watch import watch_context
    from judge_gateway.watch import RunReport

    data = judge_config(server.base_url)
    data["backends"]["shadow"] = {"model": "fake-judge", "base_urls": [server.base_url]}
    data["judges"]["steady"] = {"kind": "yes_no", "backend": "shadow", "template": "image_quality@1",
                                "default": False}
    data["watch"] = {"enabled": True, "shadows": {"alignment": ["steady"]}, "sample_rate": 1.0, "folder": str(tmp_path)}
    async with served(data) as (gateway, client):
        body = {"samples": [{"prompt": "a red bicycle", "image": IMAGE}], "run": "colocated-run", "step": 1}
        assert (await client.post("/v1/rewards", json=body)).status_code == 200
        await client.post("/v1/residency", json={"action": "sleep"})
        assert (await client.post("/v1/rewards", json={**body, "step": 2})).status_code == 200
        await client.post("/v1/residency", json={"action": "sleep"})
        report = (await client.get("/v1/watch")).json()["runs"][0]
        assert [(e["event"], e["trigger"]) for e in report["residency"]] == [
            ("sleep", "told"), ("wake", "request"), ("sleep", "told")]
        run = RunReport.model_validate(report)
        svg = charts.residency_timeline(run)
        assert 'id="residency-timeline"' in svg and 'id="residency-wake-0"' in svg and 'id="residency-asleep-0"' in svg
        page = watch_context(run, "colocated-run", None, 0, lambda i: "", lambda i: "")
        assert any("residency-timeline" in c for c in page["charts"])


async def test_the_python_client_puts_judges_to_sleep_and_wakes_them(server):
    from judge_gateway.client import AsyncRewardClient

    async with served(judge_config(server.base_url)) as (gateway, _):
        client = AsyncRewardClient(gateway=gateway)
        assert (await client.residency.sleep())["alignment"]["state"] == "asleep" and server.stats()["sleeping"]
        assert (await client.residency.wake(["alignment"]))["alignment"]["outcome"] == "done"
        assert not server.stats()["sleeping"]


async def test_a_replica_that_does_not_wake_leaves_the_rotation_and_the_others_serve(server):
    second = FakeSleepingVllm(free_port())
    try:
        data = judge_config(server.base_url, deadline_s=10)
        data["backends"]["vlm"]["base_urls"].append(second.base_url)
        async with served(data) as (gateway, client):
            assert (await client.post("/v1/residency", json={"action": "sleep"})).status_code == 200
            assert server.stats()["sleeping"] and second.stats()["sleeping"]
            second.faults(die_on_wake=True)
            cells = [cell for cell, _ in await asyncio.gather(*(score(client) for _ in range(4)))]
            assert all(c["valid"] for c in cells), [c["error"] for c in cells]  # replica 1 woke and serves them all
            replicas = gateway.residency.info("alignment").replicas
            assert replicas[0]["state"] == "awake" and replicas[1]["state"].startswith("failed: ")
            assert server.stats()["calls_while_asleep"] == 0
            second.proc.wait(10)
            port = second.port
            second.stop()
            second = FakeSleepingVllm(port)  # restarted (awake): back in rotation at the next wake
            await client.post("/v1/residency", json={"action": "sleep"})
            cell, _ = await score(client)
            assert cell["valid"]
            assert [r["state"] for r in gateway.residency.info("alignment").replicas] == ["awake", "awake"]
            assert gateway.pools["vlm"].replicas[1].ejected_until == 0.0
    finally:
        second.stop()
