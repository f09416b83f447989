"""Comparative judges on the session's real vLLM (the tiny Qwen2.5-VL on the CPU): two images per
request reach the model, a one-token comparative verdict is read from its logprobs in both orders
and combined, and a chain-of-thought verdict the tiny model cannot write (it has no `<answer>`
to give) leaves every sample invalid with `parse_error`, never a 0.5."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.schema import RewardRequest, SampleInput

pytestmark = pytest.mark.integration


def image(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (56, 56, 3), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def config(base_url: str) -> dict:
    options = {"budget": 6, "max_group_size": 3, "group_deadline_s": 120}
    return {
        "backends": {"qwen_vl": {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "base_urls": [base_url], "timeout_s": 120}},
        "judges": {
            "pairwise": {"kind": "comparative", "backend": "qwen_vl", "template": "pairwise_yes_no@1",
                         "options": options},
            "think": {"kind": "comparative", "backend": "qwen_vl", "template": "unified_reward_think@1",
                      "options": {**options, "budget": 2, "max_group_size": 2, "max_tokens": 8}},
        },
    }


async def test_comparisons_on_the_real_vllm(vllm):
    gateway = Gateway(validate_config(config(vllm.base_url)))
    try:
        group = [SampleInput(prompt="a red apple on a table", image=image(i), group_id="g") for i in range(3)]
        response = await gateway.score(RewardRequest(samples=group, judges=["pairwise"]))
        scores = [r.scores["pairwise"] for r in response.results]
        assert all(s.valid and 0.0 <= s.reward <= 1.0 for s in scores), [s.error for s in scores]
        report = scores[0].details["group"]
        assert report["calls"]["made"] == report["calls"]["valid"] == 6
        assert report["comparisons"]["done"] == 3 and report["swap_agreement"]["pairs"] == 3
        assert 0.0 <= report["position_bias"]["first_chosen"] <= 1.0
        # the win shares are one outcome per pair: they sum to the pairs compared
        assert sum(s.details["win_share"] for s in scores) == pytest.approx(3.0)

        response = await gateway.score(RewardRequest(samples=group[:2], judges=["think"]))
        scores = [r.scores["think"] for r in response.results]
        assert all(not s.valid and s.reward is None and s.error.code.value == "parse_error" for s in scores)
        assert scores[0].details["group"]["calls"]["failed"] == {"parse_error": 2}
        assert all(r.reward is None for r in response.results)
    finally:
        await gateway.aclose()
