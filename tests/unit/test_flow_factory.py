"""Flow-Factory remote reward protocol: requests built as its RemoteRewardClient builds them.

The client posts `_build_payload(...)` JSON, calls `raise_for_status()` (4xx/5xx are retried),
then raises at once on a truthy `error` key, then reads `rewards`. Real judges:
tests/integration/test_protocols.py.
"""

from __future__ import annotations

import base64
import io

import httpx
import numpy as np
import pytest
from PIL import Image

from judge_gateway.config import ConfigError, validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.support.fault_gateway import fault_config


def image_to_b64(img: Image.Image) -> str:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def build_payload(prompt, image=None, video=None, condition_images=None, condition_videos=None) -> dict:
    """Flow-Factory's `_build_payload`: always the five keys, PIL images as base64 PNG."""
    return {
        "prompt": prompt,
        "image": [image_to_b64(i) for i in image] if image else None,
        "video": [[image_to_b64(f) for f in v] for v in video] if video else None,
        "condition_images": [[image_to_b64(i) for i in imgs] for imgs in condition_images]
        if condition_images else None,
        "condition_videos": [[[image_to_b64(f) for f in v] for v in vs] for vs in condition_videos]
        if condition_videos else None,
    }


def pil_images(n: int, size: int = 32, seed: int = 0) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)) for _ in range(n)]


def ff_config(base_url: str) -> dict:
    data = fault_config(base_url)
    data["judges"]["final"]["weight"] = 1.0
    data["judges"]["edit"] = {"kind": "rubric", "backend": "rubric", "template": "rational_rewards_edit@1"}
    data["judges"]["video_q"] = {"kind": "yes_no", "backend": "yes", "template": "cosmos_reason1@1"}
    # a head whose weights are a local folder that does not exist: it can never load
    data["judges"]["no_weights"] = {"kind": "pickscore", "default": False,
                                    "options": {"model": "/nonexistent/PickScore_v1"}}
    data["flow_factory"] = {"profiles": {
        "t2i": {"judges": {"quality": 1.0, "final": 0.5}},
        "group": {"judges": {"quality": 1.0, "final": 1.0}, "mode": "groupwise", "group_transform": "rank"},
        "edit": {"judges": {"edit": 1.0}},
        "video": {"judges": {"video_q": 1.0}, "video_fps": 8},
        "down": {"judges": {"down": 1.0}},
        "no_weights": {"judges": {"no_weights": 1.0}},
        "mixed_mean": {"judges": {"quality": 1.0, "no_answer": 1.0}, "on_invalid": "mean"},
        "mixed_fill": {"judges": {"quality": 1.0, "no_answer": 1.0}, "on_invalid": "fill", "fill_value": -3.0},
        "mixed_error": {"judges": {"quality": 1.0, "no_answer": 1.0}, "on_invalid": "error"},
    }}
    return data


@pytest.fixture
async def client(fake_backend):
    gw = Gateway(validate_config(ff_config(fake_backend.base_url)))
    app = create_app(gw)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost",
                                 timeout=60) as c:
        yield c
    await gw.aclose()


async def compute(client: httpx.AsyncClient, url: str, payload: dict) -> list[float]:
    """RemoteRewardClient.compute, one attempt."""
    r = await client.post(f"{url}/compute", json=payload)
    r.raise_for_status()
    data = r.json()
    if data.get("error"):
        raise RuntimeError(f"Server error: {data['error']}")
    return data["rewards"]


async def test_health_and_unknown_profile(client):
    r = await client.get("/flow-factory/t2i/health")
    assert r.status_code == 200 and r.json()["judges"] == {"quality": 1.0, "final": 0.5}
    assert (await client.get("/flow-factory/nope/health")).status_code == 404
    assert (await client.post("/flow-factory/t2i/load")).status_code == 200
    assert (await client.post("/flow-factory/t2i/offload")).status_code == 200


async def test_pointwise_t2i(client):
    rewards = await compute(client, "/flow-factory/t2i", build_payload(["a cat"] * 4, image=pil_images(4)))
    assert len(rewards) == 4
    # fake-yes: p = 0.8 / 0.95; final score 4 on 1-5 -> 0.75; weights 1 and 0.5
    expected = (0.8 / 0.95 * 1.0 + 0.75 * 0.5) / 1.5
    assert rewards == [pytest.approx(expected)] * 4


async def test_groupwise_ranks_within_the_request(client):
    rewards = await compute(client, "/flow-factory/group", build_payload(["a cat"] * 3, image=pil_images(3)))
    assert rewards == [0.5, 0.5, 0.5]  # equal scores tie at the middle rank


async def test_edit_profile_uses_condition_images(client):
    payload = build_payload(["make it red"] * 2, image=pil_images(2), condition_images=[[i] for i in pil_images(2, seed=9)])
    rewards = await compute(client, "/flow-factory/edit", payload)
    assert len(rewards) == 2 and all(0.0 <= r <= 1.0 for r in rewards)
    with pytest.raises(RuntimeError, match="needs `condition_images`"):
        await compute(client, "/flow-factory/edit", build_payload(["x"], image=pil_images(1)))


async def test_video_frames(client):
    frames = [pil_images(6, seed=s) for s in range(2)]
    rewards = await compute(client, "/flow-factory/video", build_payload(["a ball", "a car"], video=frames))
    assert len(rewards) == 2


@pytest.mark.parametrize("payload, reason", [
    ({"prompt": [], "image": None, "video": None, "condition_images": None, "condition_videos": None}, "prompt"),
    ({"prompt": ["a", "b"], "image": ["x"], "video": None, "condition_images": None, "condition_videos": None},
     "one entry per prompt"),
    ({"prompt": ["a"], "image": ["not base64!!"], "video": None, "condition_images": None, "condition_videos": None},
     "image[0]"),
    ({"prompt": ["a"], "image": None, "video": None, "condition_images": None, "condition_videos": None},
     "needs `image`"),
])
async def test_bad_input_fails_fast_with_error_key(client, payload, reason):
    r = await client.post("/flow-factory/t2i/compute", json=payload)
    assert r.status_code == 200  # not 4xx: the client would retry those
    assert reason in r.json()["error"]


async def test_not_json_is_an_error(client):
    r = await client.post("/flow-factory/t2i/compute", content=b"{oops", headers={"content-type": "application/json"})
    assert r.status_code == 200 and "not JSON" in r.json()["error"]


async def test_backends_down_is_503_so_the_client_retries(client):
    """A profile whose judge's backend does not answer: 503 (never rewards filled for it), and
    /health not ok."""
    r = await client.post("/flow-factory/down/compute", json=build_payload(["a"], image=pil_images(1)))
    assert r.status_code == 503 and "backend_unavailable" in r.json()["detail"]
    assert "rewards" not in r.json()
    h = await client.get("/flow-factory/down/health")
    assert h.status_code == 503 and h.json()["status"] == "unavailable" and "cannot connect" in h.json()["reason"]


async def test_a_judge_that_cannot_load_is_503_with_the_reason_and_health_not_ok(client):
    """Never `rewards` filled for a request that could not be scored at all: the stock client
    checks /health once at start-up (a status >= 400 stops it) and retries a 503 /compute, then
    raises with it."""
    h = await client.get("/flow-factory/no_weights/health")
    assert h.status_code == 503 and h.json()["status"] == "unavailable"
    assert "'/nonexistent/PickScore_v1' does not exist" in h.json()["reason"]
    r = await client.post("/flow-factory/no_weights/compute", json=build_payload(["a"], image=pil_images(1)))
    assert r.status_code == 503 and "rewards" not in r.json()
    assert "'/nonexistent/PickScore_v1' does not exist" in r.json()["detail"]


async def test_invalid_sample_policies(client):
    payload = build_payload(["a", "b"], image=pil_images(2))
    # no_answer is invalid on every sample, so no valid reward exists: mean falls back to fill_value
    assert await compute(client, "/flow-factory/mixed_mean", payload) == [0.0, 0.0]
    assert await compute(client, "/flow-factory/mixed_fill", payload) == [-3.0, -3.0]
    with pytest.raises(RuntimeError, match="answer_missing"):
        await compute(client, "/flow-factory/mixed_error", payload)
    # a filled value is never passed off as a score: the flags and reasons travel beside it
    body = (await client.post("/flow-factory/mixed_fill/compute", json=payload)).json()
    assert body["valid"] == [False, False]
    assert "answer_missing" in body["errors"]["0"][0] and "answer_missing" in body["errors"]["1"][0]


def test_profile_config_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"flow_factory\.profiles\.p\.judges\.nope: unknown judge"):
        validate_config({"flow_factory": {"profiles": {"p": {"judges": {"nope": 1.0}}}}})
    with pytest.raises(ConfigError, match=r"flow_factory\.profiles\.p\.mode"):
        validate_config({"flow_factory": {"profiles": {"p": {"judges": {"x": 1.0}, "mode": "pairwise"}}}})


async def test_a_dead_backend_answers_compute_at_once_not_after_the_deadline(client):
    """The issue's case: each /compute to a dead backend took 60 s (the client's own timeout) to
    come back 503; now it is the backend's reason at once (bench/dead_backend.py measures it)."""
    import time

    started = time.monotonic()
    r = await client.post("/flow-factory/down/compute", json=build_payload(["a"], image=pil_images(1)))
    took = time.monotonic() - started
    assert r.status_code == 503 and "is down (it never answered)" in r.json()["detail"], r.text
    assert took < 10, took  # far from the judge's deadline (60 s); seconds only on a loaded machine
