"""scripts/start_vllm.sh builds vLLM's command line; `--dry-run` prints it without a GPU."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "start_vllm.sh"


# Flow-Factory's launcher variables (scripts/start_vllm_rational_reward.sh) and ours.
FF_VARS = ("MODEL_PATH", "PORT", "HOST", "SERVED_MODEL_NAME", "TENSOR_PARALLEL_SIZE", "DATA_PARALLEL_SIZE",
           "GPU_MEMORY_UTILIZATION", "VLLM_BIN")


def dry_run(tmp_path: Path, *args: str, visible: str | None, action: tuple[str, ...] = ("start", "--preset", "qwen_vl"),
            **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_VISIBLE_DEVICES", *FF_VARS) and not k.startswith("JG_VLLM_")}
    env.update(extra_env)
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    return subprocess.run(["bash", str(SCRIPT), *action, "--dry-run", "--run-dir", str(tmp_path), *args],
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
    # not asked: one replica per visible GPU, as Flow-Factory's launcher (not vLLM's default of 1)
    assert data_parallel_size(vllm_args(dry_run(tmp_path, visible="0,1"))) == 2
    assert data_parallel_size(vllm_args(dry_run(tmp_path, visible=None))) == 1
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


def flow_factory_command(env: dict[str, str], extra: list[str]) -> list[str]:
    """What Flow-Factory's scripts/start_vllm_rational_reward.sh runs (its lines 31-66): defaults
    MODEL_PATH TIGER-Lab/RationalRewards-8B-T2I, PORT 8000, HOST 0.0.0.0, TP 1, GPU util 0.9,
    the served name inferred from MODEL_PATH, DP = the entries of CUDA_VISIBLE_DEVICES (1 unset)."""
    model = env.get("MODEL_PATH", "TIGER-Lab/RationalRewards-8B-T2I")
    served = env.get("SERVED_MODEL_NAME") or ("RationalRewards-8B-Edit" if "RationalRewards-8B-Edit" in model
                                              else "RationalRewards-8B-T2I")
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    dp = env.get("DATA_PARALLEL_SIZE") or str(len(visible.split(",")) if visible else 1)
    return [env.get("VLLM_BIN", "vllm"), "serve", model,
            "--tensor-parallel-size", env.get("TENSOR_PARALLEL_SIZE", "1"), "--data-parallel-size", dp,
            "--gpu-memory-utilization", env.get("GPU_MEMORY_UTILIZATION", "0.9"),
            "--host", env.get("HOST", "0.0.0.0"), "--port", env.get("PORT", "8000"),
            "--served-model-name", served, *extra]


def _flag_pairs(args: list[str]) -> dict[str, str]:
    return {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("--") and not args[i + 1].startswith("--")}


@pytest.mark.parametrize("ff_env", [
    {"MODEL_PATH": "TIGER-Lab/RationalRewards-8B-Edit", "CUDA_VISIBLE_DEVICES": "0,1,2", "VLLM_BIN": "/opt/vllm/bin/vllm",
     "PORT": "8123", "HOST": "0.0.0.0", "TENSOR_PARALLEL_SIZE": "1", "GPU_MEMORY_UTILIZATION": "0.8"},
    {"MODEL_PATH": "/models/RationalRewards-8B-T2I", "CUDA_VISIBLE_DEVICES": "4,5", "VLLM_BIN": "vllm",
     "DATA_PARALLEL_SIZE": "1", "SERVED_MODEL_NAME": "my-judge", "HOST": "10.0.0.3", "PORT": "9000",
     "TENSOR_PARALLEL_SIZE": "1", "GPU_MEMORY_UTILIZATION": "0.9"},
])
def test_flow_factory_launcher_variables_give_its_command(tmp_path, ff_env):
    """No action, no preset: `MODEL_PATH=... start_vllm.sh --dry-run -- --max-model-len 8192`
    prints the command Flow-Factory's launcher runs, plus our own flags (logprobs, media, prefix
    caching) that do not change what it serves."""
    env = {k: v for k, v in ff_env.items() if k != "CUDA_VISIBLE_DEVICES"}
    result = dry_run(tmp_path, "--", "--max-model-len", "8192", visible=ff_env["CUDA_VISIBLE_DEVICES"],
                     action=(), **env)
    ours = vllm_args(result)
    theirs = flow_factory_command(ff_env, ["--max-model-len", "8192"])
    assert ours[:3] == theirs[:3]  # $VLLM_BIN serve $MODEL_PATH
    mine = _flag_pairs(ours)
    assert {k: mine.get(k) for k in _flag_pairs(theirs)} == _flag_pairs(theirs)
    assert "Flow-Factory launcher variables in the environment" in result.stderr


def test_flow_factory_defaults_we_keep_apart(tmp_path):
    """Unset HOST: loopback here (that launcher binds 0.0.0.0); TP and GPU utilisation unset are
    vLLM's defaults (1, 0.9), which that launcher passes explicitly."""
    ours = vllm_args(dry_run(tmp_path, visible="0", action=(), MODEL_PATH="TIGER-Lab/RationalRewards-8B-T2I"))
    pairs = _flag_pairs(ours)
    assert pairs["--host"] == "127.0.0.1" and pairs["--port"] == "8000"
    assert pairs["--served-model-name"] == "RationalRewards-8B-T2I" and pairs["--data-parallel-size"] == "1"
    assert "--tensor-parallel-size" not in pairs and "--gpu-memory-utilization" not in pairs
