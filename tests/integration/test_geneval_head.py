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

pytestmark = [pytest.mark.integration, pytest.mark.needs_geneval_venv]
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


# The README's GenEval request (cosmos-rl reward_service/README.md, 5.2 "Image (GenEval)"), as written.
README_GENEVAL = {
    "prompts": ["a photo of a brown giraffe and a white stop sign"],
    "reward_fn": {"gen_eval": 1.0},
    "media_type": "image",
    "geneval_tags": ["single_object"],
    "geneval_includes": [[{"class": "giraffe", "count": 1, "color": "brown"},
                          {"class": "stop sign", "count": 1, "color": "black"}]],
    "geneval_only_strict": False,
}


async def test_readme_geneval_request_end_to_end(gw):
    """The README's request shape through enqueue / pull on the real detector, and the service's
    four keys equal cosmos-rl's own GenEval code (tests/support/peer_formulas.gen_eval) on the
    detections the worker made; then a request whose includes the random detector can meet."""
    import httpx

    from judge_gateway.server import create_app
    from tests.support import peer_formulas as peer
    from tests.support.cosmos_client import enqueue_body, headers, poll

    dogs = {**README_GENEVAL, "prompts": ["two dogs", "a dog left of a cat"],
            "geneval_tags": ["counting", "position"],
            "geneval_includes": [[{"class": "dog", "count": 2}],
                                 [{"class": "dog", "count": 1}, {"class": "cat", "count": 1, "position": ["left of", 0]}]]}
    app = create_app(gw)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=600) as client:
            for meta in (README_GENEVAL, dogs):
                n = len(meta["prompts"])
                batch = np.stack([np.asarray(Image.open(io.BytesIO(png(7 + i)))) for i in range(n)])
                r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, batch), headers=headers())
                assert r.status_code == 200, r.text
                body = (await poll(client, r.json()["uuid"], "gen_eval", timeout=600, interval=0.2)).json()
                assert body["valid"] == [True] * n, body["errors"]
                assert "ignored_fields" not in body  # every GenEval field is read
                samples = []
                for i, cell in enumerate(body["judge_scores"]):
                    det = cell["details"]["detections"]
                    samples.append({"tag": meta["geneval_tags"][i], "include": meta["geneval_includes"][i],
                                    "bboxes": {c: np.array([b + [s] for b, s in zip(d["boxes"], d["scores"])]).reshape(-1, 5)
                                               for c, d in det.items()},
                                    "colors": {c: d["colors"] for c, d in det.items()}})
                want = peer.gen_eval(samples)
                s = body["scores"]
                assert s["gen_eval_reward"] == want["gen_eval_reward"] and s["gen_eval_strict"] == want["gen_eval_strict"]
                assert s["gen_eval_score"] == [pytest.approx(v, rel=1e-5, abs=1e-12) for v in want["gen_eval_score"]]
                assert s["gen_eval_group"] == want["gen_eval_group"]
                assert set(s["gen_eval_group"]) == set(TAGS) and all(len(v) == n for v in s["gen_eval_group"].values())
    finally:
        await app.state.cosmos_rl.aclose()
