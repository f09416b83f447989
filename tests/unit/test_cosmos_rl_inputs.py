"""What a real cosmos-rl trainer sends is taken as cosmos-rl's reward service takes it: (a) latents
by their channel count, (b) load_mean_std, (c) POST /api/reward/latent_attr, (d) a pull without
`type`, (e) `video_infos[i].fps`; and (f) enqueue refuses a request for a judge that cannot score."""

from __future__ import annotations

import asyncio
import io
import json
import sys

import httpx
import numpy as np
import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.latents import LatentDecoderError
from judge_gateway.server import create_app
from tests.support.cosmos_client import (
    HEADERS,
    enqueue_body,
    image_batch,
    poll,
    small_config,
    video_batch,
)


@pytest.fixture
async def serve(fake_backend):
    made = []

    async def make(judges: dict | None = None, server: dict | None = None, **cosmos):
        data = small_config(fake_backend.base_url, **cosmos)
        data["judges"].update(judges or {})
        data["server"] = server or {}
        gw = Gateway(validate_config(data))
        app = create_app(gw)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost")
        made.append((client, app, gw))
        return client, app.state.cosmos_rl

    yield make
    for client, app, gw in made:
        await client.aclose()
        await app.state.cosmos_rl.aclose()
        await gw.aclose()


# ---- (e) video_infos[i].fps beside video_fps --------------------------------------------------


async def test_video_infos_fps_is_accepted_like_video_fps(serve):
    client, _ = await serve()
    meta = {"reward_fn": {"cosmos_reason1": 1.0}, "prompts": ["a ball", "a car"], "media_type": "video",
            "video_infos": [{"fps": 16}, {"video_fps": 8.0}]}  # the seed README's key, and the handlers'
    r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, video_batch()), headers=HEADERS)
    assert r.status_code == 200, r.text
    body = (await poll(client, r.json()["uuid"], "cosmos_reason1")).json()
    assert body["valid"] == [True, True]
    assert [c["details"]["video"]["fps"] for c in body["judge_scores"]] == [16.0, 8.0]
    bad = {**meta, "video_infos": [{"fps": 0}, {"video_fps": 8}]}
    r = await client.post("/api/reward/enqueue", content=enqueue_body(bad, video_batch()), headers=HEADERS)
    assert r.status_code == 400 and "video_infos[0].fps must be a number in (0, 1000]" in r.json()["message"]


# ---- (d) a pull without `type` asks for dance_grpo, as in cosmos-rl ----------------------------


async def test_pull_without_type_defaults_to_dance_grpo(serve):
    # dance_grpo played by the image judge: the point is the name a bare pull resolves to
    client, _ = await serve(rewards={"dance_grpo": {"judge": "quality", "media": "image",
                                                    "keys": {"overall_reward": "reward"}}})
    meta = {"reward_fn": {"dance_grpo": 1.0}, "prompts": ["a", "b"], "media_type": "image"}
    uid = (await client.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch()),
                             headers=HEADERS)).json()["uuid"]
    r = await poll(client, uid, None)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["type"] == "dance_grpo"
    assert body["scores"]["overall_reward"] == [pytest.approx(c["reward"]) for c in body["judge_scores"]]


async def test_pull_default_type_is_configurable(serve):
    client, _ = await serve(default_pull_type="quality")
    meta = {"reward_fn": {"quality": 1.0}, "prompts": ["a", "b"], "media_type": "image"}
    uid = (await client.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch()),
                             headers=HEADERS)).json()["uuid"]
    r = await poll(client, uid, None)
    assert r.status_code == 200 and r.json()["type"] == "quality"


# ---- (a) latents go to the decoder of their channel count ---------------------------------------

LATENTS = {"python": sys.executable, "wan2_1": {"checkpoint": "/vae/wan21"}, "wan2_2": {"checkpoint": "/vae/wan22"}}


def _capture_decodes(service) -> list[dict]:
    """Replace the worker's wire call: record each decode header, answer with grey pixels (only
    the frames asked for, at the size asked for, as latent_worker.py does)."""
    headers: list[dict] = []

    async def call(header, payload, timeout):
        headers.append(header)
        lat = np.load(io.BytesIO(payload))
        scale = 8 if header["channels"] == 16 else 16
        b, _, t, h, w = lat.shape
        frames = len(header["frames"][0]) if header.get("frames") else 1 + 4 * (t - 1)
        width, height = header["size"] if header.get("size") else (w * scale, h * scale)
        out = np.full((b, 3, frames, height, width), 128, np.uint8)
        buf = io.BytesIO()
        np.save(buf, out)
        return {"ok": True}, buf.getvalue()

    service.worker._call = call
    return headers


@pytest.mark.parametrize("channels, checkpoint, side", [(16, "/vae/wan21", 32), (48, "/vae/wan22", 64)])
async def test_latents_pick_the_decoder_by_channels(serve, channels, checkpoint, side):
    client, service = await serve(latents=LATENTS)
    headers = _capture_decodes(service)
    meta = {"reward_fn": {"cosmos_reason1": 1.0}, "prompts": ["a", "b"],
            "video_infos": [{"video_fps": 16}, {"video_fps": 16}]}  # no media_type: latents, as the trainer
    z = np.random.default_rng(0).standard_normal((2, channels, 3, 4, 4)).astype(np.float16)
    r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, z), headers=HEADERS)
    assert r.status_code == 200, r.text
    body = (await poll(client, r.json()["uuid"], "cosmos_reason1")).json()
    assert body["valid"] == [True, True], body["errors"]
    assert [h["checkpoint"] for h in headers] == [checkpoint]
    # cosmos_reason1 keeps 8 of the 9 decoded frames (an even count): only those leave the worker
    assert headers[0]["frames"] == [list(range(8))] * 2 and headers[0]["size"] is None
    video = body["judge_scores"][0]["details"]["video"]
    assert (video["source_frames"], video["source_width"]) == (9, side)
    assert video["frame_indices"] == list(range(8))


async def test_latents_without_their_decoder_are_refused_by_name(serve):
    client, _ = await serve(latents={"python": sys.executable, "checkpoint": "/vae/wan21"})
    meta = {"reward_fn": {"cosmos_reason1": 1.0}, "prompts": ["a"], "video_infos": [{"video_fps": 16}]}
    z = np.zeros((1, 48, 3, 4, 4), np.float16)
    r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, z), headers=HEADERS)
    assert r.status_code == 400
    assert "48 channels (Wan2.2" in r.json()["message"] and "cosmos_rl.latents.wan2_2" in r.json()["message"]
    z = np.zeros((1, 32, 3, 4, 4), np.float16)
    r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, z), headers=HEADERS)
    assert r.status_code == 400 and "[B,16|48,T,H,W]" in r.json()["message"]


async def test_a_decoder_that_failed_to_load_is_refused_at_enqueue(serve):
    client, service = await serve(latents=LATENTS)

    async def call(header, payload, timeout):
        raise LatentDecoderError("cannot load AutoencoderKLWan '/vae/wan21': OSError: offline", stage="load")

    service.worker._call = call
    meta = {"reward_fn": {"cosmos_reason1": 1.0}, "prompts": ["a"], "video_infos": [{"video_fps": 16}]}
    z = np.zeros((1, 16, 3, 4, 4), np.float16)
    first = await client.post("/api/reward/enqueue", content=enqueue_body(meta, z), headers=HEADERS)
    assert first.status_code == 200  # nobody knew yet
    failed = await poll(client, first.json()["uuid"], "cosmos_reason1")
    assert failed.json()["status"] == "failed" and "offline" in failed.json()["message"]
    r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, z), headers=HEADERS)
    assert r.status_code == 424 and "uuid" not in r.json()
    assert "Wan2.1" in r.json()["message"] and "offline" in r.json()["message"]
    z48 = np.zeros((1, 48, 3, 4, 4), np.float16)  # the other decoder is not affected
    _capture_decodes(service)
    r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, z48), headers=HEADERS)
    assert r.status_code == 200


# ---- (b) load_mean_std and (c) POST /api/reward/latent_attr ------------------------------------

STATS = {"python": sys.executable, "wan2_1": {"checkpoint": "/vae/wan21", "images_mean_std": "/s/images_mean_std.pt",
                                                "video_mean_std": "/s/video_mean_std.pt"}}


async def test_latent_attr_sets_load_mean_std_and_lists_what_it_ignores(serve):
    client, service = await serve(latents=STATS)
    headers = _capture_decodes(service)
    fields = {"chunk_duration": 81, "load_mean_std": True, "vae_pth": "/workspace/tokenizer_ckpt.pth",
              "temporal_window": 16, "device": "cuda", "fps": 16, "num_frames": 93, "height": 432, "width": 768}
    r = await client.post("/api/reward/latent_attr", data={"fields": json.dumps(fields)})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["message"] == "Latent attributes set successfully"
    assert body["applied"] == {"load_mean_std": True} and body["load_mean_std"] is True
    assert set(body["ignored"]) == set(fields) - {"load_mean_std"}
    assert "never chooses files" in body["ignored"]["vae_pth"]
    meta = {"reward_fn": {"quality": 1.0}, "prompts": ["a"], "media_type": "latent"}
    z = np.zeros((1, 16, 1, 4, 4), np.float16)
    uid = (await client.post("/api/reward/enqueue", content=enqueue_body(meta, z), headers=HEADERS)).json()["uuid"]
    assert (await poll(client, uid, "quality")).status_code == 200
    assert headers[-1]["mean_std"] == {"images": "/s/images_mean_std.pt", "video": "/s/video_mean_std.pt"}
    r = await client.post("/api/reward/latent_attr", json={"fields": {"load_mean_std": False}})  # JSON too
    assert r.status_code == 200 and r.json()["load_mean_std"] is False
    uid = (await client.post("/api/reward/enqueue", content=enqueue_body(meta, z), headers=HEADERS)).json()["uuid"]
    assert (await poll(client, uid, "quality")).status_code == 200
    assert headers[-1]["mean_std"] is None


@pytest.mark.parametrize("latents, data, reason", [
    (STATS, {}, "needs the form field `fields`"),
    (STATS, {"fields": "{not json"}, "`fields` is not JSON"),
    (STATS, {"fields": "[" * 50_000 + "]" * 50_000}, "`fields` is not JSON"),  # was a 500 (RecursionError)
    (STATS, {"fields": "1" * 5_000}, "`fields` is not JSON"),  # was a 500 (ValueError: int digits)
    (STATS, {"fields": "[1, 2]"}, "must be a JSON object"),
    (STATS, {"fields": json.dumps({"load_mean_std": "yes"})}, "must be true or false"),
    (LATENTS, {"fields": json.dumps({"load_mean_std": True})}, "needs the statistics files"),
    ({}, {"fields": json.dumps({"load_mean_std": False})}, "no latent decoder"),
])
async def test_latent_attr_refuses_with_the_reason(serve, latents, data, reason):
    client, _ = await serve(latents=latents)
    r = await client.post("/api/reward/latent_attr", data=data)
    assert r.status_code == 400 and reason in r.json()["message"], r.text


def test_load_mean_std_config_needs_both_statistics_files():
    from judge_gateway.config import ConfigError

    with pytest.raises(ConfigError, match=r"cosmos_rl\.latents\.wan2_1.*needs images_mean_std and video_mean_std"):
        validate_config({"cosmos_rl": {"latents": {"python": "p", "wan2_1": {"checkpoint": "c", "load_mean_std": True}}}})
    with pytest.raises(ConfigError, match=r"Wan2.1 latents only"):
        validate_config({"cosmos_rl": {"latents": {"python": "p", "wan2_2": {
            "checkpoint": "c", "load_mean_std": True, "images_mean_std": "a", "video_mean_std": "b"}}}})


# ---- (f) a judge that cannot score is refused at enqueue ----------------------------------------


async def test_enqueue_refuses_a_judge_whose_backend_is_unreachable(serve):
    client, _ = await serve()
    meta = {"reward_fn": {"down": 1.0}, "prompts": ["a", "b"], "media_type": "image"}
    r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch()), headers=HEADERS)
    assert r.status_code == 503 and r.headers["Retry-After"] and "uuid" not in r.json()
    msg = r.json()["message"]
    assert "reward 'down' cannot be scored now: judge 'down' is not ready" in msg
    # which replica and why, never its URL: the caller may not be the operator (the log has it)
    assert "replica 1 of 1: cannot connect" in msg and "127.0.0.1" not in msg


async def test_enqueue_refuses_a_head_that_failed_to_load(serve, tmp_path):
    missing = str(tmp_path / "no-venv" / "bin" / "python")
    client, service = await serve(judges={"ocr": {"kind": "ocr", "default": False, "options": {
        "python": missing, "retry_failed_load_s": 0.2}}}, server={"readiness_interval_s": 0.01})
    meta = {"reward_fn": {"ocr": 1.0}, "prompts": ['a sign saying "hi"', 'a sign saying "yo"'], "media_type": "image"}
    judge = service.gateway.judges["ocr"]
    for _ in range(200):  # the head starts loading at the first probe and fails
        _, reason = await judge.probe()
        if reason and reason.startswith("failed"):
            break
        await asyncio.sleep(0.05)
    r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch()), headers=HEADERS)
    assert r.status_code == 424 and "uuid" not in r.json(), r.text
    assert "reward 'ocr' cannot be scored now: judge 'ocr' is not ready (failed" in r.json()["message"]
    # what failed, never the interpreter's path: the caller may not be the operator (the log has it)
    assert "its interpreter could not be run" in r.json()["message"] and "no-venv" not in r.json()["message"]
    await asyncio.sleep(0.3)  # past retry_failed_load_s: the next probe starts another load
    r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch()), headers=HEADERS)
    assert r.status_code == 424, r.text  # not accepted while the retry runs: it failed before
    assert "judge 'ocr' failed to load (failed: " in r.json()["message"] and "is retrying" in r.json()["message"]


def test_latents_short_form_round_trips():
    """`checkpoint` is short for wan2_1.checkpoint: a dump of the loaded config loads again."""
    from judge_gateway.config import LatentDecoderConfig

    cfg = LatentDecoderConfig(python="p", checkpoint="/vae", subfolder="vae")
    again = LatentDecoderConfig.model_validate(cfg.model_dump())
    assert again.wan2_1 is not None and (again.wan2_1.checkpoint, again.wan2_1.subfolder) == ("/vae", "vae")
