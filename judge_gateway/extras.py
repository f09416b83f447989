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


def install_command(extra: str, python: str | None = None) -> str:
    """The command that adds `extra` to judge-gateway (`python -m pip` of that interpreter, else
    `pip`): from the checkout this package runs from, or from a wheel of it; judge-gateway is not
    on the package index, so `pip install 'judge-gateway[...]'` would find nothing."""
    from .envs.self_install import source_checkout

    pip = f"{python} -m pip" if python else "pip"
    root = source_checkout()
    if root is not None:
        return f"{pip} install -e '{root}[{extra}]'"
    return (f"{pip} install '<the judge-gateway wheel>[{extra}]' (judge-gateway is not on the package index: the "
            "wheel you installed, or `pip wheel --no-deps -w dist .` in a clone)")


class MissingExtraError(Unavailable, ImportError):
    """A feature's optional dependencies are not installed; the message names the pip extra."""

    def __init__(self, feature: str, extra: str, missing: list[str]) -> None:
        super().__init__(f"{feature} needs the `{extra}` extra (missing: {', '.join(missing)}): "
                         f"{install_command(extra)}")
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
