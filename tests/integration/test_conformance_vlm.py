"""The conformance table's VLM rows on the real vLLM CPU server (docs/integrations/conformance.md):
the peers' formulas (tests/support/peer_formulas.py) on the very completions the server returned
(logprobs, reply text), against what the trainer receives through our protocol code, to a
relative 1e-5. The completions are recorded on the way through the judge's backend pool; nothing
is faked. The judges are configured as configs/cosmos_rl.toml and configs/flow_factory.toml ship
them, on the session's tiny model (generative replies held to the rubric's shape by a regex)."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.support import peer_formulas as peer
from tests.support.cosmos_client import enqueue_body, poll
from tests.support.protocol_clients import ff_compute, ff_payload, pil_images

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
REL = 1e-5
WORDS = r"[a-z ]{3,16}"
SCORE = r"[1-4]\.[0-9]"
T2I_REGEX = (rf"# Detailed Judgement\n1\. Text Faithfulness:\n## Justification: {WORDS}\n## Score: {SCORE}\n"
             rf"2\. Physical and Visual Quality:\n## Justification: {WORDS}\n## Score: {SCORE}\n"
             rf"3\. Text Rendering:\n## Justification: {WORDS}\n## Score: ({SCORE}|N/A)\n# Summary: {WORDS}")
EDIT_REGEX = (rf"# Detailed Judgement\n1\. Text Faithfulness:\n## Justification: {WORDS}\n## Score: {SCORE}\n"
              rf"2\. Image Faithfulness:\n## Justification: {WORDS}\n## Score: {SCORE}\n"
              rf"3\. Physical and Visual Quality:\n## Justification: {WORDS}\n## Score: {SCORE}\n"
              rf"4\. Text Rendering:\n## Justification: {WORDS}\n## Score: ({SCORE}|N/A)\n# Summary: {WORDS}")
FINAL_REGEX = rf"{WORDS}\nFinal Score: [1-4](\.[0-9])?"


def _shipped(name: str) -> dict:
    return tomllib.loads((ROOT / "configs" / name).read_text())


def _on(judge: dict, backend: str, **options: Any) -> dict:
    """A shipped judge entry on the session's server (same template, options and sampling)."""
    return {**judge, "backend": backend, "options": {**judge.get("options", {}), **options}}


def config(vllm_url: str) -> dict:
    cosmos, flow = _shipped("cosmos_rl.toml"), _shipped("flow_factory.toml")
    backend = {"base_urls": [vllm_url], "timeout_s": 300}
    return {
        "backends": {"cosmos": {**backend, "model": "nvidia/Cosmos-Reason1-7B-Reward"},
                     "unified": {**backend, "model": "CodeGoat24/UnifiedReward-qwen-7b"},
                     "rational": {**backend, "model": "RationalRewards-8B-T2I"}},
        "judges": {
            "cosmos_reason1": _on(cosmos["judges"]["cosmos_reason1"], "cosmos", min_answer_mass=0.0),
            "unified_reward": _on(cosmos["judges"]["unified_reward"], "unified", guided_regex=FINAL_REGEX,
                                  max_tokens=60),
            "rational_rewards_t2i": _on(flow["judges"]["rational_rewards_t2i"], "rational",
                                        guided_regex=T2I_REGEX, max_tokens=200),
            "rational_rewards_edit": _on(flow["judges"]["rational_rewards_edit"], "rational",
                                         guided_regex=EDIT_REGEX, max_tokens=260),
        },
        "flow_factory": {"profiles": {k: flow["flow_factory"]["profiles"][k]
                                      for k in ("rational_rewards_t2i", "rational_rewards_edit")}},
    }


@pytest.fixture(scope="module")
async def served(vllm):
    gw = Gateway(validate_config(config(vllm.base_url)))
    seen: list[tuple[list[dict], dict]] = []
    for pool in {id(j.pool): j.pool for j in gw.judges.values()}.values():
        real = pool.chat

        async def chat(_real=real, **params: Any) -> dict:
            completion = await _real(**params)
            seen.append((params["messages"], completion))  # the server's answer, as the judge gets it
            return completion

        pool.chat = chat  # type: ignore[method-assign]
    app = create_app(gw)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=900) as client:
        yield client, seen
    await app.state.cosmos_rl.aclose()
    await gw.aclose()


def _completion_for(seen: list, text: str) -> dict:
    """The one recorded completion whose user turn contains `text`."""
    found = [c for messages, c in seen
             if any(text in part.get("text", "") for part in messages[-1]["content"] if isinstance(part, dict))]
    assert len(found) == 1, (text, len(found))
    return found[0]


async def test_cosmos_reason1_on_real_vllm(served):
    client, seen = served
    prompts = ["a ball rolls off a table", "a glass fills with water", "a cat jumps onto a sofa"]
    videos = np.random.default_rng(3).integers(0, 256, (3, 3, 6, 56, 56), dtype=np.uint8)  # [B, 3, T, H, W]
    meta = {"reward_fn": {"cosmos_reason1": 1.0}, "prompts": prompts, "media_type": "video",
            "video_infos": [{"video_fps": 8.0}] * 3}
    r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, videos))
    assert r.status_code == 200, r.text
    body = (await poll(client, r.json()["uuid"], "cosmos_reason1", timeout=900, interval=0.5)).json()
    assert body["valid"] == [True] * 3, body["errors"]
    s = body["scores"]
    for i, prompt in enumerate(prompts):
        top = _completion_for(seen, prompt)["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        logprobs = {t["token"]: t["logprob"] for t in top}  # a repeated text keeps its last entry
        assert "Yes" in logprobs and "No" in logprobs, list(logprobs)  # the premise: both listed
        # cosmos-rl's formula on these log-probabilities (their difference is its logit difference)
        prediction, no_score = peer.cosmos_reason1(logprobs["Yes"], logprobs["No"])
        assert s["no_score"][i] == pytest.approx(no_score, rel=REL)
        assert s["prediction"][i] == prediction
        assert s["yes_logit"][i] - s["no_logit"][i] == pytest.approx(logprobs["Yes"] - logprobs["No"], rel=REL, abs=1e-9)
        assert s["yes_logit"][i] == pytest.approx(logprobs["Yes"], rel=REL)


async def test_unified_reward_on_real_vllm(served):
    client, seen = served
    prompts = ["a red apple on a table", "a blue car in the rain"]
    images = np.random.default_rng(4).integers(0, 256, (2, 64, 64, 3), dtype=np.uint8)
    meta = {"reward_fn": {"unified_reward": 1.0}, "prompts": prompts, "media_type": "image"}
    r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, images))
    body = (await poll(client, r.json()["uuid"], "unified_reward", timeout=900, interval=0.5)).json()
    assert body["valid"] == [True, True], body["errors"]
    for i, prompt in enumerate(prompts):
        reply = _completion_for(seen, f"Text Caption: [{prompt}]")["choices"][0]["message"]["content"]
        assert body["scores"]["unified_reward"][i] == pytest.approx(peer.unified_reward(reply), rel=REL)


async def test_rational_rewards_on_real_vllm(served):
    client, seen = served
    images = pil_images(2, size=56, seed=5)
    t2i = ["a lighthouse on a cliff", "a bowl of ramen"]
    got = await ff_compute(client, "/flow-factory/rational_rewards_t2i", ff_payload(t2i, image=images))
    for i, prompt in enumerate(t2i):
        reply = _completion_for(seen, f"User Instruction: {prompt}\n")["choices"][0]["message"]["content"]
        assert any(isinstance(v, float) for v in peer.rational_parse(reply, peer.RATIONAL_T2I_SECTIONS).values())
        assert got[i] == pytest.approx(peer.rational_reward(reply, peer.RATIONAL_T2I_SECTIONS), rel=REL, abs=1e-12)
    edit = ["make the sky purple", "add a red hat"]
    sources = pil_images(2, size=56, seed=6)
    got = await ff_compute(client, "/flow-factory/rational_rewards_edit",
                           ff_payload(edit, image=images, condition_images=[[s] for s in sources]))
    for i, prompt in enumerate(edit):
        reply = _completion_for(seen, f"User Instruction: {prompt}\n")["choices"][0]["message"]["content"]
        assert any(isinstance(v, float) for v in peer.rational_parse(reply, peer.RATIONAL_EDIT_SECTIONS).values())
        assert got[i] == pytest.approx(peer.rational_reward(reply, peer.RATIONAL_EDIT_SECTIONS), rel=REL, abs=1e-12)
    assert not any(math.isnan(v) for v in got)
