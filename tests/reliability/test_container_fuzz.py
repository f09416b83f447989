"""The container fuzzer (tests/support/container_fuzz.py): mutated mp4/mov/mkv/webm/avi clips,
GIF/PNG/JPEG/WebP images, media declaring huge sizes or growing mid-stream, a codec FFmpeg does
not know, demuxer scripts naming a file and UDP ports, and heavy or timed-out requests, sent
where every API takes media. 0 x 5xx, 0 hangs, the canary file never opened, the ports never
bound, and the process's RSS bounded while it runs and back near its baseline after (the
process-wide decoded-media budget, and timed-out requests stopping their decodes).
JG_CONTAINER_FUZZ_CASES lowers the count for a quick local run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.reliability import figures

ROOT = Path(__file__).resolve().parents[2]
CASES = int(os.environ.get("JG_CONTAINER_FUZZ_CASES", "2000"))
# Measured (2,000 cases, seed 5; bench/RESULTS.md): RSS warm 181 MB, peak 526 (+345), after 265 (+84).
MAX_GROWTH_AFTER_MB = 160
MAX_PEAK_OVER_WARM_MB = 600  # the decoded-media budget is 134 M pixels (~400 MB of RGB)


def test_container_fuzz_no_5xx_no_file_or_socket_bounded_rss():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "tests.support.fuzz_run", str(CASES), "5", "16", "containers"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    f = json.loads(out.stdout.strip().splitlines()[-1])
    kept = f["retained"]
    figures("container fuzz", cases=f["cases"], status=f["status"], n_5xx=f["n_5xx"], hangs=f["hangs"],
            wall_s=f["wall_s"], canary_opens=kept["canary_opens"], ports_bound=kept["ports_bound"],
            rss_mb=f"warm {f['rss_warm_mb']} / peak {f['rss_peak_mb']} / after {f['rss_end_mb']}")
    assert f["cases"] == CASES and sum(f["status"].values()) == CASES
    assert f["n_5xx"] == 0, f["server_errors"]
    assert f["hangs"] == 0, f["hang_examples"]
    assert kept["canary_opens"] == 0 and kept["ports_bound"] == [], kept
    assert kept["media_budget_in_use"] == 0, kept  # every reservation given back
    assert f["families"]["container:mp4"].get("200", 0) > 0  # valid clips still score
    assert f["rss_end_mb"] - f["rss_warm_mb"] < MAX_GROWTH_AFTER_MB, f
    assert f["rss_peak_mb"] - f["rss_warm_mb"] < MAX_PEAK_OVER_WARM_MB, f
