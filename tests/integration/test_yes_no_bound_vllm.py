"""A top-K lacking one answer, on the real vLLM: the absent answer is bounded, the score valid.

`top_logprobs = 1` lists only the greedy token (a Yes or a No variant for the tiny model), so the
other answer is always absent. (A `logit_bias` cannot force this: vLLM V1 reports raw logprobs,
taken before logit processors, see vllm/v1/sample/sampler.py.)
"""

from __future__ import annotations

import math

import httpx
import numpy as np
import pytest
from openai import AsyncOpenAI

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.judges import ScoreContext
from judge_gateway.media import MediaCache
from judge_gateway.schema import RewardRequest, SampleInput
from judge_gateway.server import create_app
from tests.conftest import png_bytes
from tests.support.protocol_clients import (
    cosmos_score,
    ff_compute,
    ff_payload,
    pil_images,
)

pytestmark = pytest.mark.integration

TOP1 = {"top_logprobs": 1, "min_answer_mass": 0.0}


def top1_config(base_url: str) -> dict:
    return {
        "backends": {
            "qwen_vl": {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "base_urls": [base_url], "timeout_s": 120},
            "cosmos": {"model": "nvidia/Cosmos-Reason1-7B-Reward", "base_urls": [base_url], "timeout_s": 120},
        },
        "judges": {
            "quality": {"kind": "yes_no", "backend": "qwen_vl", "template": "image_quality@1", "options": TOP1},
            "cosmos_reason1": {"kind": "yes_no", "backend": "cosmos", "template": "cosmos_reason1@1",
                               "options": TOP1, "video": {"max_frames": 4, "max_pixels": 4096}},
        },
        "flow_factory": {"profiles": {"quality": {"judges": {"quality": 1.0}}}},
    }


def expected_from(top: list) -> tuple[float, float, str]:
    """Independent of our parser: the listed answer's p, the absent one's bound, its word."""
    assert len(top) == 1, top  # the test's premise: one entry, so one answer is absent
    word = top[0].token.strip().lower()
    assert word in ("yes", "no"), top
    p = math.exp(top[0].logprob)
    bound = min(p, max(0.0, 1.0 - p) + 1e-6)
    return p, bound, "no" if word == "yes" else "yes"


@pytest.fixture(scope="module")
async def top1(vllm):
    gw = Gateway(validate_config(top1_config(vllm.base_url)))
    app = create_app(gw)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=300) as c:
        yield gw, c
    await app.state.cosmos_rl.aclose()
    await gw.aclose()


async def test_native_api_bound_matches_a_direct_request(top1, vllm):
    gw, _ = top1
    samples = [{"prompt": f"a red square {i}", "image": png_bytes(i, (64, 64))} for i in range(4)]
    response = await gw.score(RewardRequest(samples=samples, judges=["quality"]))
    judge = gw.judges["quality"]
    direct = AsyncOpenAI(base_url=vllm.base_url, api_key="EMPTY")
    try:
        for sample, result in zip(samples, response.results):
            s = result.scores["quality"]
            assert s.valid, s.error
            messages, _ = await judge.build_messages(SampleInput(**sample),
                                                     ScoreContext(media=MediaCache(), request_id="t"))
            completion = await direct.chat.completions.create(
                model=judge.model, messages=messages, max_tokens=1, temperature=0.0, logprobs=True, top_logprobs=1)
            p, bound, absent = expected_from(completion.choices[0].logprobs.content[0].top_logprobs)
            assert s.details["bounded_answer"] == absent
            assert s.details["bound"] == pytest.approx(bound, rel=1e-5)
            p_yes, p_no = (bound, p) if absent == "yes" else (p, bound)
            assert s.reward == pytest.approx(p_yes / (p_yes + p_no), rel=1e-5)
            assert s.details["logprob_yes"] == pytest.approx(math.log(p_yes), rel=1e-5)
            assert s.details["logprob_no"] == pytest.approx(math.log(p_no), rel=1e-5)
    finally:
        await direct.close()


async def test_cosmos_rl_legacy_keys_are_all_filled(top1):
    _, client = top1
    videos = np.random.default_rng(5).integers(0, 256, size=(2, 3, 6, 32, 32), dtype=np.uint8)
    meta = {"reward_fn": {"cosmos_reason1": 1.0}, "prompts": ["a ball", "a car"], "media_type": "video",
            "video_infos": [{"video_fps": 6.0}, {"video_fps": 6.0}]}
    body = await cosmos_score(client, meta, videos, "cosmos_reason1", timeout=300)
    assert body["valid"] == [True, True], body.get("errors")
    s = body["scores"]
    for i, cell in enumerate(body["judge_scores"]):
        d = cell["details"]
        assert d["bounded_answer"] in ("yes", "no")
        assert s["no_score"][i] == pytest.approx(cell["reward"])
        assert s["yes_logit"][i] == pytest.approx(d["logprob_yes"])
        assert s["no_logit"][i] == pytest.approx(d["logprob_no"])
        assert s["prediction"][i] == ("Good" if cell["reward"] >= 0.5 else "Bad")
        assert 1.0 / (1.0 + math.exp(s["yes_logit"][i] - s["no_logit"][i])) == pytest.approx(s["no_score"][i])


async def test_flow_factory_rewards_are_the_bounded_scores(top1):
    gw, client = top1
    imgs = pil_images(2, size=64, seed=3)
    rewards = await ff_compute(client, "/flow-factory/quality", ff_payload(["a cat", "a dog"], image=imgs))
    native = await gw.score(RewardRequest(samples=[{"prompt": p, "image": i} for p, i in
                                                   zip(["a cat", "a dog"], ff_payload([], image=imgs)["image"])],
                                          judges=["quality"]))
    for reward, result in zip(rewards, native.results):
        s = result.scores["quality"]
        assert s.valid and s.details["bounded_answer"] in ("yes", "no")
        assert reward == pytest.approx(s.reward)
