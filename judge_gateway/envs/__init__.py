"""The Python environments judge-gateway builds for its workers and servers: specs kept as data
(specs.toml), the torch build for this machine (torch_build.py), and the builder (builder.py),
shared by `judge-gateway prepare`, `judge-gateway env build` and the test command's set-up."""

from .builder import BuildResult, EnvBuilder, EnvState, inspect_env, reusable, venv_python
from .spec import EnvBuildError, EnvSpec, Specs, SpecError, load_specs
from .torch_build import TorchChoice, choose_torch

__all__ = ["BuildResult", "EnvBuildError", "EnvBuilder", "EnvSpec", "EnvState", "SpecError", "Specs", "TorchChoice",
           "choose_torch", "inspect_env", "load_specs", "reusable", "venv_python"]
