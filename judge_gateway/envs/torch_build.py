"""Which torch build an environment gets (`--torch auto|cuda|cpu`) and from which index.

auto: the CUDA build when `nvidia-smi -L` lists a GPU, else the CPU build. The pin is the same
version either way; the build decides the index: the CPU build comes from PyTorch's CPU index,
unless a wheel of the pinned CPU build already sits in a pip find-links folder (a machine image
that ships one, as our CI machines do: then no index is added, and none has to be reachable);
the CUDA build is the one PyPI serves for Linux, or `--torch-index URL`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .spec import TorchBuild, TorchPins


@dataclass(frozen=True)
class TorchChoice:
    build: TorchBuild
    why: str  # how auto decided, or "--torch cpu"
    version: str
    index_url: str  # "" = the configured indexes only
    gpus: tuple[str, ...] = ()  # `nvidia-smi -L` lines, when it was asked
    compute_caps: tuple[str, ...] = ()  # e.g. ("9.0",) for the mmcv CUDA build

    @property
    def requirement(self) -> str:
        return f"torch=={self.version}"

    def index_args(self) -> list[str]:
        return ["--extra-index-url", self.index_url] if self.index_url else []

    def describe(self) -> str:
        if self.index_url:
            where = self.index_url
        elif self.build == "cuda":
            where = "the configured package index (PyPI's Linux torch wheels are CUDA builds)"
        else:
            where = "a local wheel (pip find-links)"
        return f"torch {self.version} ({self.build} build: {self.why}) from {where}"


def nvidia_gpus(timeout_s: float = 20.0) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(`nvidia-smi -L` lines, compute capabilities); empty when there is no nvidia-smi or no GPU."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return (), ()
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=timeout_s, check=False)
        caps = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return (), ()
    gpus = tuple(line.strip() for line in listed.stdout.splitlines() if line.strip().startswith("GPU"))
    if listed.returncode != 0 or not gpus:
        return (), ()
    return gpus, tuple(sorted({c.strip() for c in caps.stdout.splitlines() if c.strip()}))


def find_links_dirs(python: str | None = None) -> list[Path]:
    """The local folders pip reads wheels from (PIP_FIND_LINKS and pip's config files)."""
    values = [os.environ.get("PIP_FIND_LINKS", "")]
    try:
        out = subprocess.run([python or sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                             text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.strip().endswith("find-links"):
            values.append(value.strip().strip("'\""))
    dirs = []
    for value in values:
        for item in value.split():
            item = item.removeprefix("file://")
            if item and Path(item).is_dir():
                dirs.append(Path(item))
    return dirs


def local_cpu_wheel(version: str, dirs: list[Path]) -> Path | None:
    for d in dirs:
        found = sorted(d.glob(f"torch-{version}+cpu-*.whl"))
        if found:
            return found[0]
    return None


def choose_torch(requested: str, pins: TorchPins, *, index_url: str | None = None,
                 gpus: tuple[tuple[str, ...], tuple[str, ...]] | None = None,
                 find_links: list[Path] | None = None) -> TorchChoice:
    """The build and index for `--torch requested`; `gpus` / `find_links` default to this machine's."""
    if requested not in ("auto", "cpu", "cuda"):
        raise ValueError(f"--torch {requested!r}: expected auto, cuda or cpu")
    listed, caps = gpus if gpus is not None else nvidia_gpus()
    if requested == "auto":
        build: TorchBuild = "cuda" if listed else "cpu"
        why = f"auto: nvidia-smi lists {len(listed)} GPU(s)" if listed else "auto: no GPU (nvidia-smi lists none)"
    else:
        build = requested  # type: ignore[assignment]
        why = f"--torch {requested}"
    if index_url is None:
        if build == "cuda":
            index_url = pins.cuda_index
        else:
            wheel = local_cpu_wheel(pins.version, find_links if find_links is not None else find_links_dirs())
            index_url = "" if wheel else pins.cpu_index
            if wheel:
                why += f"; CPU wheel found at {wheel}"
    return TorchChoice(build, why, pins.version, index_url, listed, caps)
