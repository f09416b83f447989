"""Peak-RSS probe: `python -m tests.support.hostile_rss CASE` posts one hostile request to a fresh
gateway app in this process (in-process ASGI, fake VLM backend) and prints JSON
{"status": [...], "body": "...", "rss_delta_mb": peak RSS growth over a warmed-up baseline}.

Run in a subprocess so the peak belongs to this request alone (ru_maxrss never goes down).
"""

from __future__ import annotations

import asyncio
import base64
import json
import resource
import sys

import httpx

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.fuzz_run import config as fuzz_config
from tests.support.hostile_media import mkv_switching_size, mp4_of_black_frames, png_declaring


def config(base_url: str) -> dict:
    """The fuzz run's gateway (fake-yes backend, the embedded default config's encodings, so a
    request decodes as it would in use), without its Flow-Factory profile."""
    cfg = fuzz_config(base_url)
    cfg.pop("flow_factory")
    return cfg


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def body_for(case: str) -> dict:
    if case == "png_8000":
        return {"samples": [{"prompt": "a cat", "image": b64(png_declaring(8000, 8000))}], "judges": ["quality"]}
    if case == "png_8000_x8":
        png = b64(png_declaring(8000, 8000))
        return {"samples": [{"prompt": "a cat", "image": png} for _ in range(8)], "judges": ["quality"]}
    if case == "mp4_160x1080p":
        mp4 = b64(mp4_of_black_frames(160, 1920, 1080))
        return {"samples": [{"prompt": "a car", "video": {"mp4": mp4}}], "judges": ["cosmos_reason1"]}
    if case == "mp4_120x1080p":  # inside every budget: 120 frames of 1080p (746 MB of RGB), 15 KB
        mp4 = b64(mp4_of_black_frames(120, 1920, 1080))
        return {"samples": [{"prompt": "a car", "video": {"mp4": mp4}}], "judges": ["cosmos_reason1"]}
    if case == "mkv_32_to_4k":  # 4 frames of 32x32, then 60 of 3840x2160 (1.5 GB of RGB)
        mkv = b64(mkv_switching_size())
        return {"samples": [{"prompt": "a car", "video": {"mp4": mkv}}], "judges": ["cosmos_reason1"]}
    raise SystemExit(f"unknown case {case!r}")


async def main(case: str) -> None:
    body = json.dumps(body_for(case)).encode()  # built before the baseline: the request's own bytes
    server = FakeOpenAIServer().start()
    gw = Gateway(validate_config(config(server.base_url)))
    app = create_app(gw)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=300) as client:
        small = {"samples": [{"prompt": "a cat", "image": b64(png_declaring(64, 64))}], "judges": ["quality"]}
        warm = await client.post("/v1/rewards", json=small)
        assert warm.status_code == 200, warm.text
        baseline = rss_mb()
        r = await client.post("/v1/rewards", content=body, headers={"content-type": "application/json"})
        peak = rss_mb()
    await gw.aclose()
    server.stop()
    print(json.dumps({"status": r.status_code, "body": r.text[:2000], "rss_delta_mb": round(peak - baseline, 1)}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
