"""heads/models/clip.py's _GpuTimer records its events on the head's own device's stream (a head
on cuda:1 must not time, nor open a context on, cuda:0). Runs under .venv-heads (torch, CPU
only): CUDA's Event and current_stream are stood in for."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.heads_env import heads_python, installed

ROOT = Path(__file__).resolve().parents[2]
HEADS_PYTHON = installed(heads_python)  # $JG_HEADS_VENV, else .venv-heads

_PROBE = r"""
import json, torch
from judge_gateway.heads.models import clip

recorded = []

class FakeEvent:
    def __init__(self, enable_timing=False):
        pass
    def record(self, stream=None):
        recorded.append(stream)

torch.cuda.Event = FakeEvent
torch.cuda.current_stream = lambda device=None: f"stream of {device}"
timer = clip._GpuTimer(torch.device("cuda", 1))
timer.start()
timer.stop()
cpu = clip._GpuTimer(torch.device("cpu"))
cpu.start()
cpu.stop()
print(json.dumps({"recorded": recorded, "cpu_elapsed": cpu.elapsed_s()}))
"""


@pytest.mark.skipif(HEADS_PYTHON is None, reason="no heads venv (scripts/setup_heads.sh)")
def test_the_gpu_timer_records_on_the_heads_device_stream_not_the_current_devices():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([str(HEADS_PYTHON), "-c", _PROBE], capture_output=True, text=True, env=env,
                         timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"recorded": ["stream of cuda:1", "stream of cuda:1"], "cpu_elapsed": 0.0}
