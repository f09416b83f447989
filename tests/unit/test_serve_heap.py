"""`judge-gateway serve` hands uvicorn a process whose start-up objects are out of the cyclic GC's
sight (judge_gateway/server/heap.py: a full collection walks what requests made, not the heap)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.cli_configs import vlm_config, write_config

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import gc, sys
import uvicorn

def run(app, **options):  # stands in for the server: report the collector's view, serve nothing
    print("frozen", gc.get_freeze_count(), "tracked", len(gc.get_objects()), "app", type(app).__name__)

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
