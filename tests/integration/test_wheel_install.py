"""pip install outside the repository, as the README says it (its install block, run line by line
in a fresh venv in a temporary folder, the clone being a copy of this checkout): `pip install
'.[ocr]'` in the clone, then the wheel built there with its `ocr` extra (dependencies from the
package index / pip cache). From that wheel: serve from another folder with no PYTHONPATH, score
the README's OCR quickstart, load a shipped config by name, name a missing extra, and the OCR
worker imports the installed package, not this checkout; and `prepare` runs every step of
`.venv-heads`' and the vLLM venv's specs there (issue 33: from a wheel it asked the index for
`judge-gateway==<version>`), the heads venv getting the running judge-gateway, after which `serve`
scores a CLIP-family head through it."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from judge_gateway.envs.builder import CONSTRAINTS, STAMP
from judge_gateway.launch import descendants
from tests.support.fake_openai import free_port
from tests.support.heads_env import head_judges, heads_python, text_image_png
from tests.support.health import wait_healthy
from tests.support.install_text import install_commands
from tests.support.toml_text import to_toml
from tests.support.vllm_server import vllm_python

pytestmark = pytest.mark.integration
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


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return env | {"HF_HUB_OFFLINE": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"} | extra


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """A fresh venv outside the repository holding the wheel, installed by the README's own lines."""
    tmp = tmp_path_factory.mktemp("wheel-install")
    timings: dict[str, float] = {}
    src = _source_tree(tmp / "judge-gateway")  # the clone
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], env=_clean_env())
    env = _clean_env(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    commands = install_commands()
    assert commands[0].startswith("git clone ")  # the clone is `src`
    for i, command in enumerate(commands[1:]):
        if i:  # each line on its own: the one before installed the same version, which pip would keep
            _run([str(venv / "bin/python"), "-m", "pip", "uninstall", "-q", "-y", "judge-gateway"], env=env, cwd=src)
        started = time.monotonic()
        _run(["bash", "-c", command], env=env, cwd=src)
        timings[command] = time.monotonic() - started
    wheel = next((src / "dist").glob("judge_gateway-*.whl"))
    where = "import judge_gateway, os; print(os.path.dirname(judge_gateway.__file__))"
    site = Path(_run([str(venv / "bin/python"), "-c", where], env=_clean_env(), cwd=tmp).stdout.strip())
    assert site.is_relative_to(venv) and not site.is_relative_to(ROOT) and not site.is_relative_to(src)
    print("[wheel] README install lines: " + ", ".join(f"{c!r} {t:.1f} s" for c, t in timings.items()))
    return {"venv": venv, "wheel": wheel, "site": site, "tmp": tmp, "cli": str(venv / "bin/judge-gateway")}


def test_the_wheel_installs_serves_and_scores_outside_the_repository(installed, tmp_path):
    timings = {}
    venv, site = installed["venv"], installed["site"]
    env = _clean_env()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cli = str(venv / "bin/judge-gateway")
    # A shipped config by name, from a folder that has none; a missing extra, named.
    listed = _run([cli, "judges", "--config", "cosmos_rl"], env=env, cwd=elsewhere)
    assert re.search(r"^cosmos_reason1 +yes_no", listed.stdout, re.MULTILINE), listed.stdout
    browse = subprocess.run([cli, "browse", str(elsewhere)], capture_output=True, text=True, check=False, env=env,
                            cwd=elsewhere)
    assert browse.returncode == 2 and "pip install '<the judge-gateway wheel>[browse]'" in browse.stderr
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
    print(f"[wheel] served + scored the quickstart in {timings['serve_and_score']:.1f} s")
    # the running installation as a wheel again (what prepare installs into each venv): the files pip
    # installed from the wheel, byte for byte
    rebuilt = _run([str(venv / "bin/python"), "-c", "import sys; from pathlib import Path; "
                    "from judge_gateway.envs.self_install import running_wheel; print(running_wheel(Path(sys.argv[1])))",
                    str(tmp_path / "cache")], env=env, cwd=tmp_path).stdout.strip()
    with zipfile.ZipFile(installed["wheel"]) as a, zipfile.ZipFile(rebuilt) as b:
        ours = {n for n in b.namelist() if not n.endswith("/RECORD")}
        assert ours == {n for n in a.namelist() if not n.endswith("/RECORD")}
        assert all(a.read(n) == b.read(n) for n in ours)



def _seed(session_venv: Path, venv: Path) -> None:
    """A copy of one of the session's venvs whose files are hard links (no bytes copied), for
    `prepare --rebuild` to run every step of its spec on: pip finds torch, vLLM, open_clip ...
    already there, so the test pays for the steps, the wheel's install among them, and not for
    downloading and unpacking gigabytes again (a build from nothing, measured once: bench/RESULTS.md).
    pip replaces a file by unlinking it first, so the session's venv is never written through a
    link; the two files the builder rewrites in place are the copy's own."""
    _run(["cp", "-al", f"{session_venv.resolve()}/.", str(venv)])
    for name in (STAMP, CONSTRAINTS):
        (venv / name).unlink(missing_ok=True)


def test_from_the_wheel_prepare_builds_the_heads_and_vllm_venvs_and_serve_scores_through_them(
        installed, tiny_heads, tiny_model_dir, tmp_path):
    """`prepare --rebuild` from the wheel, in a folder outside the repository, on a config with a
    CLIP-family head in `.venv-heads` and a VLM judge whose launch table serves vLLM's CPU build from
    `.venv-vllm`: every step of both specs runs (on copies of the session's venvs, see _seed), the
    heads venv gets the running judge-gateway (a wheel rebuilt from its installed files, never the
    index's: judge-gateway==<version> is not published); then `serve` scores the CLIP head through
    that venv. (--no-start: the vLLM server itself is started in test_up.py.)"""
    node = tmp_path / "node"
    node.mkdir()
    # the node's own venvs, at the paths its config names (not the session's: those are heads_python's)
    built = {name: node.joinpath(name) for name in (".venv-heads", ".venv-vllm")}
    _seed(heads_python().parent.parent, built[".venv-heads"])
    _seed(vllm_python().parent.parent, built[".venv-vllm"])
    clip = head_judges(tiny_heads)["clip"]
    clip["options"] |= {"python": ".venv-heads/bin/python", "device": "cpu"}
    config = {
        "backends": {"tiny": {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "base_urls": [f"http://127.0.0.1:{free_port()}/v1"],
                              "launch": {"model": str(tiny_model_dir), "gpus": 0, "max_model_len": 4096,
                                         "limit_mm_per_prompt": {"image": 2, "video": 1}}}},
        "judges": {"clip": clip, "alignment": {"kind": "yes_no", "backend": "tiny", "template": "vqa_alignment@1"}},
    }
    (node / "node.toml").write_text(to_toml(config))
    env = _clean_env(JG_WHEEL_CACHE=str(tmp_path / "wheels"), TRANSFORMERS_OFFLINE="1")
    started = time.monotonic()
    done = subprocess.run([installed["cli"], "prepare", "--config", "node.toml", "--torch", "cpu", "--offline",
                           "--no-start", "--rebuild"], cwd=node, env=env, capture_output=True, text=True, timeout=1800,
                          check=False)
    prepare_s = time.monotonic() - started
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-6000:]
    rows = {line.split()[0]: line for line in out.splitlines() if line.split()[:1] in (["clip"], ["alignment"])}
    assert re.search(r"heads \.venv-heads \(built \d+ s\)", rows["clip"]) and "ok (reward " in rows["clip"], out
    assert re.search(r"vllm \.venv-vllm \(built \d+ s\)", rows["alignment"]), out
    assert "not started (--no-start)" in rows["alignment"], out
    said = done.stdout + done.stderr
    assert "rebuilt from the running installation" in said and "judge-gateway==" not in said
    # each venv holds the running judge-gateway: the installed files, from the rebuilt wheel
    probe = ("import importlib.metadata as m, json, judge_gateway; d = m.distribution('judge-gateway'); "
             "print(json.dumps([judge_gateway.__file__, json.loads(d.read_text('direct_url.json'))['url']]))")
    package, url = json.loads(_run([str(built[".venv-heads"] / "bin/python"), "-c", probe], env=env, cwd=node).stdout)
    assert Path(package).is_relative_to(built[".venv-heads"]) and "/wheels/self/" in url, (package, url)
    assert (Path(package).parent / "backends.py").read_bytes() == (installed["site"] / "backends.py").read_bytes()
    _run([str(built[".venv-vllm"] / "bin/python"), "-c", "import vllm, torchvision"], env=env, cwd=node)

    port = free_port()
    log_path = tmp_path / "serve.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([installed["cli"], "serve", "--config", "node.toml", "--port", str(port)], cwd=node,
                                env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, 120)
        body = {"samples": [{"prompt": 'a sign that says "Hello World"',
                             "image": base64.b64encode(text_image_png("Hello World")).decode()}], "judges": ["clip"]}
        r = httpx.post(f"http://127.0.0.1:{port}/v1/rewards", json=body, timeout=300)
        workers = [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode() for pid in descendants(proc.pid)
                   if Path(f"/proc/{pid}/cmdline").exists()]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert r.status_code == 200, r.text
    score = r.json()["results"][0]["scores"]["clip"]
    assert score["valid"], score
    assert any(w.endswith(".venv-heads/bin/python") for w in workers), workers  # the head ran under the built venv
    sizes = {v: sum(f.stat().st_size for f in (node / v).rglob("*") if f.is_file() and f.stat().st_nlink == 1)
             for v in (".venv-heads", ".venv-vllm")}
    print(f"[wheel prepare] every step of the heads and vllm specs run in {prepare_s:.0f} s; files of their own "
          "(not hard links): " + ", ".join(f"{v} {b / 1e9:.2f} GB" for v, b in sizes.items()))
