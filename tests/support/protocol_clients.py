"""The trainer side of the drop-in protocols, as their clients build requests (for tests).

cosmos-rl: `<JSON>\\n<npy bytes>` enqueues and form-encoded pulls until 200.
Flow-Factory: `_build_payload` (always the five keys, PIL images as base64 PNG), then
`raise_for_status()`, a truthy `error` raises, then `rewards`.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time

import httpx
import numpy as np
from PIL import Image

# ---- cosmos-rl ---------------------------------------------------------------------------


def enqueue_body(meta: dict, arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return json.dumps(meta).encode("utf-8") + b"\n" + buf.getvalue()


COSMOS_HEADERS = {"Content-Type": "application/octet-stream", "Authorization": "Bearer None"}


async def cosmos_score(client: httpx.AsyncClient, meta: dict, arr: np.ndarray, reward: str,
                       timeout: float = 60.0) -> dict:
    """Enqueue one batch and pull one reward type until it is done."""
    r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, arr), headers=COSMOS_HEADERS)
    assert r.status_code == 200, r.text
    uid = r.json()["uuid"]
    deadline = time.monotonic() + timeout
    while True:
        res = await client.post("/api/reward/pull", data={"uuid": uid, "type": reward},
                                headers={"Authorization": "Bearer None"})
        body = res.json()
        if res.status_code == 200 or body.get("status") in ("failed", "unknown"):
            return body
        assert time.monotonic() < deadline, f"still {body} after {timeout}s"
        await asyncio.sleep(0.05)


# ---- Flow-Factory ------------------------------------------------------------------------


def image_to_b64(img: Image.Image) -> str:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def ff_payload(prompt, image=None, video=None, condition_images=None, condition_videos=None) -> dict:
    return {
        "prompt": prompt,
        "image": [image_to_b64(i) for i in image] if image else None,
        "video": [[image_to_b64(f) for f in v] for v in video] if video else None,
        "condition_images": [[image_to_b64(i) for i in imgs] for imgs in condition_images]
        if condition_images else None,
        "condition_videos": [[[image_to_b64(f) for f in v] for v in vs] for vs in condition_videos]
        if condition_videos else None,
    }


async def ff_compute(client: httpx.AsyncClient, url: str, payload: dict) -> list[float]:
    """RemoteRewardClient.compute, one attempt."""
    r = await client.post(f"{url}/compute", json=payload)
    r.raise_for_status()
    data = r.json()
    if data.get("error"):
        raise RuntimeError(f"Server error: {data['error']}")
    return data["rewards"]


def pil_images(n: int, size: int = 32, seed: int = 0) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)) for _ in range(n)]
