"""Worker side: import a brought class by `module:Name`, and validate its options with the model it
declares. Every failure is a HeadLoadError whose message says what to fix: the judge is then not
ready with that reason (GET /readyz, /v1/judges), and the other judges serve."""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from ..models.base import HeadLoadError


def import_class(ref: str, pythonpath: Sequence[str] = ()) -> type:
    """The class `ref` (`package.module:Name`) names, imported with `pythonpath` first on sys.path."""
    for path in reversed(list(pythonpath)):
        if path not in sys.path:
            sys.path.insert(0, path)
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        where = f" (pythonpath: {', '.join(pythonpath)})" if pythonpath else ""
        # The last frame of a failing import inside the module says where it broke.
        frames = traceback.extract_tb(exc.__traceback__)
        at = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames and not isinstance(exc, ModuleNotFoundError) else ""
        raise HeadLoadError(f"cannot import {module_name!r} for {ref!r} under {sys.executable}{where}: "
                            f"{type(exc).__name__}: {exc}{at}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise HeadLoadError(f"{module_name!r} ({getattr(module, '__file__', '?')}) has no {attr!r}")
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise HeadLoadError(f"{ref!r} is a {type(obj).__name__}, not a class")
    return obj


def validated_options(cls: type, params: dict[str, Any]) -> Any:
    """`params` validated by the class's `Options` pydantic model (the dict itself when it declares
    none); errors name each key as `options.params.KEY`."""
    model = getattr(cls, "Options", None)
    if model is None:
        return params
    if not hasattr(model, "model_validate"):
        raise HeadLoadError(f"{cls.__qualname__}.Options must be a pydantic model, got {model!r}")
    from pydantic import ValidationError

    try:
        return model.model_validate(params)
    except ValidationError as err:
        problems = "; ".join(f"options.params.{'.'.join(map(str, e['loc'])) or '(all)'}: {e['msg']}"
                             for e in err.errors())
        raise HeadLoadError(f"{cls.__qualname__}: {problems}") from None


def class_names(cls: type) -> list[str]:
    """The names of a class and its bases (the peers' base classes are recognised by name, so a
    class works whether its base is the peer's installed one or a stand-in with its signatures)."""
    return [c.__name__ for c in cls.__mro__]


def require_torch(kind: str) -> None:
    """The peers' classes take torch tensors and models: say so plainly when the venv has no torch."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise HeadLoadError(f"{kind} needs torch in the head's venv ({sys.executable}); name a venv "
                            "with it in options.python") from None
