"""The cosmos-rl client side, as its example clients and remote_calculator build requests, and a
small gateway config on the fake OpenAI backend (tests/support/fake_openai.py)."""

from __future__ import annotations

import asyncio
import io
import json
import time

import httpx
import numpy as np

from tests.support.fake_openai import free_port


def npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def enqueue_body(meta: dict, arr: np.ndarray) -> bytes:
    """`<JSON>\\n<npy bytes>` (application/octet-stream)."""
    return json.dumps(meta).encode("utf-8") + b"\n" + npy(arr)


def headers(token: str | None = None) -> dict[str, str]:
    """An enqueue's headers, as the clients send them (`Bearer None` when they have no token)."""
    return {"Content-Type": "application/octet-stream", "Authorization": f"Bearer {token}"}


HEADERS = headers()


async def poll(client: httpx.AsyncClient, uid: str, reward: str | None, *, token: str | None = None,
               timeout: float = 60.0, interval: float = 0.05) -> httpx.Response:
    """Form-encoded pulls until the reply is final (200, failed, expired, unknown); with `token`,
    each pull carries it as the clients do."""
    deadline = time.monotonic() + timeout
    data = {"uuid": uid} if reward is None else {"uuid": uid, "type": reward}
    auth = {} if token is None else {"Authorization": f"Bearer {token}"}
    while True:
        r = await client.post("/api/reward/pull", data=data, headers=auth)
        body = r.json()  # every reply is JSON
        if r.status_code == 200 or body.get("status") in ("failed", "unknown", "expired"):
            return r
        assert time.monotonic() < deadline, f"still {body} after {timeout}s"
        await asyncio.sleep(interval)


async def enqueue_retrying(client: httpx.AsyncClient, content: bytes, *, headers: dict[str, str] | None = None,
                  timeout: float = 600.0) -> httpx.Response:
    """An enqueue as cosmos-rl's trainer sends it (network_util.make_request_with_retry): a 503 with
    Retry-After (a head still loading past cosmos_rl.load_wait_s, a backend not up yet) is sent
    again after the pause it names; any other reply is returned."""
    deadline = time.monotonic() + timeout
    while True:
        r = await client.post("/api/reward/enqueue", content=content,
                              headers=headers or {"Content-Type": "application/octet-stream"})
        if r.status_code != 503 or time.monotonic() > deadline:
            return r
        await asyncio.sleep(float(r.headers.get("Retry-After", "2")))


def image_batch(b: int = 2, size: int = 16) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, size=(b, size, size, 3), dtype=np.uint8)


def video_batch(b: int = 2, t: int = 8, size: int = 32) -> np.ndarray:
    return np.random.default_rng(1).integers(0, 256, size=(b, 3, t, size, size), dtype=np.uint8)


def small_config(base_url: str, **cosmos) -> dict:
    """An image judge (`quality`), a video judge (`cosmos_reason1`) on the fake backend, one on an
    address nothing listens on (`down`), and the given [cosmos_rl] section."""
    dead = f"http://127.0.0.1:{free_port()}/v1"
    return {
        "backends": {
            "yes": {"model": "fake-yes", "base_urls": [base_url], "timeout_s": 10, "max_retries": 1},
            "down": {"model": "fake-yes", "base_urls": [dead], "timeout_s": 10, "max_retries": 1,
                     "connect_timeout_s": 1},
        },
        "judges": {
            "quality": {"kind": "yes_no", "backend": "yes", "template": "image_quality@1"},
            "cosmos_reason1": {"kind": "yes_no", "backend": "yes", "template": "cosmos_reason1@1", "default": False},
            "down": {"kind": "yes_no", "backend": "down", "template": "image_quality@1", "default": False},
        },
        "cosmos_rl": cosmos,
    }
