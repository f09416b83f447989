"""pip install outside the repository: the wheel built from this checkout, installed with its `ocr`
extra into a clean venv in a temporary folder (dependencies from the package index / pip cache),
serves from another folder with no PYTHONPATH, scores the README's OCR quickstart, loads a shipped
config by name, names a missing extra, and its OCR worker imports the installed package, not
this checkout."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.support.fake_openai import free_port
from tests.support.health import wait_healthy

ROOT = Path(__file__).resolve().parents[2]

# The README's quickstart, as a user runs it against the service.
QUICKSTART = """
from PIL import Image, ImageDraw, ImageFont
from judge_gateway import RewardClient

image = Image.new("RGB", (640, 160), "white")
ImageDraw.Draw(image).text((40, 40), "Hello World", fill="black", font=ImageFont.load_default(size=64))
with RewardClient("{url}") as client:
    result = client.rewards.create(samples=[{{"prompt": 'a sign that says "Hello World"', "image": image}}],
                                   judges=["ocr"])
ocr = result.results[0].scores["ocr"]
print(result.results[0].reward, ocr.valid, ocr.details["recognized"])
"""


def _source_tree(dest: Path) -> Path:
    """What a wheel is built from: the project file, the README and the package (its shipped_configs
    link to the repository's configs/ folder and launch/start_vllm.sh's to scripts/, copied as links)."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "configs", dest / "configs", ignore=ignore)
    (dest / "scripts").mkdir()  # judge_gateway/launch/start_vllm.sh links to it
    shutil.copy2(ROOT / "scripts" / "start_vllm.sh", dest / "scripts" / "start_vllm.sh")
    shutil.copytree(ROOT / "judge_gateway", dest / "judge_gateway", symlinks=True, ignore=ignore)
    return dest


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
    assert done.returncode == 0, f"{cmd} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


UP_CONFIG = """
[backends.my_judge]
model = "my-org/my-judge"
base_urls = ["http://127.0.0.1:8101/v1"]

[backends.my_judge.launch]
preset = "qwen_vl"
gpus = 1

[judges.q]
kind = "yes_no"
backend = "my_judge"
template = "image_quality@1"
"""


def test_the_wheel_installs_serves_and_scores_outside_the_repository(tmp_path):
    timings = {}
    started = time.monotonic()
    src = _source_tree(tmp_path / "src")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(src)])
    wheel = next((tmp_path / "dist").glob("judge_gateway-*.whl"))
    timings["wheel"] = time.monotonic() - started

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env |= {"HF_HUB_OFFLINE": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], env=env)
    started = time.monotonic()
    _run([str(venv / "bin/python"), "-m", "pip", "install", "-q", f"{wheel}[ocr]"], env=env)
    timings["install"] = time.monotonic() - started
    where = "import judge_gateway, os; print(os.path.dirname(judge_gateway.__file__))"
    site = Path(_run([str(venv / "bin/python"), "-c", where], env=env, cwd=tmp_path).stdout.strip())
    assert site.is_relative_to(venv) and not site.is_relative_to(ROOT)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cli = str(venv / "bin/judge-gateway")
    # A shipped config by name, from a folder that has none; a missing extra, named.
    listed = _run([cli, "judges", "--config", "cosmos_rl"], env=env, cwd=elsewhere)
    assert re.search(r"^cosmos_reason1 +yes_no", listed.stdout, re.MULTILINE), listed.stdout
    browse = subprocess.run([cli, "browse", str(elsewhere)], capture_output=True, text=True, check=False, env=env,
                            cwd=elsewhere)
    assert browse.returncode == 2 and "pip install 'judge-gateway[browse]'" in browse.stderr
    assert "Traceback" not in browse.stderr, browse.stderr
    # `up` with a launch table: the packaged start_vllm.sh plans the vLLM server, no checkout needed.
    (elsewhere / "node.toml").write_text(UP_CONFIG)
    planned = _run([cli, "up", "--config", "node.toml", "--dry-run"], env=env | {"CUDA_VISIBLE_DEVICES": "0"},
                   cwd=elsewhere).stdout
    assert "-m vllm.entrypoints.openai.api_server --model Qwen/Qwen2.5-VL-7B-Instruct" in planned, planned
    assert "--port 8101" in planned and "--served-model-name my-org/my-judge" in planned, planned

    port = free_port()
    log_path = tmp_path / "serve.log"
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([cli, "-v", "serve", "--port", str(port)], cwd=elsewhere, env=env,
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        started = time.monotonic()
        wait_healthy(url, proc, 60)
        done = _run([str(venv / "bin/python"), "-c", QUICKSTART.format(url=url)], env=env, cwd=elsewhere,
                    timeout=180)
        timings["serve_and_score"] = time.monotonic() - started
        assert done.stdout.split() == ["1.0", "True", "HelloWorld"], done.stdout
        judges = _run([cli, "judges", "--server", url, "ocr"], env=env, cwd=elsewhere).stdout
        assert re.search(r"^ocr +ocr .* ready$", judges, re.MULTILINE), judges
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = log_path.read_text()
    assert f"config {site / 'shipped_configs' / 'default.toml'} (shipped config `default`)" in text, text[:3000]
    # The OCR worker reports the package it imported: the installed one.
    ready = re.search(r"head 'ocr' ready \(pid \d+\): .*'package': '([^']+)'", text)
    assert ready, text[-3000:]
    assert Path(ready.group(1)) == site.resolve() and str(ROOT) not in ready.group(1)
    print(f"[wheel] built in {timings['wheel']:.1f} s, installed with [ocr] in {timings['install']:.1f} s, "
          f"served + scored the quickstart in {timings['serve_and_score']:.1f} s")
