"""Bring your own reward, end to end: the "add a reward" guide's config and classes
(docs/examples/byo) served over HTTP, each class in a real worker under the heads venv.

- a custom head (a small torch model built by tests/support/tiny_byo.py) through the native API,
  cosmos-rl's and Flow-Factory's, with batches that gather samples of concurrent requests;
- Flow-Factory reward models (pointwise with PIL inputs, groupwise with tensor inputs) and a
  cosmos-rl handler, unchanged, give the numbers they give when called directly;
- a class that raises on one request's item fails that item alone; a class that cannot be
  imported leaves its judge not ready with the reason while the others serve;
- a template family of the user's own folder scores on the session's vLLM.
The peers' base classes are the stand-ins of tests/support/peers (the real packages are not
installable here).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import time
import tomllib

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.support.heads_env import BYO_EXAMPLES, PEERS, build_byo, heads_python
from tests.support.protocol_clients import COSMOS_HEADERS, cosmos_score, enqueue_body, ff_compute, ff_payload
from tests.support.served_gateway import ServedGateway
from tests.support.tolerance import assert_close

pytestmark = pytest.mark.integration
os.environ.setdefault("HF_HUB_OFFLINE", "1")
APPROX = {"rel": 1e-5, "abs": 1e-6}
HEADS = ("sharpness", "colorful", "brightness_rank", "contrast", "prompt_length", "source_distance")


@pytest.fixture(scope="module")
def built():
    return build_byo()


@pytest.fixture(scope="module")
def reference(built):
    return json.loads((built / "reference.json").read_text())


@pytest.fixture(scope="module")
def images(built):
    return np.load(built / "images.npy")


@pytest.fixture(scope="module")
def videos(built):
    return np.load(built / "videos.npy")


def guide_config(built, vllm_url: str) -> dict:
    """docs/examples/byo/gateway.toml as a user would run it, with this machine's interpreter, the
    tiny checkpoint, the peers' stand-ins on the workers' path and the session's vLLM; plus two test
    judges: one whose class raises on some items, one whose class cannot be imported."""
    data = tomllib.loads((BYO_EXAMPLES / "gateway.toml").read_text())
    python = str(heads_python())
    for judge in data["judges"].values():
        options = judge.get("options", {})
        if "pythonpath" in options:
            options["python"] = python
            options["pythonpath"] = [*options["pythonpath"], str(PEERS)]
    sharp = data["judges"]["sharpness"]["options"]
    sharp["params"]["checkpoint"] = str(built / "sharpness.pt")
    sharp["max_wait_ms"] = 300  # a margin for concurrent requests to share a batch on a busy machine
    data["backends"]["qwen_vl"]["base_urls"] = [vllm_url]
    data["judges"]["prompt_length"] = {"kind": "custom", "default": False,
                                       "options": {"head": "tests.support.byo_heads:PromptLength", "python": python}}
    data["judges"]["missing"] = {"kind": "custom", "default": False,
                                 "options": {"head": "no_such_rewards.scorers:Nope", "python": python}}
    data["judges"]["source_distance"] = {"kind": "flow_factory_model", "default": False, "options": {
        "reward_model": "tests.support.byo_peer_heads:SourceDistance", "python": python, "pythonpath": [str(PEERS)],
        "media": ["image", "condition_image"]}}
    data["server"] = {"readiness_interval_s": 0.1}
    return data


@pytest.fixture(scope="module")
def served(built, vllm):
    s = ServedGateway(guide_config(built, vllm.base_url), source=str(BYO_EXAMPLES / "gateway.toml"))
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
async def ready(served):
    """Every judge's worker started (the first readiness probe starts them) and loaded."""
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
        deadline = time.monotonic() + 300
        while True:
            body = (await http.get("/readyz")).json()["judges"]
            if all(body[h]["ready"] for h in HEADS) and "failed" in (body["missing"]["reason"] or ""):
                return body
            assert time.monotonic() < deadline, body
            await asyncio.sleep(0.5)


def b64png(arr: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def image_sample(prompt: str, arr: np.ndarray, **extra) -> dict:
    return {"prompt": prompt, "image": b64png(arr), **extra}


def video_sample(prompt: str, frames: np.ndarray, fps: float) -> dict:
    return {"prompt": prompt, "video": {"frames": [b64png(f) for f in frames], "fps": fps}}


async def rewards(http: httpx.AsyncClient, samples: list[dict], judges: list[str]) -> list[dict]:
    r = await http.post("/v1/rewards", json={"samples": samples, "judges": judges})
    assert r.status_code == 200, r.text
    return [res["scores"] for res in r.json()["results"]]


async def test_an_unimportable_class_leaves_its_judge_not_ready_and_the_rest_serve(served, ready, images):
    reason = ready["missing"]["reason"]
    assert ready["missing"]["ready"] is False
    assert "cannot import 'no_such_rewards.scorers'" in reason and "ModuleNotFoundError" in reason, reason
    async with httpx.AsyncClient(base_url=served.url, timeout=60) as http:
        infos = {j["name"]: j for j in (await http.get("/v1/judges")).json()["judges"]}
        assert infos["missing"]["ready"] is False and infos["sharpness"]["ready"] is True
        assert infos["contrast"]["media"] == ["image", "video"] and infos["brightness_rank"]["media"] == ["image"]
        scores = await rewards(http, [image_sample("a cat", images[0])], ["sharpness", "missing"])
    assert scores[0]["sharpness"]["valid"]
    error = scores[0]["missing"]["error"]
    assert error["code"] == "head_error" and "no_such_rewards" in error["message"], error


async def test_custom_head_batches_across_concurrent_native_requests(served, ready, reference, images, videos):
    prompts = reference["prompts"]
    async with httpx.AsyncClient(base_url=served.url, timeout=120) as http:
        # three requests of two images each, at once: the worker gathers them into shared batches
        results = await asyncio.gather(*(rewards(http, [image_sample(prompts[i], images[i]) for i in (k, k + 3)],
                                                 ["sharpness"]) for k in range(3)))
        video_scores = await rewards(http, [video_sample(prompts[i], videos[i], reference["video_fps"])
                                            for i in range(2)], ["sharpness"])
    seen = []
    for k, scores in enumerate(results):
        for i, s in zip((k, k + 3), scores):
            s = s["sharpness"]
            assert s["valid"], s
            assert s["raw"] == pytest.approx(reference["sharpness_images"][i], **APPROX)
            assert s["model"].startswith("SharpnessNet(") and s["details"]["head"]["class"] == "sharpness:SharpnessHead"
            seen.append(s["details"]["batch_size"])
    assert max(seen) > 2, f"no batch held more than one request's samples: batch sizes {seen}"
    for i, s in enumerate(video_scores):
        s = s["sharpness"]
        assert s["valid"] and s["details"]["frames"] == 5 and s["details"]["media"] == "video", s
        assert s["raw"] == pytest.approx(reference["sharpness_videos"][i], **APPROX)


async def test_custom_head_and_cosmos_handler_through_cosmos_rl(served, ready, reference, images, videos):
    meta = {"reward_fn": {"sharpness": 1.0, "contrast": 1.0}, "prompts": reference["prompts"], "media_type": "image"}
    async with httpx.AsyncClient(base_url=served.url, timeout=120) as http:
        r = await http.post("/api/reward/enqueue", content=enqueue_body(meta, images), headers=COSMOS_HEADERS)
        assert r.status_code == 200, r.text
        uid = r.json()["uuid"]
        pulled = {}
        for reward in ("sharpness", "contrast"):
            pulled[reward] = await cosmos_pull(http, uid, reward)
        video_meta = {"reward_fn": {"contrast": 1.0}, "prompts": reference["prompts"][:2], "media_type": "video",
                      "video_infos": [{"video_fps": reference["video_fps"]}] * 2}
        clip = np.ascontiguousarray(videos.transpose(0, 4, 1, 2, 3))  # [B, C, T, H, W], as cosmos-rl sends
        video = await cosmos_score(http, video_meta, clip, "contrast", timeout=120)
    assert pulled["sharpness"]["scores"]["sharpness"] == pytest.approx(reference["sharpness_images"], **APPROX)
    contrast = pulled["contrast"]["scores"]
    assert contrast["contrast"] == pytest.approx(reference["contrast_images"]["contrast"], **APPROX)
    assert contrast["contrast_label"] == reference["contrast_images"]["contrast_label"]
    assert video["scores"]["contrast"] == pytest.approx(reference["contrast_videos"]["contrast"], **APPROX)
    assert video["scores"]["contrast_label"] == reference["contrast_videos"]["contrast_label"]


async def cosmos_pull(http: httpx.AsyncClient, uid: str, reward: str, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        res = await http.post("/api/reward/pull", data={"uuid": uid, "type": reward})
        if res.status_code == 200:
            return res.json()
        assert time.monotonic() < deadline, res.text
        await asyncio.sleep(0.05)


async def test_flow_factory_models_and_custom_head_through_flow_factory(served, ready, reference, images, videos):
    pil = [Image.fromarray(im) for im in images]
    prompts = reference["prompts"]
    base = f"{served.url}/flow-factory"
    async with httpx.AsyncClient(timeout=120) as http:
        colorful = await ff_compute(http, f"{base}/colorful", ff_payload(prompts, image=pil))
        frames = [[Image.fromarray(f) for f in v] for v in videos]
        colorful_video = await ff_compute(http, f"{base}/colorful", ff_payload(prompts[:2], video=frames))
        ranks = [await ff_compute(http, f"{base}/brightness_rank", ff_payload(prompts[g:g + 3], image=pil[g:g + 3]))
                 for g in (0, 3)]
        sharp = await ff_compute(http, f"{base}/sharpness", ff_payload(prompts, image=pil))
    assert colorful == pytest.approx(reference["colorful_images"], **APPROX)
    assert colorful_video == pytest.approx(reference["colorful_videos"], **APPROX)
    assert ranks == [pytest.approx(g, **APPROX) for g in reference["brightness_rank_groups"]]
    assert sharp == pytest.approx(reference["sharpness_images"], **APPROX)


async def test_groupwise_model_scores_each_group_of_a_native_request(served, ready, reference, images):
    prompts = reference["prompts"]
    samples = [image_sample(prompts[i], images[i], group_id="ab"[i // 3]) for i in range(6)]
    samples.append(image_sample("no group", images[0]))
    async with httpx.AsyncClient(base_url=served.url, timeout=120) as http:
        scores = await rewards(http, samples, ["brightness_rank", "colorful"])
    for i in range(6):
        s = scores[i]["brightness_rank"]
        assert s["valid"], s
        assert s["raw"] == pytest.approx(reference["brightness_rank_groups"][i // 3][i % 3], **APPROX)
        assert (s["details"]["group_size"], s["details"]["group_index"]) == (3, i % 3)
        assert s["details"]["extra_info"]["brightness"] == pytest.approx(images[i].astype(np.float32).mean() / 255, rel=1e-4)
        assert scores[i]["colorful"]["raw"] == pytest.approx(reference["colorful_images"][i], **APPROX)
    lone = scores[6]["brightness_rank"]
    assert lone["error"]["code"] == "bad_input" and "group_id" in lone["error"]["message"], lone
    assert scores[6]["colorful"]["valid"]


async def test_an_item_that_raises_fails_alone(served, ready, images):
    prompts = ["a fine cat", "boom goes the cat", "another fine cat", "please skip this cat", "a last cat"]
    async with httpx.AsyncClient(base_url=served.url, timeout=120) as http:
        first, second = await asyncio.gather(
            rewards(http, [image_sample(p, images[i]) for i, p in enumerate(prompts[:3])], ["prompt_length", "sharpness"]),
            rewards(http, [image_sample(p, images[i]) for i, p in enumerate(prompts[3:])], ["prompt_length"]))
    scores = first + second
    for i, p in enumerate(prompts):
        s = scores[i]["prompt_length"]
        if "boom" in p:
            assert s["error"]["code"] == "head_error", s
            assert "ValueError: cannot score 'boom goes the cat'" in s["error"]["message"], s
        elif "skip" in p:
            assert s["error"]["code"] == "head_error" and "asks to be skipped" in s["error"]["message"], s
        else:
            assert s["valid"] and s["raw"] == len(p), s
    assert all(scores[i]["sharpness"]["valid"] for i in range(3))


async def test_condition_images_reach_a_flow_factory_model_as_tensors(served, ready, images):
    samples = [image_sample("make it brighter", images[i], condition_images=[b64png(images[j]) for j in sources])
               for i, sources in ((0, (1,)), (2, (2, 5)), (4, (3, 0)))]
    samples.append(image_sample("no source", images[1]))
    async with httpx.AsyncClient(base_url=served.url, timeout=120) as http:
        scores = await rewards(http, samples, ["source_distance"])
    for (i, sources), s in zip(((0, (1,)), (2, (2, 5)), (4, (3, 0))), scores):
        s = s["source_distance"]
        expected = -np.abs(images[i].astype(np.float32) / 255 - images[sources[0]].astype(np.float32) / 255).mean()
        assert s["valid"], s
        assert_close([s["raw"]], [float(expected)], what="source_distance vs numpy")
        assert s["details"]["extra_info"] == {"sources": len(sources)} and s["details"]["conditions"]["images"] == len(sources)
    missing = scores[3]["source_distance"]
    assert missing["error"]["code"] == "bad_input" and "condition_images" in missing["error"]["message"], missing


async def test_a_template_from_the_users_folder_scores_on_vllm(served, ready, images):
    lock = json.loads((BYO_EXAMPLES / "templates" / "templates.lock").read_text())
    async with httpx.AsyncClient(base_url=served.url, timeout=300) as http:
        scores = await rewards(http, [image_sample("a product photo", images[0])], ["product_sharpness"])
    s = scores[0]["product_sharpness"]
    assert s["valid"], s
    assert s["template"] == {"id": "sharp_quality", "version": "1", "sha256": lock["sharp_quality@1"]}
    assert 0.0 <= s["reward"] <= 1.0
