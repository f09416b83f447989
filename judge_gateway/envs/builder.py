"""Build one environment from its spec: a venv, its steps through pip, the check that it imports.

A venv that already imports what its spec needs (and holds the torch build asked for) is reused
without running pip: a re-run takes seconds. `force` runs every step again. pip is quiet unless
the output is a terminal (then its own progress bars show); every step logs its time.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .mmcv import install_mmcv, mmcv_plan
from .self_install import self_install, self_install_plan, source_checkout
from .share import ShareResult, share_identical_files, sibling_venvs
from .spec import EnvBuildError, EnvSpec, Specs, Step, load_specs
from .torch_build import TorchChoice

STAMP = ".judge-gateway-env.json"
CONSTRAINTS = "judge-gateway-constraints.txt"  # written first into every venv the builder builds
PATCH_SCRIPT = Path(__file__).with_name("patch_torchvision.py")
# pip's find-links folders on some machines make every call print one of these per folder entry.
_PIP_NOISE = ("Location", "is ignored")

Log = Callable[[str], None]


@dataclass
class EnvState:
    """What `inspect` found in a venv."""

    python: Path
    exists: bool
    imports_ok: bool = False
    reason: str = ""  # why it is not usable as it is
    torch_version: str | None = None
    torch_cuda: str | None = None  # torch.version.cuda: None for a CPU build

    @property
    def torch_build(self) -> str | None:
        if self.torch_version is None:
            return None
        return "cuda" if self.torch_cuda else "cpu"


@dataclass
class BuildResult:
    name: str
    venv: Path
    action: str  # "reused" | "built" | "planned"
    seconds: float = 0.0
    torch: str = ""  # e.g. "2.13.0+cpu (cpu)"
    step_seconds: list[tuple[str, float]] = field(default_factory=list)


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


_INSPECT = """
import json, sys
out = {"ok": True, "error": ""}
try:
    exec(sys.argv[1])
except BaseException as exc:
    out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
try:
    import torch
    out["torch"] = [torch.__version__, torch.version.cuda]
except BaseException:
    pass
print("\\n" + json.dumps(out))
"""


def inspect_env(spec: EnvSpec, venv: Path, timeout_s: float = 300) -> EnvState:
    """Does the venv import what the spec needs, and which torch does it hold?"""
    python = venv_python(venv)
    if not python.exists():
        return EnvState(python, exists=False, reason=f"no venv at {venv}")
    env = {**os.environ}
    env.pop("PYTHONPATH", None)  # the venv alone must import it, as a worker does
    try:
        done = subprocess.run([str(python), "-c", _INSPECT, spec.check_code()], capture_output=True, text=True,
                              timeout=timeout_s, env=env, cwd="/", check=False)
    except subprocess.TimeoutExpired:
        return EnvState(python, exists=True, reason=f"importing {', '.join(spec.imports)} took over {timeout_s:g} s")
    except OSError as exc:
        return EnvState(python, exists=True, reason=f"{python} does not run: {exc}")
    try:
        out = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return EnvState(python, exists=True, reason=f"{python} does not run: {' / '.join(tail) or done.returncode}")
    torch = out.get("torch") or [None, None]
    return EnvState(python, exists=True, imports_ok=out["ok"], reason=out["error"],
                    torch_version=torch[0], torch_cuda=torch[1])


def reusable(spec: EnvSpec, state: EnvState, choice: TorchChoice) -> tuple[bool, str]:
    """(reuse it as it is, why not)."""
    if not state.exists:
        return False, state.reason
    if not state.imports_ok:
        return False, f"does not import what it needs ({state.reason})"
    if spec.uses_torch(choice.build) and state.torch_build and state.torch_build != choice.build:
        return False, f"holds torch {state.torch_version} ({state.torch_build} build), {choice.build} asked for"
    return True, ""


class EnvBuilder:
    """Builds environments of the specs for one torch choice."""

    def __init__(self, choice: TorchChoice, *, specs: Specs | None = None, base_python: str | None = None,
                 wheel_cache: Path | None = None, log: Log | None = None, verbose_pip: bool | None = None,
                 share_files: bool = True) -> None:
        self.specs = specs or load_specs()
        self.choice = choice
        self.base_python = base_python or os.environ.get("JG_PYTHON") or getattr(sys, "_base_executable",
                                                                                 sys.executable)
        self.wheel_cache = wheel_cache or default_wheel_cache()
        self.log = log or (lambda msg: print(msg, flush=True))
        self.verbose_pip = sys.stdout.isatty() if verbose_pip is None else verbose_pip
        # Files identical to a sibling venv's become hard links to one copy (share.py), after the
        # torch step (the bulk, early: it lowers the peak of environments built side by side) and
        # at the end.
        self.share_files = share_files

    # -- planning (--dry-run) ------------------------------------------------------------------
    def constraints(self, spec: EnvSpec) -> list[str]:
        pins = list(spec.constraints)
        if spec.uses_torch(self.choice.build):
            pins.insert(0, self.choice.requirement)
        return pins

    def plan(self, spec: EnvSpec, venv: Path) -> list[str]:
        """What `build` would run, one line per step (pip command lines as they would be given)."""
        lines = [f"venv {venv} (python: {self.base_python})"]
        pins = self.constraints(spec)
        if pins:
            lines.append(f"constraints: {' '.join(pins)}")
        for step in spec.steps_for(self.choice.build):
            if step.kind == "torch":
                lines.append("pip install " + " ".join([*self.choice.index_args(), self.choice.requirement])
                             + f"   # {self.choice.build} build")
            elif step.kind == "pip":
                lines.append("pip install " + " ".join(["-c constraints", *(["--no-deps"] if step.no_deps else []),
                                                        *self._index_for(spec), *step.packages]))
            elif step.kind == "self":
                lines.append("pip install -c constraints " + self_install_plan(step.extras))
            elif step.kind == "remove":
                lines.append("pip uninstall -y " + " ".join(step.packages))
            elif step.kind == "patch":
                lines.append(f"python {PATCH_SCRIPT.name}   # {step.target} importable without its C extension")
            else:
                lines.append(mmcv_plan(step.target, self.choice, self.wheel_cache))
        lines.append(f"check: {spec.check_code()}")
        return lines

    def _index_for(self, spec: EnvSpec) -> list[str]:
        # torchvision (and anything built against torch) comes from the torch build's index too.
        return self.choice.index_args() if spec.uses_torch(self.choice.build) else []

    # -- building ------------------------------------------------------------------------------
    def ensure(self, name: str, venv: Path | None = None, *, force: bool = False) -> BuildResult:
        """The environment `name` at `venv` (default: the spec's folder), built or reused."""
        spec = self.specs.env(name)
        venv = Path(venv or spec.venv).absolute()
        started = time.monotonic()
        state = inspect_env(spec, venv)
        ok, why = reusable(spec, state, self.choice)
        if ok and not force:
            self.log(f"[env {name}] {venv} is ready ({_torch_text(state)}); nothing to do")
            return BuildResult(name, venv, "reused", time.monotonic() - started, _torch_text(state))
        self.log(f"[env {name}] building {venv}: {why if not ok else '--force'}")
        self.log(f"[env {name}] {self.choice.describe()}")
        result = BuildResult(name, venv, "built")
        if not venv_python(venv).exists():
            if not Path(self.base_python).exists():
                raise EnvBuildError(f"environment {name!r}: no interpreter at {self.base_python} to create {venv} "
                                    "with (JG_PYTHON names another)")
            self._run(name, [self.base_python, "-m", "venv", str(venv)], "create the venv")
        constraints = venv / CONSTRAINTS
        constraints.write_text("".join(f"{pin}\n" for pin in self.constraints(spec)))
        steps = spec.steps_for(self.choice.build)
        shared = ShareResult()
        for i, step in enumerate(steps, 1):
            t0 = time.monotonic()
            self.log(f"[env {name}] step {i}/{len(steps)}: {step.describe()}")
            self._step(name, spec, venv, step, constraints, state)
            result.step_seconds.append((step.describe(), time.monotonic() - t0))
            self.log(f"[env {name}] step {i}/{len(steps)} took {time.monotonic() - t0:.0f} s")
            if step.kind == "torch" and self.share_files:
                shared = _add(shared, share_identical_files(venv, sibling_venvs(venv, CONSTRAINTS)))
        if self.share_files:
            t0 = time.monotonic()
            shared = _add(shared, share_identical_files(venv, sibling_venvs(venv, CONSTRAINTS)))
            self._log_shared(name, shared, time.monotonic() - t0)
        final = inspect_env(spec, venv)
        ok, why = reusable(spec, final, self.choice)
        if not ok:
            raise EnvBuildError(f"environment {name!r} at {venv} is still not usable after its steps: {why}")
        result.seconds = time.monotonic() - started
        result.torch = _torch_text(final)
        (venv / STAMP).write_text(json.dumps({
            "env": name, "spec_digest": self.specs.digest, "torch_build": self.choice.build,
            "torch": final.torch_version, "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(result.seconds, 1)}, indent=2) + "\n")
        self.log(f"[env {name}] ready in {result.seconds:.0f} s ({result.torch})")
        return result

    def _log_shared(self, name: str, shared: ShareResult, seconds: float) -> None:
        if shared.unavailable:
            self.log(f"[env {name}] files are not shared with sibling venvs: the filesystem refused a hard link "
                     f"({shared.unavailable})")
        elif shared.files:
            self.log(f"[env {name}] {shared.files} files ({shared.bytes / 1e9:.2f} GB) are hard links to identical "
                     f"files of sibling venvs, one copy on disk ({seconds:.0f} s)")

    def _step(self, name: str, spec: EnvSpec, venv: Path, step: Step, constraints: Path, state: EnvState) -> None:
        python = str(venv_python(venv))
        pip = [python, "-m", "pip"]
        quiet = [] if self.verbose_pip else ["-q"]
        # pip compiles every module's bytecode at install (kept: where PYTHONDONTWRITEBYTECODE is
        # set, as on many CI machines, nothing imported would ever be cached, and every worker start
        # compiled torch's modules from source: tried, the test command took about twice as long).
        install = [*pip, "install", *quiet]
        if step.kind == "torch":
            args = [*install, *self.choice.index_args(), self.choice.requirement]
            if state.torch_build and state.torch_build != self.choice.build:
                args.insert(len(install), "--force-reinstall")  # same version, other build: pip would keep it
            self._run(name, args, "install torch")
        elif step.kind == "pip":
            self._run(name, [*install, "-c", str(constraints), *(["--no-deps"] if step.no_deps else []),
                             *self._index_for(spec), *step.packages], "pip install")
        elif step.kind == "self":
            installs, what = self_install(step.extras, self.wheel_cache)
            self.log(f"[env {name}]   {what}")
            with _checkout_lock():
                for args in installs:
                    self._run(name, [*install, "-c", str(constraints), *self._index_for(spec), *args],
                              "install judge-gateway")
        elif step.kind == "remove":
            self._run(name, [*pip, "uninstall", "-q", "-y", *step.packages], "uninstall")
        elif step.kind == "patch":
            self._run(name, [python, str(PATCH_SCRIPT), f"env {name}"], "patch torchvision")
        else:
            install_mmcv(venv, step.target, self.choice, self.wheel_cache, constraints,
                         run=lambda args, what, env=None: self._run(name, args, what, env=env), log=self.log,
                         tag=f"env {name}", quiet=quiet)

    def _run(self, name: str, args: list[str], what: str, env: dict[str, str] | None = None) -> None:
        run_env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **(env or {})}
        run_env.pop("PYTHONPATH", None)  # install into the venv, not into what PYTHONPATH points at
        if self.verbose_pip:
            code = subprocess.run(args, env=run_env, check=False).returncode
            tail = ""
        else:
            done = subprocess.run(args, env=run_env, capture_output=True, text=True, check=False)
            code = done.returncode
            lines = [ln for ln in (done.stdout + done.stderr).splitlines()
                     if ln.strip() and not all(n in ln for n in _PIP_NOISE)]
            for line in lines if code == 0 else []:
                self.log(f"[env {name}]   {line}")
            tail = "\n".join(lines[-30:])
        if code != 0:
            raise EnvBuildError(f"environment {name!r}: {what} failed (exit {code}): {' '.join(args)}"
                                + (f"\n{tail}" if tail else ""))


@contextlib.contextmanager
def _checkout_lock() -> Iterator[None]:
    """One editable install of the checkout at a time: each writes the checkout's egg-info, and
    environments built side by side (the test command's lanes) would race on it."""
    root = source_checkout()
    if root is None:
        yield
        return
    tag = hashlib.sha256(str(root).encode()).hexdigest()[:12]
    with open(Path(tempfile.gettempdir()) / f"judge-gateway-editable-{tag}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _add(a: ShareResult, b: ShareResult) -> ShareResult:
    return ShareResult(a.files + b.files, a.bytes + b.bytes, b.unavailable or a.unavailable)


def _torch_text(state: EnvState) -> str:
    if state.torch_version is None:
        return "no torch"
    return f"torch {state.torch_version}, {state.torch_build} build" + (
        f" (CUDA {state.torch_cuda})" if state.torch_cuda else "")


def default_wheel_cache() -> Path:
    """Where built wheels (mmcv) are kept: $JG_WHEEL_CACHE, else the user cache."""
    if os.environ.get("JG_WHEEL_CACHE"):
        return Path(os.environ["JG_WHEEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "judge-gateway" / "wheels"
