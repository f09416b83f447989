"""Configs for the `prepare` and `up` tests: real heads on the tiny models, a VLM judge whose backend
has a launch table serving the tiny Qwen2.5-VL on vLLM's CPU build, all on local paths."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.heads_env import build_tiny_heads, build_tiny_hpsv3, head_judges, hpsv3_judge
from tests.support.tiny_cache import python_path
from tests.support.vllm_server import vllm_python

ROOT = Path(__file__).resolve().parents[2]
SERVED = "Qwen/Qwen2.5-VL-7B-Instruct"


def tiny_vllm_backend(model_dir: Path, port: int) -> dict:
    """A backend whose launch table serves the tiny model on the CPU (gpus = 0) at 127.0.0.1:port."""
    return {"model": SERVED, "base_urls": [f"http://127.0.0.1:{port}/v1"], "timeout_s": 120,
            "launch": {"model": str(model_dir), "gpus": 0, "python": str(vllm_python()), "max_model_len": 4096,
                       "limit_mm_per_prompt": {"image": 2, "video": 1}, "startup_timeout_s": 300,
                       "restart_backoff_s": 1.0}}


def operate_config(model_dir: Path, vllm_port: int, *, hpsv3: bool = True) -> dict:
    """ocr (the gateway's interpreter), a tiny open_clip CLIP head (.venv-heads), optionally hpsv3 on
    its tiny checkpoint (.venv-hpsv3), and a yes/no judge on the launched tiny vLLM."""
    clip = head_judges(build_tiny_heads())["clip"]
    judges: dict = {
        "ocr": {"kind": "ocr", "default": False, "options": {"device": "cpu", "max_batch_size": 4}},
        "clip": {**clip, "default": False},
        "alignment": {"kind": "yes_no", "backend": "qwen_vl", "template": "vqa_alignment@1", "default": False},
    }
    if hpsv3:
        judges["hpsv3"] = {**hpsv3_judge(build_tiny_hpsv3()), "default": False}
    return {"server": {"readiness_interval_s": 0.5},
            "backends": {"qwen_vl": tiny_vllm_backend(model_dir, vllm_port)},
            "judges": judges,
            "flow_factory": {"profiles": {"t2i": {"judges": {"alignment": 1.0, "clip": 1.0}}}}}


def cli_env() -> dict[str, str]:
    """The environment a `judge-gateway` subprocess of the tests runs with: this checkout first, offline."""
    return {**os.environ, "PYTHONPATH": python_path(), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1"}


def run_cli(args: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "judge_gateway.cli", *args], cwd=cwd, env=cli_env(),
                          capture_output=True, text=True, timeout=timeout, check=False)
