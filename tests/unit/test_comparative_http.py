"""Comparative judges through HTTP, on the fake OpenAI server (tests/support/fake_openai.py:
`fake-compare` names the brighter image better and never answers a pair of two dark images;
`fake-compare-garbage` names none): each fault case is a clear outcome within the group's
deadline, never a hang and never a 0.5; the native API, the Flow-Factory groupwise profile and
the Python client carry groups; a group's calls go to one replica."""

from __future__ import annotations

import asyncio
import base64
import time

import httpx
import pytest

from judge_gateway.client import AsyncRewardClient, RewardAPIError
from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.schema import RewardRequest, SampleInput
from judge_gateway.server import create_app
from tests.support.comparative_stub import gray_png
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.served_gateway import ServedGateway

GROUP_DEADLINE_S = 2.0


def b64(value: int) -> str:
    return base64.b64encode(gray_png(value)).decode()


def config(url: str, *more_urls: str) -> dict:
    def judge(backend: str, **options) -> dict:
        return {"kind": "comparative", "backend": backend, "template": "unified_reward_think@1", "default": False,
                "options": {"budget": 56, "max_group_size": 8, "group_deadline_s": GROUP_DEADLINE_S,
                            "max_tokens": 64, **options}}

    urls = [url, *more_urls]
    return {
        "backends": {"fake": {"model": "fake-compare", "base_urls": urls, "max_retries": 0},
                     "garbage": {"model": "fake-compare-garbage", "base_urls": urls, "max_retries": 0}},
        "judges": {"cmp": judge("fake"), "garbage": judge("garbage"),
                   "ref": judge("fake", schedule="reference", budget=16),
                   "bt": judge("fake", schedule="circular", circular_k=1, aggregation="bradley_terry@1")},
        "flow_factory": {"profiles": {"pairwise": {"judges": {"cmp": 1.0}, "mode": "groupwise",
                                                   "group_transform": "none"}}},
    }


@pytest.fixture
async def served(fake_backend):
    gateway = Gateway(validate_config(config(fake_backend.base_url)))
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(gateway)), base_url="http://localhost",
                               timeout=60)
    yield client, fake_backend
    await client.aclose()
    await gateway.aclose()


def group(values: list[int], group_id: str | None = "g", **extra) -> list[dict]:
    return [{"prompt": "a lamp", "image": b64(v), **({"group_id": group_id} if group_id else {}), **extra}
            for v in values]


async def post(client: httpx.AsyncClient, samples: list[dict], judge: str = "cmp") -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = await client.post("/v1/rewards", json={"samples": samples, "judges": [judge]})
    return response, time.monotonic() - started


async def test_a_group_is_scored_by_its_comparisons_with_its_report(served):
    client, _ = served
    r, _ = await post(client, group([40, 200, 120, 80]) + group([90, 30], "h"))
    assert r.status_code == 200, r.text
    scores = [x["scores"]["cmp"] for x in r.json()["results"]]
    assert [s["reward"] for s in scores] == [0.0, 1.0, 2 / 3, 1 / 3, 1.0, 0.0]  # the brighter wins
    report = scores[0]["details"]["group"]
    assert report["group_id"] == "g" and report["size"] == 4 and report["schedule"] == {"name": "all_pairs"}
    assert report["calls"] == {"asked": 12, "made": 12, "valid": 12, "failed": {}}
    assert report["comparisons"] == {"done": 6, "masked": 0, "failed": 0}
    assert report["swap_agreement"]["rate"] == 1.0 and report["position_bias"]["first_chosen"] == 0.5
    assert report["transitivity"] == {"triads": 4, "cycles": 0, "rate": 0.0}
    assert (report["budget"], report["calls_planned"], report["aggregation"]) == (56, 12, "win_rate@1")
    assert scores[4]["details"]["group"]["group_id"] == "h" and scores[4]["details"]["group"]["size"] == 2
    assert scores[1]["details"]["pairs"] == [[0, "done", 1.0], [2, "done", 1.0], [3, "done", 1.0]]


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name.startswith("judge_gateway_comparison")}


async def test_the_metrics_count_each_groups_comparisons_once(served):
    client, _ = served
    r, _ = await post(client, group([40, 200, 120, 80]) + group([90, 30], "h"))
    assert r.status_code == 200, r.text
    r, _ = await post(client, group([40, 200, 120]), judge="garbage")
    assert r.status_code == 200, r.text
    got = _samples((await client.get("/metrics")).text)

    def value(name: str, **labels: str) -> float:
        return got.get((name, tuple(sorted(labels.items()))), 0.0)

    # two groups of cmp (6 + 1 pairs, 12 + 2 calls, both orders agreeing, 4 triads without a cycle)
    assert value("judge_gateway_comparison_groups_total", judge="cmp", timed_out="false") == 2
    assert value("judge_gateway_comparisons_total", judge="cmp", status="done") == 7
    assert value("judge_gateway_comparison_calls_total", judge="cmp", outcome="valid") == 14
    assert value("judge_gateway_comparison_swap_pairs_total", judge="cmp", agreed="true") == 7
    assert value("judge_gateway_comparison_swap_pairs_total", judge="cmp", agreed="false") == 0
    assert value("judge_gateway_comparison_triads_total", judge="cmp", cycle="false") == 4
    # one group of garbage: 3 pairs failed, 6 calls unparsable
    assert value("judge_gateway_comparisons_total", judge="garbage", status="failed") == 3
    assert value("judge_gateway_comparison_calls_total", judge="garbage", outcome="parse_error") == 6
    assert value("judge_gateway_comparison_calls_total", judge="garbage", outcome="valid") == 0


async def test_a_pair_the_judge_never_answers_times_out_at_the_group_deadline(served):
    client, fake = served
    hung_up = fake.counters["stall_disconnected"]
    r, took = await post(client, group([0, 8, 100, 200]))  # 0 and 8: a dark pair, never answered
    assert r.status_code == 200, r.text
    assert GROUP_DEADLINE_S <= took < GROUP_DEADLINE_S + 3  # the deadline ended the group: no hang
    scores = [x["scores"]["cmp"] for x in r.json()["results"]]
    assert [s["valid"] for s in scores] == [True] * 4  # 10 of 12 calls answered: coverage 0.83
    assert [s["reward"] for s in scores] == [0.0, 0.0, 2 / 3, 1.0]  # from the pairs that answered
    report = scores[0]["details"]["group"]
    assert report["timed_out"] and report["calls"]["failed"] == {"timeout": 2}
    assert report["comparisons"] == {"done": 5, "masked": 0, "failed": 1}
    assert [0, 1] in [[0, p[0]] for p in scores[0]["details"]["pairs"] if p[1] == "failed"]
    deadline = time.monotonic() + 5
    while fake.counters["stall_disconnected"] < hung_up + 2 and time.monotonic() < deadline:
        await client.get("/healthz")  # the fake notices within 20 ms that the gateway hung up
    assert fake.counters["stall_disconnected"] >= hung_up + 2  # the stalled calls were cancelled, not left open


async def test_a_group_below_min_coverage_is_invalid_with_the_calls_error(served):
    client, _ = served
    r, took = await post(client, group([0, 4, 8, 100]))  # 3 of the 6 pairs dark: 6 of 12 calls answer
    scores = [x["scores"]["cmp"] for x in r.json()["results"]]
    assert took < GROUP_DEADLINE_S + 3
    report = scores[0]["details"]["group"]
    assert report["calls"]["failed"] == {"timeout": 6} and report["coverage"] == 0.5
    assert all(s["valid"] for s in scores)  # 0.5 is min_coverage: scored from what came back
    r, _ = await post(client, group([0, 4, 8, 12]))  # every pair dark: nothing came back
    scores = [x["scores"]["cmp"] for x in r.json()["results"]]
    assert all(not s["valid"] and s["reward"] is None and s["error"]["code"] == "timeout" for s in scores)
    assert "below min_coverage" in scores[0]["error"]["message"]


async def test_garbage_replies_are_masked_never_a_tie(served):
    client, _ = served
    r, _ = await post(client, group([40, 200, 120]), judge="garbage")
    assert r.status_code == 200
    results = r.json()["results"]
    for result in results:
        score = result["scores"]["garbage"]
        assert not score["valid"] and score["reward"] is None and score["error"]["code"] == "parse_error"
        assert result["reward"] is None and not result["valid"]
    report = results[0]["scores"]["garbage"]["details"]["group"]
    assert report["calls"]["failed"] == {"parse_error": 6} and report["comparisons"]["failed"] == 3


async def test_a_group_of_one_is_not_applicable_and_other_groups_still_score(served):
    client, _ = served
    r, _ = await post(client, group([40], "alone") + group([40, 200], "pair"))
    scores = [x["scores"]["cmp"] for x in r.json()["results"]]
    assert scores[0]["error"]["code"] == "not_applicable" and "no sibling" in scores[0]["error"]["message"]
    assert [s["reward"] for s in scores[1:]] == [0.0, 1.0]


async def test_a_group_over_the_budget_is_refused_before_anything_is_scored(served):
    client, fake = served
    before = fake.counters["requests"]
    r, _ = await post(client, group(list(range(20, 200, 20))))  # 9 samples; max_group_size 8
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["type"] == "group_too_large" and error["field"] == "samples"
    assert "group 'g' has 9 samples" in error["message"] and "budget = 56" in error["message"]
    assert "would make 72 calls" in error["message"]
    assert fake.counters["requests"] == before  # refused before any judge call
    r = await client.post("/flow-factory/pairwise/compute",
                          json={"prompt": ["a lamp"] * 9, "image": [b64(v) for v in range(20, 200, 20)]})
    assert r.status_code == 200 and "max_group_size = 8" in r.json()["error"]  # Flow-Factory: no retry


async def test_a_missing_reference_image_sets_that_sample_aside(served):
    client, _ = served
    ref = {"condition_images": [b64(100)]}
    samples = group([40, 200], **ref) + group([120]) + group([80], **ref)
    r, _ = await post(client, samples, judge="ref")
    scores = [x["scores"]["ref"] for x in r.json()["results"]]
    assert [s["reward"] for s in scores] == [0.0, 1.0, None, 0.0]
    assert scores[2]["error"]["code"] == "bad_input"
    assert "needs its reference image, condition_images[0]" in scores[2]["error"]["message"]
    report = scores[0]["details"]["group"]
    assert report["compared"] == 3 and report["calls"]["asked"] == 6 and list(report["set_aside"]) == ["2"]
    assert scores[0]["details"]["pairs"] == [[-1, "done", 0.0]]  # -1: the reference
    r = await client.post("/flow-factory/pairwise/compute", json={"prompt": ["a lamp"] * 2,
                                                                  "image": [b64(40), b64(50)]})
    assert r.status_code == 200 and "rewards" in r.json()


async def test_the_flow_factory_groupwise_profile_scores_the_request_as_one_group(served):
    client, _ = served
    r = await client.post("/flow-factory/pairwise/compute",
                          json={"prompt": ["a lamp"] * 4, "image": [b64(v) for v in (40, 200, 120, 80)]})
    assert r.status_code == 200, r.text
    assert r.json() == {"rewards": [0.0, 1.0, 2 / 3, 1 / 3], "valid": [True] * 4}


async def test_a_request_without_group_ids_is_one_group(served):
    client, _ = served
    r, _ = await post(client, group([40, 200, 120], group_id=None), judge="bt")
    scores = [x["scores"]["bt"] for x in r.json()["results"]]
    assert scores[0]["details"]["group"]["group_id"] is None and scores[0]["details"]["group"]["size"] == 3
    rewards = [s["reward"] for s in scores]
    assert rewards[1] > rewards[2] > rewards[0] and all(0 < x < 1 for x in rewards)  # a Bradley-Terry fit
    assert all("strength" in s["details"] for s in scores)


async def test_the_python_client_in_process_and_over_http(fake_backend):
    data = config(fake_backend.base_url)
    samples = [{"prompt": "a lamp", "image": gray_png(v), "group_id": "g"} for v in (40, 200, 120)]
    async with AsyncRewardClient(config=validate_config(data)) as client:
        local = await client.rewards.create(samples=samples, judges=["cmp"])
    served = ServedGateway(data)
    try:
        async with AsyncRewardClient(served.url) as client:
            remote = await client.rewards.create(samples=samples, judges=["cmp"])
            too_big = [{"prompt": "a lamp", "image": gray_png(v), "group_id": "g"} for v in range(20, 200, 20)]
            with pytest.raises(RewardAPIError) as err:
                await client.rewards.create(samples=too_big, judges=["cmp"])
    finally:
        served.stop()
    assert [r.reward for r in local.results] == [r.reward for r in remote.results] == [0.0, 1.0, 0.5]
    assert remote.results[0].scores["cmp"].details["group"]["comparisons"]["done"] == 3
    assert err.value.status == 422 and err.value.body["error"]["type"] == "group_too_large"


async def test_a_groups_calls_go_to_one_replica():
    servers = [FakeOpenAIServer().start(), FakeOpenAIServer().start()]
    gateway = Gateway(validate_config(config(*(s.base_url for s in servers))))
    try:
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(gateway)), base_url="http://localhost")
        async with client:
            for g in range(6):
                before = [s.counters["requests"] for s in servers]
                r, _ = await post(client, group([40 + g, 200, 120, 80], str(g)))
                assert r.status_code == 200
                got = sorted(s.counters["requests"] - b for s, b in zip(servers, before))
                assert got == [0, 12]  # all 12 calls of the group on one replica
    finally:
        await gateway.aclose()
        for s in servers:
            s.stop()


async def test_an_abandoned_request_hangs_up_its_groups_calls(fake_backend):
    data = config(fake_backend.base_url)
    data["judges"]["cmp"]["options"]["group_deadline_s"] = 60  # far: the cancel, not the deadline, ends it
    gateway = Gateway(validate_config(data))
    hung_up = fake_backend.counters["stall_disconnected"]
    samples = [SampleInput(prompt="a lamp", image=gray_png(v), group_id="g") for v in (0, 4, 8)]  # 6 calls stall
    task = asyncio.ensure_future(gateway.score(RewardRequest(samples=samples, judges=["cmp"])))
    try:
        deadline = time.monotonic() + 10
        while fake_backend.counters["inflight"] < 6 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # the fake's counter, in its own thread: nothing to await
        assert fake_backend.counters["inflight"] >= 6
        task.cancel()  # the client went away
        with pytest.raises(asyncio.CancelledError):
            await task
        while fake_backend.counters["stall_disconnected"] < hung_up + 6 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert fake_backend.counters["stall_disconnected"] >= hung_up + 6  # every call of the group hung up
    finally:
        await gateway.aclose()
