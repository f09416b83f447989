"""The `gen_eval` head end to end: a real worker process under .venv-geneval running mmdet's
`init_detector` / `inference_detector` on Mask2Former Swin-S COCO (mmdet's shipped config, random
weights saved by tests/support/tiny_geneval.py) on the CPU, colours by the tiny open_clip model
of the heads tests, the rules on the gateway. No network."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.heads.geneval.rules import COLORS, TAGS
from judge_gateway.schema import RewardRequest
from tests.support.heads_env import build_random_geneval, build_tiny_heads, geneval_judge

pytestmark = pytest.mark.integration
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="module")
def detector_checkpoint() -> Path:
    return build_random_geneval() / "mask2former_random.pth"


@pytest.fixture(scope="module")
async def gw(detector_checkpoint):
    judge = geneval_judge(detector_checkpoint.parent, build_tiny_heads("tiny"), threads=2, max_batch_size=2)
    gateway = Gateway(validate_config({"judges": {"gen_eval": judge}}))
    try:
        yield gateway
    finally:
        await gateway.aclose()


def png(seed: int, size=(96, 64)) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


async def test_real_mmdet_detector_end_to_end(gw):
    samples = [
        {"prompt": "a photo of a red dog", "image": png(1),
         "metadata": {"tag": "colors", "include": [{"class": "dog", "count": 1, "color": "red"}]}},
        {"prompt": "a photo of two dogs", "image": png(2),
         "metadata": {"geneval_tags": "counting", "geneval_includes": [{"class": "dog", "count": 2}]}},
        {"prompt": "a photo of a cat", "image": png(3), "metadata": {"tag": "single_object"}},
    ]
    response = await gw.score(RewardRequest(samples=samples, judges=["gen_eval"]))
    colors, counting, bad = (r.scores["gen_eval"] for r in response.results)
    for s in (colors, counting):
        assert s.valid, s.error
        d = s.details
        assert d["head"]["mmcv"].startswith("2.1") and d["head"]["mmdet"].startswith("3.3")
        assert "mask2former_swin-s" in d["head"]["detector_config"]
        assert set(d["group"]) == set(TAGS) and sum(v is not None for v in d["group"].values()) == 1
        assert 0.0 <= s.raw <= 1.0 and d["score"] == s.raw and d["correct"] in (0.0, 1.0)
        for cls, det in d["detections"].items():
            assert det["count"] <= 16 and len(det["boxes"]) == det["count"]
            assert all(x > d["box_threshold"] for x in det["scores"])
    # The checkpoint's class bias makes (nearly) every query a dog; the colour path ran on them.
    dogs = colors.details["detections"].get("dog")
    assert dogs is not None and dogs["count"] >= 1, colors.details["detections"]
    assert all(c in COLORS for c in dogs["colors"])
    assert colors.details["checks"][0]["colors"] == dogs["colors"][:1]
    assert counting.details["box_threshold"] == 0.9 and colors.details["box_threshold"] == 0.3
    assert not bad.valid and bad.error.code.value == "bad_input" and "include" in bad.error.message
