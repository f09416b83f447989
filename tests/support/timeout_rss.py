"""Memory left behind by timed-out requests: `python -m tests.support.timeout_rss N` posts N
requests, one after another, whose video judge hits its deadline_s while the video is being
decoded, to a fresh gateway app in this process (in-process ASGI, fake VLM backend), and prints
JSON {"cells": [error codes], "rss_after_mb": [VmRSS growth over a warmed-up baseline, 1 s after
each request], "rss_peak_mb": peak growth}.

Before: the decode thread went on after the deadline and its frames stayed held (+444 MB after one
request of 60 frames of 1080p, +937 MB after two); a subprocess, so nothing else counts.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import resource
import sys

import httpx

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.fuzz_run import rss_mb
from tests.support.hostile_media import mp4_of_black_frames

IDLE_S = 1.0


def rss_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def main(n: int) -> None:
    # 60 x 1080p: 373 MB of RGB. The deadline lands mid-decode: since the decode loop converts planes
    # at the judge's size (issue 34) the clip decodes in ~0.2-0.3 s here, so 0.3 s could be met.
    mp4 = base64.b64encode(mp4_of_black_frames(60, 1920, 1080)).decode()
    server = FakeOpenAIServer().start()
    cfg = {"backends": {"yes": {"model": "fake-yes", "base_urls": [server.base_url]}},
           "judges": {"video": {"kind": "yes_no", "backend": "yes", "template": "cosmos_reason1@1", "deadline_s": 0.05,
                                "video": {"max_frames": 160, "total_pixels": 7225344, "even_frames": True}}}}
    gw = Gateway(validate_config(cfg))
    app = create_app(gw)
    cells, after = [], []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=300) as client:
        short = {"samples": [{"prompt": "a car", "video": {"mp4": base64.b64encode(
            mp4_of_black_frames(2, 64, 64)).decode()}}]}
        assert (await client.post("/v1/rewards", json=short)).status_code == 200  # warm: imports, codecs
        gc.collect()
        baseline = rss_mb()
        peak_base = rss_peak_mb()
        for _ in range(n):
            r = await client.post("/v1/rewards", json={"samples": [{"prompt": "a car", "video": {"mp4": mp4}}]})
            cell = r.json()["results"][0]["scores"]["video"]
            cells.append(cell["error"]["code"] if cell.get("error") else "valid")
            await asyncio.sleep(IDLE_S)  # an idle gateway between training steps
            gc.collect()
            after.append(round(rss_mb() - baseline, 1))
    await gw.aclose()
    server.stop()
    print(json.dumps({"cells": cells, "rss_after_mb": after, "rss_peak_mb": round(rss_peak_mb() - peak_base, 1)}))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2))
