"""The exception tree: every exception class the package defines derives from JudgeGatewayError
(through the branch that says what it means), except the two raised under interpreters that
cannot import the package, and keeps the builtin base existing callers catch."""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil

import pytest

import judge_gateway
from judge_gateway import exceptions as ex

# Stdlib-only modules loaded by path in worker processes (see exceptions.py's docstring).
OUTSIDE_THE_TREE = {"judge_gateway.workers.framing.ProtocolError", "judge_gateway.latent_worker.LoadError"}


def _package_exceptions() -> list[type[BaseException]]:
    found = []
    for info in pkgutil.walk_packages(judge_gateway.__path__, "judge_gateway."):
        if info.name.endswith("__main__"):  # importing it runs the CLI
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # a module of an optional extra (torch, ray, ...) absent from this venv
            continue
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, BaseException)
                    and value.__module__ == info.name):
                found.append(value)
    return found


def test_every_package_exception_is_in_the_tree():
    classes = _package_exceptions()
    assert len(classes) >= 30  # the walk found the package's modules, not an empty list
    outside = sorted(f"{c.__module__}.{c.__qualname__}" for c in classes
                     if not issubclass(c, ex.JudgeGatewayError) and not c.__name__.startswith("_"))
    assert set(outside) <= OUTSIDE_THE_TREE, outside


@pytest.mark.parametrize(("name", "branch", "builtin"), [
    ("judge_gateway.media.MediaError", ex.InvalidInput, ValueError),
    ("judge_gateway.json_body.JSONBodyError", ex.InvalidInput, ValueError),
    ("judge_gateway.gateway.UnknownJudgeError", ex.InvalidInput, ValueError),
    ("judge_gateway.config.ConfigError", ex.ConfigurationError, ValueError),
    ("judge_gateway.prompts.TemplateError", ex.ConfigurationError, ValueError),
    ("judge_gateway.aggregation_profiles.AggregationProfileError", ex.ConfigurationError, ValueError),
    ("judge_gateway.work_queue.BacklogFull", ex.Overloaded, RuntimeError),
    ("judge_gateway.server.admission.Refused", ex.Overloaded, RuntimeError),
    ("judge_gateway.backends.BackendTimeout", ex.Unavailable, RuntimeError),
    ("judge_gateway.store.StoreError", ex.Unavailable, RuntimeError),
    ("judge_gateway.heads.supervisor.HeadError", ex.Unavailable, RuntimeError),
    ("judge_gateway.parsers.ParseError", ex.ScoringFailed, ValueError),
    ("judge_gateway.judges.base.JudgeFailure", ex.ScoringFailed, Exception),
])
def test_branch_and_builtin_base(name, branch, builtin):
    module, _, attr = name.rpartition(".")
    cls = getattr(importlib.import_module(module), attr)
    assert issubclass(cls, branch) and issubclass(cls, builtin)


def test_the_tree_is_exported_from_the_package():
    for name in ("JudgeGatewayError", "InvalidInput", "ConfigurationError", "Overloaded", "Unavailable",
                 "ScoringFailed"):
        assert getattr(judge_gateway, name) is getattr(ex, name)
    assert issubclass(judge_gateway.RewardAPIError, ex.JudgeGatewayError)


def test_one_version_string():
    from judge_gateway._version import __version__
    from judge_gateway.server import app

    assert judge_gateway.__version__ == __version__
    assert app.__version__ is __version__  # the OpenAPI document's version
    assert importlib.metadata.version("judge-gateway") == __version__  # pyproject reads it
