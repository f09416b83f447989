"""A head worker killed under load: the real OCR head (RapidOCR
in .venv-heads) scores a steady native load and cosmos-rl requests; its worker is killed with -9.
It respawns; native requests all return (in-flight cells invalid with head_error, never a 5xx or
a hang); cosmos-rl re-scores the crashed cells, so every accepted uuid resolves with real
results (no fill)."""

from __future__ import annotations

import asyncio
import base64
import io
import os
import signal
import time

import httpx
import numpy as np
from PIL import Image

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.support.cosmos_client import HEADERS, enqueue_body
from tests.support.heads_env import heads_python, text_image_png
from tests.support.reliability import figures, lost, resolve_all

PROMPT = 'a sign that says "Hello World"'


async def test_ocr_worker_killed_under_load_respawns_and_nothing_accepted_is_lost():
    config = {
        "judges": {"ocr": {"kind": "ocr", "options": {"python": str(heads_python()), "threads": 1}}},
        "cosmos_rl": {"request_timeout_s": 180, "retry_attempts": 8, "retry_backoff_s": 0.5,
                      "retry_backoff_max_s": 4.0},
    }
    gw = Gateway(validate_config(config))
    app = create_app(gw)
    worker = gw.judges["ocr"].worker
    png = text_image_png("Hello World")
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    native = {"samples": [{"prompt": PROMPT, "image": base64.b64encode(png).decode()}], "judges": ["ocr"]}
    meta = {"reward_fn": {"ocr": 1.0}, "prompts": [PROMPT, PROMPT], "media_type": "image"}
    replies: list[tuple[float, int, dict]] = []
    stop = asyncio.Event()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
                                     base_url="http://localhost", timeout=120) as client:
            await worker.wait_ready()

            async def load() -> None:
                while not stop.is_set():
                    r = await client.post("/v1/rewards", json=native)
                    replies.append((time.monotonic(), r.status_code, r.json()))

            loaders = [asyncio.create_task(load()) for _ in range(2)]
            await asyncio.sleep(2.0)
            uids = []
            for _ in range(6):
                r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, np.stack([pixels, pixels])),
                                      headers=HEADERS)
                assert r.status_code == 200, r.text
                uids.append(r.json()["uuid"])
            old_pid = worker.pid
            os.kill(old_pid, signal.SIGKILL)
            killed_at = time.monotonic()
            while not (worker.readiness()[0] and worker.pid not in (None, old_pid)):
                assert time.monotonic() - killed_at < 90, worker.readiness()
                await asyncio.sleep(0.05)
            respawned_s = time.monotonic() - killed_at
            results = await resolve_all(client, uids, timeout=150, reward="ocr")
            await asyncio.sleep(1.0)
            stop.set()
            await asyncio.gather(*loaders)
    finally:
        await app.state.cosmos_rl.aclose()
        await gw.aclose()
    after = [(t, body) for t, code, body in replies if t > killed_at]
    first_valid = next((t - killed_at for t, body in after if body["results"][0]["scores"]["ocr"]["valid"]), None)
    codes = sorted({code for _, code, _ in replies})
    invalid = [body["results"][0]["scores"]["ocr"] for _, _, body in replies
               if not body["results"][0]["scores"]["ocr"]["valid"]]
    missing = lost(uids, results)
    figures("OCR head worker kill -9 under load", native_requests=len(replies), status=codes,
            native_invalid=len(invalid), respawned_in_s=f"{respawned_s:.1f}",
            first_valid_score_in_s=None if first_valid is None else f"{first_valid:.1f}",
            cosmos_accepted=len(uids), rescored_cells=sum(c["details"].get("attempts", 1) >= 2 for body in
                                                          results.values() for c in body.get("judge_scores", [])),
            accepted_lost=len(missing))
    assert codes == [200]
    assert all(c["error"]["code"] == "head_error" and c["reward"] is None for c in invalid)
    assert first_valid is not None
    assert missing == [], {u: results.get(u) for u in missing}
    cells = [c for body in results.values() for c in body["judge_scores"]]
    assert all(c["valid"] and c["reward"] >= 0.9 for c in cells), cells
    # the kill hit accepted work: its cells crashed and were scored again
    assert any(c["details"].get("attempts", 1) >= 2 for c in cells)
