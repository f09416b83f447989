"""`judge-gateway up` with the tiny vLLM CPU server (its launch table) and two heads: scores through
the native, cosmos-rl and Flow-Factory APIs; the vLLM server killed -> its judge not ready and
its scores invalid, then the server restarted and valid again; SIGTERM -> every process gone
(checked by PID, the head workers and vLLM's own included)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from judge_gateway.launch import alive, descendants
from tests.support.heads_env import text_image_png
from tests.support.operate_configs import cli_env, operate_config
from tests.support.protocol_clients import cosmos_score, ff_compute, ff_payload
from tests.support.toml_text import to_toml
from tests.support.vllm_server import free_port

pytestmark = pytest.mark.integration

PROMPT = 'a sign that says "Hello World"'


def _state(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "up.json").read_text())
    except (OSError, ValueError):
        return {}


def _wait(what: str, check, timeout: float, proc: subprocess.Popen, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        assert proc.poll() is None, f"up exited with {proc.returncode} while waiting for {what}:\n{log.read_text()[-4000:]}"
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout} s\n{log.read_text()[-4000:]}")


async def _native(client: httpx.AsyncClient, image: bytes) -> dict:
    body = {"samples": [{"prompt": PROMPT, "image": base64.b64encode(image).decode()}],
            "judges": ["alignment", "ocr", "clip"]}
    r = await client.post("/v1/rewards", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["results"][0]["scores"]


def test_up_serves_restarts_a_dead_vllm_and_stops_everything(tiny_model_dir, tmp_path):
    vllm_port, port = free_port(), free_port()
    config = tmp_path / "up.toml"
    data = operate_config(tiny_model_dir, vllm_port, hpsv3=False)
    # A backend call retries a dead server until its judge's deadline: 15 s here, shorter than a
    # vLLM restart, so a request made while the server is down ends invalid, not late and valid.
    data["judges"]["alignment"]["deadline_s"] = 15.0
    config.write_text(to_toml(data))
    run_dir = tmp_path / "run"
    log = tmp_path / "up.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "judge_gateway.cli", "up", "--config", str(config),
                                 "--port", str(port), "--run-dir", str(run_dir), "--stop-timeout", "20"],
                                cwd=tmp_path, env=cli_env(), stdout=out, stderr=subprocess.STDOUT)
    family: list[int] = []
    try:
        state = _wait("everything up", lambda: (s := _state(run_dir)) and all(v["state"] == "ready" for v in s.values())
                      and s, 420, proc, log)
        server = f"vllm-qwen_vl-{vllm_port}"
        assert set(state) == {server, "gateway"} and state[server]["gpus"] == []
        image = text_image_png("Hello World")

        async def scores_through_three_apis() -> None:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
                native = await _native(client, image)
                for name in ("alignment", "ocr", "clip"):
                    assert native[name]["valid"], native[name]
                pil = Image.open(io.BytesIO(image)).convert("RGB")
                meta = {"reward_fn": {"ocr": 1.0}, "prompts": [PROMPT], "media_type": "image"}
                pulled = await cosmos_score(client, meta, np.asarray(pil)[None], "ocr", timeout=120)
                assert pulled["scores"]["ocr_reward"] == [pytest.approx(native["ocr"]["reward"])], pulled
                rewards = await ff_compute(client, f"http://127.0.0.1:{port}/flow-factory/t2i",
                                           ff_payload([PROMPT], image=[pil]))
                assert len(rewards) == 1 and np.isfinite(rewards[0])

        asyncio.run(scores_through_three_apis())

        # Kill the vLLM server: its judge reads not ready and scores invalid until `up` restarts it.
        os.killpg(state[server]["pid"], signal.SIGKILL)

        def judges() -> dict:
            r = httpx.get(f"http://127.0.0.1:{port}/v1/judges", timeout=10)
            return {j["name"]: j for j in r.json()["judges"]}

        _wait("alignment not ready", lambda: judges()["alignment"]["ready"] is False, 30, proc, log)
        assert judges()["ocr"]["ready"] is not False

        async def alignment_score() -> dict:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
                return (await _native(client, image))["alignment"]

        down = asyncio.run(alignment_score())
        assert not down["valid"] and down["error"]["code"] in ("backend_unavailable", "backend_error"), down
        _wait("the restarted server", lambda: _state(run_dir).get(server, {}).get("restarts") == 1
              and _state(run_dir)[server]["state"] == "ready", 300, proc, log)
        _wait("alignment ready again", lambda: judges()["alignment"]["ready"] is True, 30, proc, log)
        again = asyncio.run(alignment_score())
        assert again["valid"], again
        assert f"{server} (pid {state[server]['pid']}) died" in log.read_text()

        # SIGTERM: the gateway, its head workers and the vLLM server (with its children) all end.
        family = [proc.pid, *descendants(proc.pid)]
        assert len(family) >= 4, family  # up, the gateway, its OCR and CLIP workers, vLLM at least
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
        left = [pid for pid in family if alive(pid)]
        assert not left, f"still running after up stopped: {left}"
        assert not list(run_dir.glob("*.pid"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in family:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
