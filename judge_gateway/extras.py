"""The optional parts of judge-gateway and the pip extras that install them.

A command that needs an extra checks for it before it does any work, so a missing one is a
one-line error that names the install command, never an ImportError traceback halfway through.
"""

from __future__ import annotations

import importlib.util

from .exceptions import Unavailable

# extra -> the top-level modules it provides that the code imports.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "browse": ("jinja2", "matplotlib"),
    "tune": ("matplotlib",),
    "ocr": ("rapidocr", "onnxruntime"),
    "redis": ("redis",),
    "ray": ("ray",),
}


class MissingExtraError(Unavailable, ImportError):
    """A feature's optional dependencies are not installed; the message names the pip extra."""

    def __init__(self, feature: str, extra: str, missing: list[str]) -> None:
        super().__init__(f"{feature} needs the `{extra}` extra (missing: {', '.join(missing)}): "
                         f"pip install 'judge-gateway[{extra}]'")
        self.feature = feature
        self.extra = extra
        self.missing = missing


def missing_modules(modules: tuple[str, ...]) -> list[str]:
    """Those of `modules` this interpreter cannot import (found without importing them)."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def require_extra(extra: str, feature: str, modules: tuple[str, ...] | None = None) -> None:
    """Raise MissingExtraError unless the extra's modules (or the given subset) are installed."""
    missing = missing_modules(modules if modules is not None else EXTRA_MODULES[extra])
    if missing:
        raise MissingExtraError(feature, extra, missing)


def has_modules(*modules: str) -> bool:
    return not missing_modules(modules)
