"""The drop-in protocols end to end over HTTP, against the real CPU vLLM judges.

cosmos-rl requests are built as its example clients build them (npy after a JSON line,
form-encoded pulls until 200); Flow-Factory requests as its RemoteRewardClient builds them.
The Redis store runs on a real redis-server; the latent decoder on a tiny random Wan VAE in the
torch worker venv (scripts/setup_latents.sh). The local heads behind both protocols are the
session's heads gateway, in process (tests/support/clip_heads_gateway.py).
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from judge_gateway.latents import LatentDecoderSupervisor
from judge_gateway.config import LatentDecoderConfig
from judge_gateway.store import RedisStore
from tests.support.cosmos_client import enqueue_body, poll
from tests.support.fake_openai import free_port
from tests.support.heads_env import build_tiny_wan, latents_python
from tests.support.protocol_clients import ff_payload, pil_images
from tests.support.real_vllm_config import FINAL_REGEX, real_config
from tests.support.redis_server import RedisServer
from tests.support.served_gateway import ServedGateway, asgi_client

pytestmark = pytest.mark.integration



def protocol_config(vllm_url: str, fake_url: str | None = None, **extra) -> dict:
    data = real_config(vllm_url, fake_url)
    j = data["judges"]
    for name in ("image_quality", "alignment"):
        j[name]["image"] = {"max_pixels": 50176}  # keep the tiny CPU model fast on 512x512 inputs
    # cosmos-rl's unified_reward, as a Final Score judge with structured outputs
    j["unified_reward"] = {"kind": "final_score", "backend": "unified", "template": "unified_reward@1",
                           "default": False, "image": {"max_pixels": 50176},
                           "options": {"guided_regex": FINAL_REGEX, "max_tokens": 60}}
    if fake_url:
        j["slow"] = {"kind": "yes_no", "backend": "stall", "template": "image_quality@1", "deadline_s": 60,
                     "default": False}
    data["flow_factory"] = {"profiles": {"t2i": {"judges": {"alignment": 1.0, "image_quality": 0.5}}}}
    data.update(extra)
    return data


@pytest.fixture(scope="module")
def served(vllm, fake_backend):
    # The admission sized to the 20-request burst below (20 x 8 prompts x 2 judges on one backend):
    # the CPU vLLM takes ~1 min for it, far beyond the shipped waiting room's 10 s; the shipped
    # defaults' refusal at 10x a backend's slots is tests/reliability/test_overload.py's.
    s = ServedGateway(protocol_config(vllm.base_url, fake_backend.base_url,
                                      server={"admission": {"waiting_per_slot": 8, "max_wait_s": 600}}))
    yield s
    s.stop()


HDR = {"Content-Type": "application/octet-stream", "Authorization": "Bearer None"}


def image_batch() -> np.ndarray:
    # The example image client: npy uint8 [2, 512, 512, 3].
    rng = np.random.default_rng(11)
    arr = np.zeros((2, 512, 512, 3), dtype=np.uint8)
    arr[0, :, :, 0] = 200
    arr[1] = rng.integers(0, 256, (512, 512, 3), dtype=np.uint8)
    return arr


async def test_cosmos_image_client_every_reward_type(served):
    meta = {"reward_fn": {"image_quality": 1.0, "alignment": 1.0, "unified_reward": 1.0},
            "prompts": ["a red square", "colourful noise"], "media_type": "image"}
    async with httpx.AsyncClient(base_url=served.url, timeout=300) as http:
        r = await http.post("/api/reward/ping", data={"info_data": json.dumps({"client": "test"})}, headers=HDR)
        ping = r.json()  # cosmos-rl's reply, and whether each reward named can score now (issue 33)
        assert {k: ping[k] for k in ("message", "status")} == {"message": "Ping request received", "status": "ok"}
        assert ping["ready"] is True, ping
        r = await http.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch()), headers=HDR)
        assert r.status_code == 200, r.text
        uid = r.json()["uuid"]
        results = {name: await poll(http, uid, name, timeout=300, interval=0.2) for name in meta["reward_fn"]}
    for name, res in results.items():
        assert res.status_code == 200, res.text
        body = res.json()
        assert body["type"] == name and body["valid"] == [True, True], body["errors"]
        assert set(body) >= {"scores", "input_info", "duration", "decoded_duration", "type"}
        assert body["input_info"]["shape"] == [2, 512, 512, 3] and body["input_info"]["dtype"] == "torch.uint8"
        key = name  # configured judges under their own names; unified_reward's legacy key is its name too
        values = body["scores"][key]
        assert len(values) == 2 and all(isinstance(v, float) for v in values)
    for name in ("image_quality", "alignment"):
        cells = results[name].json()["judge_scores"]
        assert results[name].json()["scores"][name] == [pytest.approx(c["reward"]) for c in cells]
        assert all(0 <= v <= 1 for v in results[name].json()["scores"][name])
    unified = results["unified_reward"].json()
    # cosmos-rl's reward service returns the 1-5 final score / 5, not the raw score.
    assert unified["scores"]["unified_reward"] == [pytest.approx(c["raw"] / 5) for c in unified["judge_scores"]]
    assert all(0.2 <= v <= 1.0 for v in unified["scores"]["unified_reward"])


async def test_cosmos_video_cosmos_reason1(served):
    rng = np.random.default_rng(5)
    videos = rng.integers(0, 256, (2, 3, 8, 64, 64), dtype=np.uint8)
    meta = {"reward_fn": {"cosmos_reason1": 1.0}, "prompts": ["a ball rolls", "a car drives"],
            "media_type": "video", "video_infos": [{"video_fps": 8.0}, {"video_fps": 16.0}]}
    async with httpx.AsyncClient(base_url=served.url, timeout=300) as http:
        r = await http.post("/api/reward/enqueue", content=enqueue_body(meta, videos), headers=HDR)
        assert r.status_code == 200, r.text
        body = (await poll(http, r.json()["uuid"], "cosmos_reason1", timeout=300, interval=0.2)).json()
    s = body["scores"]
    assert body["valid"] == [True, True]
    assert set(s) == {"prediction", "no_score", "yes_logit", "no_logit"}
    for i, cell in enumerate(body["judge_scores"]):
        assert s["no_score"][i] == pytest.approx(cell["details"]["p_no"] / (cell["details"]["p_no"] + cell["details"]["p_yes"]))
        assert s["prediction"][i] == ("Good" if s["no_score"][i] >= 0.5 else "Bad")
        assert s["yes_logit"][i] == pytest.approx(cell["details"]["logprob_yes"])
        assert cell["details"]["video"]["num_frames"] == 8


async def test_cosmos_bad_bodies_get_400_and_no_uuid(served):
    meta = {"reward_fn": {"alignment": 1.0}, "prompts": ["a", "b"], "media_type": "image"}
    buf = io.BytesIO()
    np.save(buf, image_batch()[:1])  # batch 1 vs two prompts
    one = buf.getvalue()
    bodies = {
        "random bytes": np.random.default_rng(0).bytes(10000),
        "no newline": json.dumps(meta).encode() + one,
        "no reward_fn": json.dumps({"prompts": ["a"], "media_type": "image"}).encode() + b"\n" + one,
        "unknown reward": json.dumps({**meta, "reward_fn": {"aesthetics_v9": 1}}).encode() + b"\n" + one,
        "batch mismatch": json.dumps(meta).encode() + b"\n" + one,
        "not configured": json.dumps({**meta, "reward_fn": {"pickscore": 1}}).encode() + b"\n" + one,
    }
    async with httpx.AsyncClient(base_url=served.url, timeout=60) as http:
        for what, body in bodies.items():
            r = await http.post("/api/reward/enqueue", content=body, headers=HDR)
            assert r.status_code == 400, (what, r.text)
            assert "uuid" not in r.json() and r.json()["message"], what
    assert "reward 'pickscore' is not configured on this gateway" in r.json()["message"]


async def test_flow_factory_20_concurrent_requests_and_health_stays_fast(served):
    payloads = [ff_payload([f"a picture {k}"] * 8, image=pil_images(8, size=48, seed=k)) for k in range(20)]
    url = served.url + "/flow-factory/t2i"
    health_latencies: list[float] = []
    done = asyncio.Event()

    async def watch_health() -> None:
        async with httpx.AsyncClient(timeout=5) as h:
            assert (await h.get(url + "/health")).status_code < 400  # the client's start-up check
            while not done.is_set():
                t0 = time.perf_counter()
                r = await h.get(url + "/health")
                health_latencies.append(time.perf_counter() - t0)
                assert r.status_code == 200
                await asyncio.sleep(0.1)

    async def one(payload: dict) -> list[float]:
        async with httpx.AsyncClient(timeout=600) as c:
            r = await c.post(url + "/compute", json=payload)
            r.raise_for_status()
            data = r.json()
            assert not data.get("error"), data
            return data["rewards"]

    watcher = asyncio.create_task(watch_health())
    await asyncio.sleep(0.2)
    try:
        results = await asyncio.gather(*(one(p) for p in payloads))
    finally:
        done.set()
        await watcher
    assert all(len(r) == 8 and all(isinstance(v, float) and 0 <= v <= 1 for v in r) for r in results)
    assert len(health_latencies) >= 5
    assert max(health_latencies) < 1.0, health_latencies


# ---- Redis: results survive a gateway restart ----------------------------------------------


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"), persist=True)  # AOF: store.persistence refuses Redis without it
    yield server
    server.stop()


async def test_results_survive_a_gateway_restart_with_redis(vllm, fake_backend, redis_server):
    data = protocol_config(vllm.base_url, fake_backend.base_url,
                           store={"kind": "redis", "url": redis_server.url, "url_env": None,
                                  "key_prefix": f"jg-test-{free_port()}:"})
    meta = {"reward_fn": {"alignment": 1.0}, "prompts": ["a red square", "noise"], "media_type": "image"}
    first = ServedGateway(data)
    try:
        async with httpx.AsyncClient(base_url=first.url, timeout=300) as http:
            uid = (await http.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch()),
                                   headers=HDR)).json()["uuid"]
            before = (await poll(http, uid, "alignment", timeout=300, interval=0.2)).json()
            slow = (await http.post("/api/reward/enqueue", headers=HDR, content=enqueue_body(
                {**meta, "reward_fn": {"slow": 1.0}}, image_batch()))).json()["uuid"]
            r = await http.post("/api/reward/pull", data={"uuid": slow, "type": "slow"})
            assert r.status_code == 425 and r.json()["status"] == "pending"  # cosmos_rl.pending_status's default
    finally:
        first.stop()  # a restart: the unfinished request is stored as failed, never left pending
    second = ServedGateway(data)
    try:
        async with httpx.AsyncClient(base_url=second.url, timeout=60) as http:
            after = await http.post("/api/reward/pull", data={"uuid": uid, "type": "alignment"})
            assert after.status_code == 200 and after.json() == before
            r = await http.post("/api/reward/pull", data={"uuid": slow, "type": "slow"})
            # Failed, and filled so that the trainer (which never drops a uuid) can go on: one
            # constant per group, every sample flagged invalid (cosmos_rl.on_failed = fill).
            body = r.json()
            assert r.status_code == 200 and body["status"] == "failed" and "shut down" in body["message"]
            assert body["valid"] == [False] * len(body["valid"]) and len(set(body["scores"]["slow"])) == 1
            # A pending entry whose process died without a shutdown (no heartbeat): failed at once.
            store = RedisStore(redis_server.url, prefix=data["store"]["key_prefix"], ttl_s=60, max_entries=100)
            now = time.time()
            orphan = "00000000-0000-4000-8000-0000000000aa"  # a uuid: pull refuses any other key
            await store.put(orphan, {"status": "pending", "owner": "killed", "accepted_at": now,
                                       "deadline": now + 600, "rewards": ["alignment"], "skipped": []})
            await store.aclose()
            r = await http.post("/api/reward/pull", data={"uuid": orphan, "type": "alignment"})
            assert r.status_code == 500 and "gone" in r.json()["message"]
    finally:
        second.stop()


async def test_redis_store_size_bound(redis_server):
    store = RedisStore(redis_server.url, prefix="jg-bound:", ttl_s=60, max_entries=3)
    try:
        for i in range(5):
            await store.put(f"k{i}", {"i": i})
        assert [await store.get(f"k{i}") for i in range(5)] == [None, None, {"i": 2}, {"i": 3}, {"i": 4}]
        await store.put("short", {"x": 1}, ttl_s=0.05)
        await asyncio.sleep(0.2)
        assert await store.get("short") is None
    finally:
        await store.aclose()


# ---- Wan VAE latents through the torch worker ----------------------------------------------

# The reference: diffusers directly, as a Wan pipeline decodes (denormalise, decode), to uint8 as cosmos-rl does.
REFERENCE = """
import sys, numpy as np, torch
from diffusers import AutoencoderKLWan
vae = AutoencoderKLWan.from_pretrained(sys.argv[1]).eval()
z = torch.from_numpy(np.load(sys.argv[2]))
mean = torch.tensor(vae.config.latents_mean).view(1, 16, 1, 1, 1)
std = torch.tensor(vae.config.latents_std).view(1, 16, 1, 1, 1)
with torch.inference_mode():
    x = vae.decode(z / (1.0 / std) + mean).sample
np.save(sys.argv[3], ((x.clamp(-1, 1) + 1) / 2 * 255).to(torch.uint8).numpy())  # truncated, as cosmos-rl does
"""

EVIL_SAVE = """
import os, sys, torch
class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + sys.argv[2],))
torch.save(Evil(), sys.argv[1])
"""

TORCH_SAVE = """
import sys, numpy as np, torch
z = torch.from_numpy(np.load(sys.argv[1])).to(torch.bfloat16)
torch.save(z, sys.argv[2])
"""


def _latents_py(script: str, *args: str) -> None:
    proc = subprocess.run([str(latents_python()), "-c", script, *args], check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def tiny_vae() -> Path:
    return build_tiny_wan() / "wan21"  # Wan2.1's layout, 16 latent channels


def _latents(b: int, t: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((b, 16, t, 4, 4)).astype(np.float32)


async def test_latent_decoder_matches_diffusers(tiny_vae, tmp_path):
    z = _latents(3, 3)
    np.save(tmp_path / "z.npy", z)
    _latents_py(REFERENCE, str(tiny_vae), str(tmp_path / "z.npy"), str(tmp_path / "ref.npy"))
    expected = np.load(tmp_path / "ref.npy")
    worker = LatentDecoderSupervisor(LatentDecoderConfig(python=str(latents_python()), checkpoint=str(tiny_vae), batch_size=2))
    try:
        got = await worker.decode(z)
    finally:
        await worker.aclose()
    assert got.dtype == np.uint8 and got.shape == (3, 3, 9, 32, 32)  # temporal x4 (+1), spatial x8
    assert np.abs(got.astype(int) - expected.astype(int)).max() <= 1  # batching may move a rounding


async def test_cosmos_latents_every_encoding(vllm, tiny_vae, tmp_path):
    data = protocol_config(vllm.base_url, cosmos_rl={"latents": {
        "python": str(latents_python()), "checkpoint": str(tiny_vae), "batch_size": 2}})
    served = ServedGateway(data)
    z = _latents(2, 3, seed=1)
    np.save(tmp_path / "z.npy", z)
    _latents_py(TORCH_SAVE, str(tmp_path / "z.npy"), str(tmp_path / "z.pt"))
    bf16_bytes = (z.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)  # the uint8-as-bf16 view
    video_meta = {"reward_fn": {"cosmos_reason1": 1.0}, "prompts": ["a", "b"],
                  "video_infos": [{"video_fps": 16}, {"video_fps": 16}]}  # no media_type: latents
    cases = {
        "float16 npy": (video_meta, _npy(z.astype(np.float16)), "torch.float16"),
        "torch bf16": (video_meta, (tmp_path / "z.pt").read_bytes(), "torch.bfloat16"),
        "uint8 bf16 view": (video_meta, _npy(bf16_bytes), "torch.uint8"),
        "image latents": ({"reward_fn": {"alignment": 1.0}, "prompts": ["a", "b"], "media_type": "latent"},
                          _npy(_latents(2, 1).astype(np.float16)), "torch.float16"),
    }
    try:
        async with httpx.AsyncClient(base_url=served.url, timeout=300) as http:
            for what, (meta, tensor, dtype) in cases.items():
                r = await http.post("/api/reward/enqueue", content=json.dumps(meta).encode() + b"\n" + tensor,
                                    headers=HDR)
                assert r.status_code == 200, (what, r.text)
                reward = next(iter(meta["reward_fn"]))
                res = await poll(http, r.json()["uuid"], reward, timeout=300, interval=0.2)
                assert res.status_code == 200, (what, res.text)
                body = res.json()
                assert body["valid"] == [True, True], (what, body["errors"])
                assert body["input_info"]["dtype"] == dtype, what
                assert float(body["decoded_duration"]) > 0, what
                if reward == "cosmos_reason1":
                    video = body["judge_scores"][0]["details"]["video"]
                    # 3 latent frames decode to 9 frames of 32x32 (the judge then samples an even count)
                    assert (video["source_frames"], video["source_width"], video["source_height"]) == (9, 32, 32)
            r = await http.post("/api/reward/enqueue", headers=HDR, content=json.dumps(video_meta).encode()
                                + b"\n" + _npy(np.zeros((2, 48, 3, 4, 4), np.float16)))
            assert r.status_code == 400 and "no such decoder (cosmos_rl.latents.wan2_2)" in r.json()["message"]
            # A torch.save'd object whose unpickling would run a command: refused, never executed.
            marker = tmp_path / "pwned"
            _latents_py(EVIL_SAVE, str(tmp_path / "evil.pt"), str(marker))
            r = await http.post("/api/reward/enqueue", headers=HDR, content=json.dumps(video_meta).encode()
                                + b"\n" + (tmp_path / "evil.pt").read_bytes())
            assert r.status_code == 400 and "torch payload refused" in r.json()["message"]
            assert not marker.exists()
    finally:
        served.stop()


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


# ---- local heads behind both protocols -----------------------------------------------------


async def test_heads_behind_cosmos_rl_names_and_a_flow_factory_profile(clip_heads):
    """The session's heads gateway (tests/support/clip_heads_gateway.py): pickscore and hpsv2 under
    cosmos-rl's reward names, and its `heads` profile (pickscore and a VLM judge, z-scored groupwise)."""
    meta = {"reward_fn": {"hpsv2": 1.0, "pickscore": 1.0}, "prompts": ["a red square", "colourful noise"],
            "media_type": "image"}
    async with asgi_client(clip_heads.app) as http:
        r = await http.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch()), headers=HDR)
        assert r.status_code == 200, r.text
        for name in ("hpsv2", "pickscore"):
            body = (await poll(http, r.json()["uuid"], name, timeout=600, interval=0.2)).json()
            assert body["valid"] == [True, True], body.get("errors")
            # cosmos-rl's lists: HPSv2's native number (the cosine), PickScore's / 26 (raw
            # would be 26 times cosmos-rl's number)
            scale = 1 / 26 if name == "pickscore" else 1.0
            assert body["scores"][name] == [pytest.approx(c["raw"] * scale) for c in body["judge_scores"]]
            assert body["judge_scores"][0]["judge"] == name
        r = await http.post("/flow-factory/heads/compute",
                            json=ff_payload(["a cat"] * 4, image=pil_images(4, size=48, seed=3)))
        r.raise_for_status()
        rewards = r.json()["rewards"]
        assert len(rewards) == 4 and sum(rewards) == pytest.approx(0.0, abs=1e-9)  # z-scored group
