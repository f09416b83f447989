"""scripts/start_vllm.sh builds vLLM's command line; `--dry-run` prints it without a GPU."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "start_vllm.sh"


def dry_run(tmp_path: Path, *args: str, visible: str | None,
            **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "JG_VLLM_DP", "JG_VLLM_TP")}
    env.update(extra_env)
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    return subprocess.run(["bash", str(SCRIPT), "start", "--preset", "qwen_vl", "--dry-run",
                           "--run-dir", str(tmp_path), *args],
                          capture_output=True, text=True, env=env, timeout=30)


def vllm_args(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("cmd:"))
    return shlex.split(line[len("cmd:"):])


def data_parallel_size(args: list[str]) -> int | None:
    if "--data-parallel-size" not in args:
        return None
    return int(args[args.index("--data-parallel-size") + 1])


@pytest.mark.parametrize(("visible", "extra", "expected"), [
    ("0,1,2,3", [], 4),
    ("3,5", [], 2),
    ("GPU-8a1b,GPU-77c2,GPU-0f3e", [], 3),   # UUIDs count the same
    ("0,1,2,3", ["--tensor-parallel-size", "2"], 2),  # one replica per TP group
    (None, [], 1),                            # unset: 1, as Flow-Factory's launcher
    ("", [], 1),
])
def test_data_parallel_auto_counts_cuda_visible_devices(tmp_path, visible, extra, expected):
    args = vllm_args(dry_run(tmp_path, "--data-parallel", "auto", *extra, visible=visible))
    assert data_parallel_size(args) == expected
    if extra:
        assert args[args.index("--tensor-parallel-size") + 1] == "2"


def test_data_parallel_number_and_environment(tmp_path):
    assert data_parallel_size(vllm_args(dry_run(tmp_path, "--data-parallel", "3", visible="0"))) == 3
    assert data_parallel_size(vllm_args(dry_run(tmp_path, "--data-parallel-size", "2", visible=None))) == 2
    assert data_parallel_size(vllm_args(dry_run(tmp_path, visible="0,1"))) is None  # not asked: vLLM's default
    from_env = dry_run(tmp_path, visible="4,5,6,7,8,9", JG_VLLM_DP="auto")
    assert data_parallel_size(vllm_args(from_env)) == 6


@pytest.mark.parametrize(("args", "visible", "message"), [
    (["--data-parallel", "auto", "--tensor-parallel-size", "2"], "0,1,2", "do not split"),
    (["--data-parallel", "two"], "0", "'auto' or a positive whole number"),
    (["--data-parallel", "0"], "0", "'auto' or a positive whole number"),
])
def test_bad_data_parallel_values_are_refused(tmp_path, args, visible, message):
    result = dry_run(tmp_path, *args, visible=visible)
    assert result.returncode == 2
    assert message in result.stderr


def test_help_documents_data_parallel_auto():
    out = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True, timeout=30).stdout
    assert "--data-parallel auto|N" in out and "CUDA_VISIBLE_DEVICES" in out
