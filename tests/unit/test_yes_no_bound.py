"""A judge so sure that one answer falls out of the top-K scores ~1 (or ~0), valid, on every API.

The stub `fake-sure-no` lists No 0.97, "The" 0.012, "A" 0.008 and no Yes variant: Yes is bounded
by the smallest listed entry (0.008 < the 0.01 the list leaves over).
"""

from __future__ import annotations

import math

import httpx
import numpy as np
import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.schema import RewardRequest
from judge_gateway.server import create_app
from tests.conftest import png_bytes
from tests.support.protocol_clients import (
    cosmos_score,
    ff_compute,
    ff_payload,
    pil_images,
)

P_NO, BOUND = 0.97, 0.008
NO_SCORE = P_NO / (P_NO + BOUND)  # cosmos_reason1: No (no anomaly) is good


def sure_config(base_url: str) -> dict:
    backend = {"model": "fake-sure-no", "base_urls": [base_url], "timeout_s": 10, "max_retries": 1}
    return {
        "backends": {"sure": backend},
        "judges": {
            "cosmos_reason1": {"kind": "yes_no", "backend": "sure", "template": "cosmos_reason1@1"},
            "quality": {"kind": "yes_no", "backend": "sure", "template": "image_quality@1"},
        },
        "flow_factory": {"profiles": {"quality": {"judges": {"quality": 1.0}}}},
    }


@pytest.fixture
async def sure_app(fake_backend):
    gw = Gateway(validate_config(sure_config(fake_backend.base_url)))
    app = create_app(gw)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=60) as c:
        yield gw, c
    await app.state.cosmos_rl.aclose()
    await gw.aclose()


async def test_native_api_bounds_the_absent_answer(sure_app):
    gw, _ = sure_app
    response = await gw.score(RewardRequest(samples=[{"prompt": "a cat", "image": png_bytes(1)}],
                                            judges=["quality"]))
    s = response.results[0].scores["quality"]
    assert s.valid and s.error is None
    assert s.reward == pytest.approx(BOUND / (P_NO + BOUND))  # Yes is good here: ~0, not 0
    d = s.details
    assert d["bounded_answer"] == "yes" and d["bound"] == pytest.approx(BOUND)
    assert d["bound_rule"] == "min_listed"
    assert d["logprob_yes"] == pytest.approx(math.log(BOUND))
    assert d["logprob_no"] == pytest.approx(math.log(P_NO))


async def test_cosmos_rl_envelope_fills_every_legacy_key_from_the_bound(sure_app):
    _, client = sure_app
    rng = np.random.default_rng(1)
    videos = rng.integers(0, 256, size=(2, 3, 4, 32, 32), dtype=np.uint8)
    meta = {"reward_fn": {"cosmos_reason1": 1.0}, "prompts": ["a ball", "a car"], "media_type": "video",
            "video_infos": [{"video_fps": 8.0}, {"video_fps": 8.0}]}
    body = await cosmos_score(client, meta, videos, "cosmos_reason1")
    assert body["valid"] == [True, True]
    s = body["scores"]
    assert s["prediction"] == ["Good", "Good"]  # not "Invalid"
    assert s["no_score"] == [pytest.approx(NO_SCORE)] * 2
    assert s["yes_logit"] == [pytest.approx(math.log(BOUND))] * 2
    assert s["no_logit"] == [pytest.approx(math.log(P_NO))] * 2
    # the softmax over the two legacy logits gives back no_score, as in cosmos-rl
    no_logit, yes_logit = s["no_logit"][0], s["yes_logit"][0]
    assert 1.0 / (1.0 + math.exp(yes_logit - no_logit)) == pytest.approx(s["no_score"][0])
    assert body["judge_scores"][0]["details"]["bounded_answer"] == "yes"


async def test_flow_factory_scores_the_sure_sample(sure_app):
    _, client = sure_app
    rewards = await ff_compute(client, "/flow-factory/quality", ff_payload(["a cat"], image=pil_images(1)))
    assert rewards == [pytest.approx(BOUND / (P_NO + BOUND))]
