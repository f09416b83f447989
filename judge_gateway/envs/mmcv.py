"""mmcv with its compiled ops (mmdet's detectors import `mmcv.ops`), which PyPI has no wheel of.

Built from the sdist once per (mmcv version, Python, torch version, torch build, CUDA archs) and
kept in the wheel cache; later environments install the cached wheel in seconds. Two things make
the build lighter, neither changing the code compiled:
- mmcv's op wrappers (`csrc/pytorch/*.cpp`, ~57 thin files) each parse the torch headers, which
  is ~85% of their compile time; they are compiled as UNITY_PARTS translation units that include
  them (a unity build; they share no file-local names, unlike the CPU kernels in `cpu/`, which
  stay one unit each);
- no debug info (`-g0`, where Python's own flags say `-g`): about a quarter less CPU per unit.
CUDA builds need nvcc (`CUDA_HOME`) and compile for the compute capabilities nvidia-smi reports
(or `TORCH_CUDA_ARCH_LIST`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .spec import EnvBuildError
from .torch_build import TorchChoice

# mmcv 2.1's setup.py needs setuptools < 70; torch 2.13 declares setuptools >= 77, so the old one
# is there for the build only and the new one comes back after.
BUILD_SETUPTOOLS = "setuptools<70"
RUNTIME_SETUPTOOLS = "setuptools>=77.0.3"


UNITY_PARTS = 2  # one per core of a 2-core CI machine; ninja runs them side by side
UNITY_SUFFIX = ".unity-part"


def unity_sources(src: Path, parts: int = UNITY_PARTS) -> int:
    """Turn the sdist's op wrappers into `parts` units: each `X.cpp` becomes `X.cpp.unity-part`
    (in place, so its relative includes resolve as before), included by `jg_unity_ops_N.cpp`,
    which mmcv's setup.py globs instead. Returns how many files were folded."""
    folder = src / "mmcv" / "ops" / "csrc" / "pytorch"
    files = sorted(folder.glob("*.cpp"))
    if not files:
        raise EnvBuildError(f"no op wrappers in {folder}: not the mmcv sdist layout this build knows")
    for f in files:
        f.rename(f.with_name(f.name + UNITY_SUFFIX))
    for i in range(parts):
        chunk = files[i::parts]
        (folder / f"jg_unity_ops_{i}.cpp").write_text(
            "// judge-gateway's unity build of mmcv's op wrappers (judge_gateway/envs/mmcv.py)\n"
            + "".join(f'#include "{f.name}{UNITY_SUFFIX}"\n' for f in chunk))
    return len(files)


def _arch_list(choice: TorchChoice) -> str:
    return os.environ.get("TORCH_CUDA_ARCH_LIST") or ";".join(choice.compute_caps)


def cache_folder(version: str, choice: TorchChoice, wheel_cache: Path, torch_version: str) -> Path:
    """One folder per ABI the compiled ops are tied to."""
    build = "cpu" if choice.build == "cpu" else "cuda-" + (_arch_list(choice).replace(";", "_") or "default")
    return wheel_cache / f"mmcv-{version}-torch{torch_version.split('+')[0]}-{build}"


def build_env(choice: TorchChoice) -> dict[str, str]:
    env = {"MMCV_WITH_OPS": "1", "MAX_JOBS": os.environ.get("MAX_JOBS", str(os.cpu_count() or 1)),
           "CFLAGS": (os.environ.get("CFLAGS", "") + " -g0").strip()}
    if choice.build == "cuda":
        env["FORCE_CUDA"] = "1"
        if _arch_list(choice):
            env["TORCH_CUDA_ARCH_LIST"] = _arch_list(choice)
    else:
        env["FORCE_CUDA"] = "0"
    return env


def mmcv_plan(version: str, choice: TorchChoice, wheel_cache: Path) -> str:
    env = " ".join(f"{k}={v}" for k, v in build_env(choice).items())
    return (f"mmcv=={version}: the cached wheel under {cache_folder(version, choice, wheel_cache, choice.version)}, "
            f"else its sdist built as a wheel (unity build of the op wrappers) with {env}")


def _unpack(sdists: Path, dest: Path, version: str) -> Path:
    import tarfile

    archives = sorted(sdists.glob(f"mmcv-{version}.tar.gz"))
    if not archives:
        raise EnvBuildError(f"pip download left no mmcv-{version}.tar.gz in {sdists}")
    with tarfile.open(archives[0]) as tar:
        tar.extractall(dest, filter="data")
    return dest / f"mmcv-{version}"


def install_mmcv(venv: Path, version: str, choice: TorchChoice, wheel_cache: Path, constraints: Path, *,
                 run: Callable[..., None], log: Callable[[str], None], tag: str, quiet: list[str]) -> None:
    python = str(venv / "bin" / "python")
    torch_version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                                   text=True, check=False).stdout.strip() or choice.version
    pyver = subprocess.run([python, "-c", "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')"],
                           capture_output=True, text=True, check=False).stdout.strip()
    folder = cache_folder(version, choice, wheel_cache, torch_version)
    folder.mkdir(parents=True, exist_ok=True)
    wheels = sorted(folder.glob(f"mmcv-{version}-{pyver}-*.whl"))
    if not wheels:
        if choice.build == "cuda" and not (os.environ.get("CUDA_HOME") or shutil.which("nvcc")):
            raise EnvBuildError("mmcv's CUDA ops need the CUDA compiler: set CUDA_HOME or put nvcc on PATH "
                               "(a CUDA toolkit matching the torch build)")
        env = build_env(choice)
        log(f"[{tag}] building mmcv=={version} into {folder} ({' '.join(f'{k}={v}' for k, v in env.items())}); "
            "once per machine: about 10-15 min on 2 cores")
        started = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=folder))
        try:
            run([python, "-m", "pip", "install", *quiet, BUILD_SETUPTOOLS], "install the build's setuptools")
            run([python, "-m", "pip", "download", *quiet, "--no-deps", "--no-binary", ":all:", "--no-build-isolation",
                 "-d", str(tmp / "sdist"), f"mmcv=={version}"], f"download the mmcv=={version} sdist")
            src = _unpack(tmp / "sdist", tmp / "src", version)
            folded = unity_sources(src)
            log(f"[{tag}] unity build: {folded} op wrappers in {UNITY_PARTS} units, the CPU kernels one unit each")
            run([python, "-m", "pip", "wheel", *quiet, "--no-build-isolation", "--no-deps", "-c", str(constraints),
                 "-w", str(tmp / "wheel"), str(src)], f"build mmcv=={version}", env=env)
            run([python, "-m", "pip", "install", *quiet, RUNTIME_SETUPTOOLS], "restore setuptools")
            for built in (tmp / "wheel").glob("mmcv-*.whl"):
                os.replace(built, folder / built.name)  # whole, or not at all: never a half wheel in the cache
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        wheels = sorted(folder.glob(f"mmcv-{version}-{pyver}-*.whl"))
        if not wheels:
            raise EnvBuildError(f"the mmcv build left no wheel for {pyver} in {folder}")
        log(f"[{tag}] built {wheels[0].name} in {time.monotonic() - started:.0f} s")
    else:
        log(f"[{tag}] using the cached {wheels[0]}")
    run([python, "-m", "pip", "install", *quiet, "-c", str(constraints), str(wheels[0])], "install mmcv")
