"""`judge-gateway serve` hands uvicorn a process whose start-up objects are out of the cyclic GC's
sight and whose young generation is collected less often (judge_gateway/server/heap.py: a full
collection walks what requests made, not the heap)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from judge_gateway.media import MediaLimits
from judge_gateway.server.guards import RequestGuardMiddleware
from judge_gateway.server.heap import SERVING_GEN0_THRESHOLD
from tests.support.cli_configs import vlm_config, write_config

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import gc, sys
import uvicorn

def run(app, **options):  # stands in for the server: report the collector's view, serve nothing
    print("frozen", gc.get_freeze_count(), "tracked", len(gc.get_objects()), "app", type(app).__name__,
          "gen0", gc.get_threshold()[0])

uvicorn.run = run
from judge_gateway.cli import main
sys.exit(main(["serve", "--config", sys.argv[1], "--log-level", "warning"]))
"""



def test_serve_freezes_the_started_process_before_it_serves(tmp_path):
    config = write_config(tmp_path, vlm_config("http://127.0.0.1:9/v1", "m", {"quality": "image_quality@1"}))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PROBE, config], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    frozen, tracked = int(words[words.index("frozen") + 1]), int(words[words.index("tracked") + 1])
    assert words[words.index("app") + 1] == "FastAPI"
    # the gateway's modules and the app: tens of thousands of objects the collector no longer walks
    assert frozen > 50_000, done.stdout
    assert tracked < frozen / 10, done.stdout
    assert int(words[words.index("gen0") + 1]) == SERVING_GEN0_THRESHOLD  # young collections less often


async def _request(middleware, body: bytes = b"") -> None:
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    await middleware({"type": "http", "method": "POST", "path": "/"}, receive, send)
    assert sent[0]["status"] == 200


async def test_the_heap_is_trimmed_after_decoded_media_not_only_after_large_bodies(monkeypatch):
    """Frames decoded from a small body are freed into glibc's heap like a large body's buffers:
    a request during which the media budget got TRIM_AFTER_DECODED_PIXELS back schedules the
    trim; one that decoded less, with a small body, does not."""
    import asyncio

    from judge_gateway.media.budget import MediaBudget
    from judge_gateway.server import heap

    if heap._LIBC is None:
        pytest.skip("not glibc: trimming is a no-op")
    trims = []
    monkeypatch.setattr(heap, "trim", lambda: trims.append(1))
    budget = MediaBudget(1 << 30)
    decode = {"pixels": 0}

    async def app(scope, receive, send):
        await receive()
        async with budget.reserve(decode["pixels"], wait_s=None):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    trimmer = heap.HeapTrimmer(budget)
    middleware = RequestGuardMiddleware(app, max_headers=100, max_header_bytes=1 << 16, media_limits=MediaLimits(),
                                        max_body_bytes=1 << 20, trimmer=trimmer)  # the app's one guard
    decode["pixels"] = heap.TRIM_AFTER_DECODED_PIXELS // 2
    await _request(middleware)
    await asyncio.sleep(0.05)
    assert trims == []
    decode["pixels"] = heap.TRIM_AFTER_DECODED_PIXELS
    await _request(middleware)
    await trimmer._pending
    assert trims == [1]
