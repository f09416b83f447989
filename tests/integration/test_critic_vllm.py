"""The critic end to end on the real vLLM CPU server (tiny Qwen2.5-VL, structured outputs on):
two videos scored by cosmos_reason1 and the critic in one request, each video encoded once."""

from __future__ import annotations

import base64
import io
import re

import httpx
import numpy as np
import pytest
from PIL import Image

from judge_gateway.bands import DEFAULT_VIDEO_BANDS, band_of
from judge_gateway.parsers.json_schema import validate
from judge_gateway.prompts import load_template
from tests.support.served_gateway import ServedGateway

pytestmark = pytest.mark.integration

SCHEMA = load_template("cosmos_reason1_critic@1").json_schema
VIDEO = {"max_frames": 16, "max_pixels": 12544}


def critic_config(base_url: str) -> dict:
    return {
        "backends": {"cosmos": {"model": "nvidia/Cosmos-Reason1-7B-Reward", "base_urls": [base_url],
                                "timeout_s": 300}},
        "judges": {
            "cosmos_reason1": {"kind": "yes_no", "backend": "cosmos", "template": "cosmos_reason1@1",
                               "video": VIDEO},
            "critic": {"kind": "critic", "backend": "cosmos", "template": "cosmos_reason1_critic@1",
                       "options": {"share_video_with": "cosmos_reason1", "max_tokens": 1500}},
            # the same critic without the schema sent to vLLM: the control for "enforced by the schema"
            "critic_unconstrained": {"kind": "critic", "backend": "cosmos", "template": "cosmos_reason1_critic@1",
                                     "default": False,
                                     "options": {"share_video_with": "cosmos_reason1", "max_tokens": 64,
                                                 "structured_outputs": False}},
        },
    }


def png_b64(arr: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def video(seed: int, n: int = 8, size: int = 64) -> dict:
    t = np.arange(n)[:, None, None, None]
    arr = (np.zeros((n, size, size, 3), dtype=np.int64) + np.arange(size)[None, None, :, None] * 3 + t * 9 + seed * 50)
    return {"frames": [png_b64(f) for f in (arr % 256).astype(np.uint8)], "fps": 8}


def metric(text: str, name: str, kind: str) -> float:
    match = re.search(rf'^{name}\{{kind="{kind}"\}} (\S+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


@pytest.fixture(scope="module")
def served(vllm):
    s = ServedGateway(critic_config(vllm.base_url))
    yield s
    s.stop()


async def test_critic_and_reward_judge_on_two_videos_in_one_request(served):
    samples = [{"prompt": "a ball rolls", "video": video(0)}, {"prompt": "a ball falls", "video": video(1)}]
    async with httpx.AsyncClient(base_url=served.url, timeout=600) as http:
        before = (await http.get("/metrics")).text
        r = await http.post("/v1/rewards", json={"samples": samples, "judges": ["cosmos_reason1", "critic"]})
        assert r.status_code == 200, r.text
        after = (await http.get("/metrics")).text
    results = r.json()["results"]
    assert len(results) == 2
    for res in results:
        reward_judge, critic = res["scores"]["cosmos_reason1"], res["scores"]["critic"]
        assert reward_judge["valid"], reward_judge
        assert critic["valid"], critic
        d = critic["details"]
        assert d["finish_reason"] == "stop"
        # the reply parsed and conforms to the template's schema (vLLM enforced it while decoding)
        assert validate(d["critique"], SCHEMA) == []
        score = d["critique"]["video_analysis"]["physical_accuracy"]["score"]
        assert critic["raw"] == pytest.approx(score) and critic["reward"] == pytest.approx(score)
        assert d["band"] == band_of(score, DEFAULT_VIDEO_BANDS)
        assert reward_judge["details"]["band"] == band_of(reward_judge["reward"], DEFAULT_VIDEO_BANDS)
        # both judges saw the same encoded clip: 8 frames at 8 fps, 1 s
        assert d["video"] == reward_judge["details"]["video"]
        assert d["clip_duration_s"] == pytest.approx(d["video"]["num_frames"] / d["video"]["fps"]) == pytest.approx(1.0)
        expected = [{"label": v["label"], "t_s": v["t_s"],
                     "valid_time": v["t_s"] is not None and 0 <= v["t_s"] <= d["clip_duration_s"]}
                    for v in d["critique"]["video_analysis"]["physical_accuracy"]["violations"]]
        assert d["violations"] == expected
        assert d["bad_violation_times"] == sum(1 for v in expected if v["t_s"] is not None and not v["valid_time"])
    # each of the 2 videos encoded once; the second judge on it reused the encode
    assert metric(after, "judge_gateway_media_encodes_total", "video") - \
        metric(before, "judge_gateway_media_encodes_total", "video") == 2
    assert metric(after, "judge_gateway_media_cache_hits_total", "video") - \
        metric(before, "judge_gateway_media_cache_hits_total", "video") == 2


async def test_without_the_schema_the_tiny_model_reply_is_parse_error(served):
    async with httpx.AsyncClient(base_url=served.url, timeout=600) as http:
        r = await http.post("/v1/rewards", json={"samples": [{"prompt": "a ball", "video": video(2)}],
                                                 "judges": ["critic_unconstrained"]})
    assert r.status_code == 200, r.text
    s = r.json()["results"][0]["scores"]["critic_unconstrained"]
    assert not s["valid"] and s["reward"] is None
    assert s["error"]["code"] == "parse_error"
