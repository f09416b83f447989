"""Serving configs/cosmos_rl.toml on a machine that cannot fetch the published weights (this one:
no hub, no GPU, no vLLM on the preset ports): the gateway starts, /readyz and /v1/judges say per
judge why it is not ready, and a cosmos-rl enqueue that needs such a judge is refused with that
reason before a uuid is given (424 for a head that failed to load, 503 for an unreachable vLLM),
while OCR, whose weights ship in its wheel, scores. Starts every head's worker (a few minutes on
2 cores); no vLLM needed."""

from __future__ import annotations

import asyncio
import io
import json
import time
from pathlib import Path

import httpx
import numpy as np
from PIL import Image

from judge_gateway.config import load_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.support.cosmos_client import HEADERS, enqueue_body, poll
from tests.support.heads_env import text_image_png

ROOT = Path(__file__).resolve().parents[2]
HEADS = ("videoalign", "pickscore", "hpsv2", "hpsv3", "image_reward", "ocr", "gen_eval")


async def _settled(client: httpx.AsyncClient, timeout: float = 900) -> dict:
    """/readyz once no head is still loading."""
    deadline = time.monotonic() + timeout
    while True:
        body = (await client.get("/readyz")).json()
        loading = [n for n in HEADS if (body["judges"][n]["reason"] or "").startswith(("starting", "restarting"))]
        if not loading:
            return body
        assert time.monotonic() < deadline, f"still loading after {timeout}s: {loading}"
        await asyncio.sleep(0.25)  # poll: a head that settles is seen within a quarter second


async def test_serving_the_cosmos_rl_config_here_reports_why_each_judge_is_not_ready(monkeypatch):
    monkeypatch.chdir(ROOT)  # the heads' venvs are relative paths
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # this machine has no hub: fail fast, as it would anyway
    gw = Gateway(load_config(ROOT / "configs" / "cosmos_rl.toml"))
    app = create_app(gw)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost",
                                     timeout=60) as client:
            ready = await _settled(client)
            judges = ready["judges"]
            print(json.dumps({n: j["reason"] and j["reason"][:240] for n, j in judges.items()}, indent=1))
            assert ready["ready"] is False
            assert judges["ocr"] == {"ready": True, "reason": None}  # RapidOCR's models ship in its wheel
            for name in ("cosmos_reason1", "unified_reward"):
                assert judges[name]["ready"] is False
                port = {"cosmos_reason1": 8001, "unified_reward": 8004}[name]
                # which replica and why, never its URL (the caller may not be the operator; the log has it)
                assert "replica 1 of 1: cannot connect" in judges[name]["reason"], judges[name]
                assert f"127.0.0.1:{port}" not in judges[name]["reason"]
            for name in set(HEADS) - {"ocr"}:
                assert judges[name]["ready"] is False and judges[name]["reason"].startswith("failed: "), name
            listed = {j["name"]: j for j in (await client.get("/v1/judges")).json()["judges"]}
            assert {n: (j["ready"], j["ready_reason"]) for n, j in listed.items()} == {
                n: (j["ready"], j["reason"]) for n, j in judges.items()}

            # cosmos-rl's trainer: image NFT asks for pickscore, video NFT for dance_grpo
            img = np.asarray(Image.open(io.BytesIO(text_image_png("Hello World"))).convert("RGB"))[None]
            meta = {"reward_fn": {"pickscore": 1.0}, "prompts": ['a sign that says "Hello World"'],
                    "media_type": "image"}
            r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, img), headers=HEADERS)
            assert r.status_code == 424 and "uuid" not in r.json()
            assert r.json()["message"].startswith("reward 'pickscore' cannot be scored now: judge 'pickscore' "
                                                  "is not ready (failed: ")
            video = np.zeros((1, 3, 8, 32, 32), np.uint8)
            vmeta = {"reward_fn": {"dance_grpo": 1.0}, "prompts": ["a dance"], "media_type": "video",
                     "video_infos": [{"video_fps": 16}]}
            r = await client.post("/api/reward/enqueue", content=enqueue_body(vmeta, video), headers=HEADERS)
            assert r.status_code == 424 and "judge 'videoalign' is not ready" in r.json()["message"]
            vmeta["reward_fn"] = {"cosmos_reason1": 1.0}
            r = await client.post("/api/reward/enqueue", content=enqueue_body(vmeta, video), headers=HEADERS)
            assert r.status_code == 503 and r.headers["Retry-After"] and "replica 1 of 1" in r.json()["message"]
            assert "127.0.0.1:8001" not in r.json()["message"]
            # the one judge that can score here does
            meta["reward_fn"] = {"ocr": 1.0}
            r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, img), headers=HEADERS)
            assert r.status_code == 200, r.text
            body = (await poll(client, r.json()["uuid"], "ocr", timeout=300)).json()
            assert body["valid"] == [True], body["errors"]
            assert body["judge_scores"][0]["details"]["recognized"].replace(" ", "").lower() == "helloworld"
            assert body["scores"]["ocr_reward"] == [1.0]
    finally:
        await app.state.cosmos_rl.aclose()
        await gw.aclose()
