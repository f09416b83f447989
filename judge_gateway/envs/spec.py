"""The environment specs (specs.toml, package data) as typed values, read once.

An `EnvSpec` is what one venv holds: its steps (pip requirements, the torch pin, judge-gateway
itself, removals, patches, the mmcv build), the constraints every pip step runs under, and the
imports that prove it complete. Which head kind runs in which environment is a column of the
same file (`kinds`), checked against the kind table by the unit tests.
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Literal

from ..exceptions import ConfigurationError, Unavailable

TorchBuild = Literal["cpu", "cuda"]
STEP_KINDS = ("torch", "pip", "self", "remove", "patch", "mmcv")
PATCHES = ("torchvision",)


class SpecError(ConfigurationError):
    """specs.toml does not say what the code reads (a packaging mistake, caught by the tests)."""


class EnvBuildError(Unavailable):
    """A step failed, or the environment still does not import what it needs: says which and why."""


@dataclass(frozen=True)
class Step:
    kind: str  # one of STEP_KINDS
    packages: tuple[str, ...] = ()  # pip / remove
    no_deps: bool = False
    extras: tuple[str, ...] = ()  # self
    target: str = ""  # patch: what is patched; mmcv: the version
    only: TorchBuild | None = None

    def applies(self, build: TorchBuild) -> bool:
        return self.only is None or self.only == build

    def describe(self) -> str:
        if self.kind == "torch":
            return "torch"
        if self.kind == "pip":
            return ("--no-deps " if self.no_deps else "") + " ".join(self.packages)
        if self.kind == "self":
            return "judge-gateway" + (f"[{','.join(self.extras)}]" if self.extras else "")
        if self.kind == "remove":
            return "uninstall " + " ".join(self.packages)
        if self.kind == "patch":
            return f"patch {self.target}"
        return f"mmcv=={self.target} (compiled ops; built once, then from the wheel cache)"


@dataclass(frozen=True)
class EnvSpec:
    name: str
    summary: str
    venv: str  # default folder, relative to the working directory
    imports: tuple[str, ...]
    steps: tuple[Step, ...]
    constraints: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    check: str = ""  # one more statement that must run once the imports work

    def uses_torch(self, build: TorchBuild) -> bool:
        return any(s.kind == "torch" and s.applies(build) for s in self.steps)

    def steps_for(self, build: TorchBuild) -> list[Step]:
        return [s for s in self.steps if s.applies(build)]

    def check_code(self) -> str:
        """The statement that succeeds once the environment is complete."""
        code = "import " + ", ".join(self.imports)
        return f"{code}; {self.check}" if self.check else code


@dataclass(frozen=True)
class TorchPins:
    version: str
    cpu_index: str
    cuda_index: str


@dataclass(frozen=True)
class Specs:
    torch: TorchPins
    envs: dict[str, EnvSpec] = field(default_factory=dict)
    digest: str = ""  # of specs.toml's bytes: recorded in each venv it built

    def env(self, name: str) -> EnvSpec:
        try:
            return self.envs[name]
        except KeyError:
            raise SpecError(f"unknown environment {name!r} (known: {', '.join(self.envs)})") from None

    def env_of_kind(self, kind: str) -> EnvSpec | None:
        """The environment a head kind's worker runs in; None for a kind that needs none of its own."""
        for spec in self.envs.values():
            if kind in spec.kinds:
                return spec
        return None


def _step(raw: dict, where: str) -> Step:
    kinds = [k for k in STEP_KINDS if k in raw]
    if len(kinds) != 1:
        raise SpecError(f"{where}: a step has exactly one of {', '.join(STEP_KINDS)} (got {sorted(raw)})")
    kind = kinds[0]
    only = raw.get("only")
    if only not in (None, "cpu", "cuda"):
        raise SpecError(f"{where}: only = {only!r} (cpu or cuda)")
    value = raw[kind]
    if kind in ("pip", "remove"):
        if not (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
            raise SpecError(f"{where}: {kind} takes a list of requirement strings")
        return Step(kind, packages=tuple(value), no_deps=bool(raw.get("no_deps", False)), only=only)
    if kind == "patch" and value not in PATCHES:
        raise SpecError(f"{where}: unknown patch {value!r} (known: {', '.join(PATCHES)})")
    if kind in ("patch", "mmcv"):
        return Step(kind, target=str(value), only=only)
    if kind == "self":
        return Step(kind, extras=tuple(raw.get("extras", ())), only=only)
    return Step(kind, only=only)


def parse_specs(text: str) -> Specs:
    data = tomllib.loads(text)
    t = data.get("torch", {})
    try:
        torch = TorchPins(version=t["version"], cpu_index=t.get("cpu_index", ""), cuda_index=t.get("cuda_index", ""))
    except KeyError:
        raise SpecError("[torch] needs a version") from None
    envs = {}
    for name, raw in data.get("envs", {}).items():
        where = f"envs.{name}"
        try:
            steps = tuple(_step(s, f"{where}.steps[{i}]") for i, s in enumerate(raw["steps"]))
            envs[name] = EnvSpec(name=name, summary=raw["summary"], venv=raw["venv"], imports=tuple(raw["imports"]),
                                 steps=steps, constraints=tuple(raw.get("constraints", ())),
                                 kinds=tuple(raw.get("kinds", ())), check=raw.get("check", ""))
        except KeyError as exc:
            raise SpecError(f"{where}: missing {exc.args[0]!r}") from None
    return Specs(torch=torch, envs=envs, digest=hashlib.sha256(text.encode()).hexdigest()[:16])


@cache
def load_specs() -> Specs:
    """The package's specs.toml."""
    return parse_specs(resources.files(__package__).joinpath("specs.toml").read_text(encoding="utf-8"))
