"""Flow-Factory's vllm_evaluate against the real vLLM: its request and formula, done by hand with
the openai client as its code does, give the gateway's `vllm_evaluate` reward."""

from __future__ import annotations

import base64
import io
import tomllib
from pathlib import Path

import httpx
import pytest
from openai import AsyncOpenAI
from PIL import Image

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.support import peer_formulas as peer
from tests.support.protocol_clients import ff_compute, ff_payload, pil_images

pytestmark = pytest.mark.integration

# Flow-Factory's EVALUATE_PROMPT, the question its code sends (not "Is it a beautiful image?",
# a second assignment that is not on its main branch)
QUESTION = peer.VLLM_EVALUATE_PROMPT
ROOT = Path(__file__).resolve().parents[2]


def config(base_url: str) -> dict:
    """configs/flow_factory.toml's judge and profile, on the session's server."""
    shipped = tomllib.loads((ROOT / "configs" / "flow_factory.toml").read_text())
    return {
        "backends": {"qwen_vl": {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "base_urls": [base_url],
                                 "timeout_s": 120}},
        "judges": {"vllm_evaluate": shipped["judges"]["vllm_evaluate"]},
        "flow_factory": {"profiles": {"vllm_evaluate": shipped["flow_factory"]["profiles"]["vllm_evaluate"]}},
    }


def reference_message(image: Image.Image) -> list[dict]:
    """_score_single's messages, with pil_image_to_base64's JPEG data URL."""
    buf = io.BytesIO()
    image.save(buf, format="JPEG")
    url = "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("utf-8")
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": QUESTION}]}]


def reference_reward(top_logprobs) -> float:
    """_get_yes_cond_prob(canonicalize=False), for replies that list both exact tokens."""
    token_logprobs = {t.token: t.logprob for t in top_logprobs}
    assert "Yes" in token_logprobs and "No" in token_logprobs, list(token_logprobs)  # the premise
    return peer.vllm_evaluate(token_logprobs)


async def test_gateway_matches_vllm_evaluate_on_real_vllm(vllm):
    gw = Gateway(validate_config(config(vllm.base_url)))
    app = create_app(gw)
    images = pil_images(3, size=64, seed=11)
    # a PNG round trip, as the remote client sends them and the server decodes them
    decoded = [Image.open(io.BytesIO(base64.b64decode(b))) for b in ff_payload([], image=images)["image"]]
    direct = AsyncOpenAI(base_url=vllm.base_url, api_key="EMPTY")
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost",
                                     timeout=300) as client:
            rewards = await ff_compute(client, "/flow-factory/vllm_evaluate",
                                       ff_payload(["a", "b", "c"], image=images))
            by_first_frame = await ff_compute(client, "/flow-factory/vllm_evaluate",
                                              ff_payload(["a"], video=[images]))
        expected = []
        for image in decoded:
            completion = await direct.chat.completions.create(
                model="Qwen/Qwen2.5-VL-7B-Instruct", messages=reference_message(image), temperature=0.0,
                max_completion_tokens=1, logprobs=True, top_logprobs=20)
            expected.append(reference_reward(completion.choices[0].logprobs.content[0].top_logprobs))
    finally:
        await direct.close()
        await app.state.cosmos_rl.aclose()
        await gw.aclose()
    assert rewards == [pytest.approx(e, abs=1e-6) for e in expected]
    assert by_first_frame == [pytest.approx(expected[0], abs=1e-6)]
