"""The "add a reward" guide's first example runs on a fresh clone as written (issue 33: every judge
of its example needed something not there: a heads venv, a checkpoint that does not ship, the
peers' packages, a vLLM): `judge-gateway serve --config docs/examples/byo/start.toml` from the
clone, with the gateway's own interpreter only, then `python docs/examples/byo/try_it.py`, which
prints a valid score for a sharp and a blurred image, the sharp one higher."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.fake_openai import free_port
from tests.support.health import wait_healthy

ROOT = Path(__file__).resolve().parents[2]


def test_the_first_reward_serves_and_scores_from_the_clone(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "judge_gateway.cli", "serve", "--config",
                             "docs/examples/byo/start.toml", "--port", str(port)], cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        wait_healthy(url, proc, 60)
        done = subprocess.run([sys.executable, "docs/examples/byo/try_it.py", url], cwd=ROOT, capture_output=True,
                              text=True, timeout=120, check=False)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert done.returncode == 0, done.stderr + (tmp_path / "serve.log").read_text()[-3000:]
    found = dict(re.findall(r"^(sharp|blurred) +valid=True raw=([0-9.]+) ", done.stdout, re.M))
    assert set(found) == {"sharp", "blurred"}, done.stdout
    assert float(found["sharp"]) > float(found["blurred"]) > 0, done.stdout
    guide = (ROOT / "docs" / "guides" / "add-a-reward.md").read_text()
    assert done.stdout.strip() in guide, f"the guide shows other numbers than try_it.py prints:\n{done.stdout}"
