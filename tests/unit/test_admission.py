"""Admission control of the synchronous APIs: at ~10x a slow backend's
capacity, requests beyond the bound are refused at once with 429 (native) / 503 (Flow-Factory)
and Retry-After; the accepted ones complete; the bounds are in /metrics."""

from __future__ import annotations

import asyncio
import base64
import time

import httpx
import pytest

from judge_gateway.config import ConfigError, validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.conftest import png_bytes
from tests.support.fake_openai import FakeOpenAIServer

STALL_S = 0.6  # the fake backend's answer time
CAPACITY = 2  # its concurrency (backend max_concurrency)


@pytest.fixture(scope="module")
def slow_backend():
    server = FakeOpenAIServer(stall_s=STALL_S).start()
    yield server
    server.stop()


def slow_config(base_url: str, **admission) -> dict:
    return {
        "server": {"admission": {"max_active": CAPACITY, "max_waiting": CAPACITY, "max_wait_s": 5.0,
                                 "retry_after_s": 3, **admission}},
        "backends": {"slow": {"model": "fake-stall", "base_urls": [base_url], "timeout_s": 30,
                              "max_retries": 0, "max_concurrency": CAPACITY}},
        "judges": {"quality": {"kind": "yes_no", "backend": "slow", "template": "image_quality@1"}},
        "flow_factory": {"profiles": {"t2i": {"judges": {"quality": 1.0}}}},
    }


async def _burst(client: httpx.AsyncClient, n: int, send) -> list[tuple[httpx.Response, float]]:
    async def one(i: int) -> tuple[httpx.Response, float]:
        t0 = time.monotonic()
        r = await send(client, i)
        return r, time.monotonic() - t0
    return await asyncio.gather(*(one(i) for i in range(n)))


async def _native(client: httpx.AsyncClient, i: int) -> httpx.Response:
    return await client.post("/v1/rewards", json={"samples": [{"prompt": f"a cat {i}", "image": base64.b64encode(png_bytes(i)).decode()}]})


async def _flow(client: httpx.AsyncClient, i: int) -> httpx.Response:
    image = base64.b64encode(png_bytes(i)).decode()
    return await client.post("/flow-factory/t2i/compute", json={"prompt": [f"a cat {i}"], "image": [image],
                                                                 "video": None, "condition_images": None,
                                                                 "condition_videos": None})


@pytest.mark.parametrize("api, send, refused_status", [("native", _native, 429), ("flow_factory", _flow, 503)])
async def test_beyond_the_bound_is_refused_at_once_with_retry_after(slow_backend, api, send, refused_status):
    gw = Gateway(validate_config(slow_config(slow_backend.base_url)))
    app = create_app(gw)
    n = 10 * CAPACITY
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost",
                                     timeout=60) as client:
            t0 = time.monotonic()
            results = await _burst(client, n, send)
            wall = time.monotonic() - t0
            metrics = (await client.get("/metrics")).text
    finally:
        await gw.aclose()
    codes = [r.status_code for r, _ in results]
    ok = [(r, s) for r, s in results if r.status_code == 200]
    refused = [(r, s) for r, s in results if r.status_code == refused_status]
    print(f"\n{api}: {n} requests at 10x capacity: {codes.count(200)} x 200, {len(refused)} x {refused_status}, "
          f"refusals answered in <= {max(s for _, s in refused):.3f} s, wall {wall:.2f} s")
    assert len(ok) + len(refused) == n, codes
    # max_active scoring + max_waiting waiting are accepted; the other 16 are refused.
    assert len(ok) == 2 * CAPACITY and len(refused) == n - 2 * CAPACITY, codes
    first_scored = min(s for _, s in ok)
    for r, seconds in refused:
        assert r.headers["Retry-After"] == "3"
        assert "server.admission" in r.text
        # refused at once, not after waiting in line: before any accepted request was scored
        assert seconds < first_scored, (seconds, first_scored)
    for r, _ in ok:  # the accepted ones score, valid
        body = r.json()
        if api == "native":
            assert body["results"][0]["scores"]["quality"]["valid"] is True
        else:
            assert len(body["rewards"]) == 1 and "error" not in body
    assert f'judge_gateway_admission_limit{{bound="max_active"}} {float(CAPACITY)}' in metrics
    assert f'judge_gateway_admission_limit{{bound="max_waiting"}} {float(CAPACITY)}' in metrics
    assert 'judge_gateway_admission_limit{bound="max_wait_s"} 5.0' in metrics
    assert f'judge_gateway_admission_refused_total{{api="{api}",reason="queue_full"}} {float(n - 2 * CAPACITY)}' \
        in metrics


async def test_a_request_waiting_past_max_wait_s_is_refused(slow_backend):
    gw = Gateway(validate_config(slow_config(slow_backend.base_url, max_active=1, max_waiting=10, max_wait_s=0.2)))
    app = create_app(gw)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost",
                                     timeout=60) as client:
            results = await _burst(client, 3, _native)
    finally:
        await gw.aclose()
    codes = sorted(r.status_code for r, _ in results)
    assert codes == [200, 429, 429]
    (scored,) = [s for r, s in results if r.status_code == 200]
    for r, seconds in results:
        if r.status_code == 429:
            assert "max_wait_s = 0.2" in r.json()["error"]["message"]
            # waited its max_wait_s (a lower bound asyncio guarantees), and gave up before the slot freed
            assert 0.15 < seconds < scored, (seconds, scored)


@pytest.mark.parametrize("bad", [{"max_active": 0}, {"max_waiting": -1}, {"max_wait_s": 0}, {"retry_after_s": 0},
                                 {"max_active": "many"}, {"queue": 3}])
def test_admission_config_is_validated_at_load(bad):
    with pytest.raises(ConfigError, match="admission"):
        validate_config({"server": {"admission": bad}, "backends": {}, "judges": {}})


async def test_a_waiter_that_gives_up_as_it_gets_the_slot_gives_the_slot_back():
    """The wait for a slot runs under the caller's `until` (unless_disconnected): a client that
    leaves just as the slot comes free must not keep it (it would be lost for good)."""
    from judge_gateway.metrics import Metrics
    from judge_gateway.server.admission import Admission
    from judge_gateway.server.disconnect import ClientDisconnected

    cfg = validate_config({"server": {"admission": {"max_active": 1, "max_waiting": 1}}, "backends": {},
                           "judges": {}}).server.admission
    admission = Admission(cfg, Metrics())

    async def leaves_once_admitted(wait):
        await wait
        raise ClientDisconnected("gone")

    async with admission.slot("native"):
        waiter = asyncio.ensure_future(admission.slot("native", until=leaves_once_admitted).__aenter__())
        await asyncio.sleep(0)
        assert admission.waiting == 1
    with pytest.raises(ClientDisconnected):
        await waiter
    assert (admission.active, admission.waiting, admission._slots.locked()) == (0, 0, False)
    async with admission.slot("native"):  # the one slot is free again
        assert admission.active == 1


async def test_default_bounds_come_from_the_judges_capacity(slow_backend):
    """No admission bounds configured: before, 256 active / 512 waiting never engaged in front of
    a small backend (every request queued, p50 ~5 s at 10x). Now they are the judges' capacity
    (here the backend's 1 replica x max_concurrency 2), so at 10x the excess is refused at once,
    and /readyz says what the bounds are and where they came from."""
    cfg = slow_config(slow_backend.base_url)
    cfg["server"] = {"admission": {"max_wait_s": 5.0, "retry_after_s": 3}}
    gw = Gateway(validate_config(cfg))
    app = create_app(gw)
    n = 10 * CAPACITY
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost",
                                     timeout=60) as client:
            results = await _burst(client, n, _native)
            ready = (await client.get("/readyz")).json()
    finally:
        await gw.aclose()
    codes = [r.status_code for r, _ in results]
    assert codes.count(200) == 2 * CAPACITY and codes.count(429) == n - 2 * CAPACITY, codes
    assert ready["admission"] | {"capacity": None} == {
        "max_active": CAPACITY, "max_waiting": CAPACITY, "max_wait_s": 5.0, "retry_after_s": 3, "active": 0,
        "waiting": 0, "derived": ["max_active", "max_waiting"], "capacity": None,
        "backends": {"slow": {"slots": CAPACITY, "in_use": 0, "waiting": 0, "max_waiting": CAPACITY}},
        "media_budget_pixels": ready["admission"]["media_budget_pixels"]}
    assert ready["admission"]["capacity"] == {"backend:slow": CAPACITY}
    assert ready["admission"]["media_budget_pixels"]["in_use"] == 0


async def test_backend_lanes_hold_calls_first_come_first_served():
    """A VLM backend's lane (server/lanes.py): calls up to its slots at once, the rest wait in
    arrival order up to waiting_per_slot x slots, beyond which a request is refused at once; a
    request larger than the lane runs alone; a waiter that gives up passes its turn on."""
    from judge_gateway.server.lanes import LaneFull, Lanes

    lanes = Lanes({"b": 4}, waiting_per_slot=1.0)
    first = await lanes.take({"b": 3}, wait_s=1)
    order: list[str] = []

    async def waiter(name: str, calls: int) -> list:
        taken = await lanes.take({"b": calls}, wait_s=5)
        order.append(name)
        return taken

    second = asyncio.ensure_future(waiter("second", 2))  # 3 + 2 > 4: waits
    await asyncio.sleep(0)
    small = asyncio.ensure_future(waiter("small", 1))  # would fit now, but comes after `second`
    await asyncio.sleep(0)
    assert order == [] and lanes.lanes["b"].waiting == 3
    with pytest.raises(LaneFull, match="busy"):  # 3 waiting + 2 > 4: the waiting room is full
        await lanes.take({"b": 2}, wait_s=1)
    lanes.give(first)
    taken = await asyncio.gather(second, small)
    assert order == ["second", "small"] and lanes.lanes["b"].in_use == 3
    for t in taken:
        lanes.give(t)
    big = await lanes.take({"b": 40, "unknown": 9}, wait_s=1)  # capped at the slots; no lane: not held
    assert big == [(lanes.lanes["b"], 4)]
    with pytest.raises(LaneFull, match="max_wait_s"):
        await lanes.take({"b": 1}, wait_s=0.05)
    assert lanes.lanes["b"].waiting == 0
    gives_up = asyncio.ensure_future(lanes.take({"b": 2}, wait_s=5))
    behind = asyncio.ensure_future(lanes.take({"b": 2}, wait_s=5))
    await asyncio.sleep(0)
    gives_up.cancel()
    lanes.give(big)
    assert (await behind) == [(lanes.lanes["b"], 2)] and lanes.lanes["b"].in_use == 2


def test_a_request_refused_for_its_size_or_judges_holds_no_backend_room(slow_backend):
    """backend_demand: the calls a request sends each backend; nothing for one that score() refuses
    at once (too many samples, unknown judges), so it never waits in a lane ahead of others."""
    from judge_gateway.schema import RewardRequest

    cfg = slow_config(slow_backend.base_url)
    cfg["server"]["max_samples_per_request"] = 2
    gw = Gateway(validate_config(cfg))
    image = base64.b64encode(png_bytes(1)).decode()
    two = RewardRequest(samples=[{"prompt": "a", "image": image}] * 2)
    assert gw.backend_demand(two) == {"slow": 2} and gw.backend_slots() == {"slow": CAPACITY}
    assert gw.backend_demand(RewardRequest(samples=[{"prompt": "a", "image": image}] * 3)) == {}
    assert gw.backend_demand(RewardRequest(samples=[{"prompt": "a", "image": image}], judges=["nope"])) == {}


def test_a_comparative_judge_holds_its_groups_planned_calls():
    """A comparative judge's calls are its groups' planned comparisons (all pairs of 4, both
    orders: 12), at most its budget, not one per sample."""
    from judge_gateway.comparisons import planned_calls
    from judge_gateway.schema import RewardRequest

    gw = Gateway(validate_config({
        "backends": {"b": {"model": "m", "base_urls": ["http://127.0.0.1:9/v1"]}},
        "judges": {"cmp": {"kind": "comparative", "backend": "b", "template": "unified_reward_think@1",
                           "options": {"budget": 56, "max_group_size": 8}}}}))
    image = base64.b64encode(png_bytes(1)).decode()
    samples = [{"prompt": "a", "image": image, "group_id": g} for g in ("x",) * 4 + ("y",) * 2]
    judge = gw.judges["cmp"]
    expected = sum(planned_calls(judge.schedule, n, judge.options.swap) for n in (4, 2))
    assert gw.backend_demand(RewardRequest(samples=samples)) == {"b": expected} and expected > len(samples)
