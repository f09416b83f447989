"""The worker's head factory: a head kind's typed options and its concrete HeadModel, as the kind
table names them (`config.kinds`: `options`, `head_model`).

The gateway validated the options at config load and sends the fields the config set; the worker
rebuilds the same model from them here (`head_options`), so a head reads typed options with the
defaults the config models declare, never a second set of its own.

It lives on the worker side beside its caller (worker.py), not in `models/`: the concrete heads import
`HeadModel` from there, and a base module that imported them back would make a circle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ..config.head_options import HeadOptions
from ..config.kinds import HEAD_KIND_OPTIONS, KINDS, KindSpec, import_named
from .models.base import HeadLoadError, HeadModel


def _head_spec(kind: str) -> KindSpec:
    spec = KINDS.get(kind)
    if spec is None or spec.head_model is None:
        raise HeadLoadError(f"unknown head kind {kind!r}")
    return spec


def head_options(kind: str, options: Mapping[str, Any]) -> HeadOptions:
    """The kind's typed options from their JSON (the init message's `options`)."""
    _head_spec(kind)
    try:
        return HEAD_KIND_OPTIONS[kind].model_validate(dict(options))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'options'}: {e['msg']}" for e in exc.errors())
        raise HeadLoadError(f"{kind}: invalid options ({problems})") from None


def build_head(kind: str, options: HeadOptions | Mapping[str, Any]) -> HeadModel:
    """The kind's head over its options (typed, or their JSON: validated first)."""
    spec = _head_spec(kind)
    typed = options if isinstance(options, HeadOptions) else head_options(kind, options)
    # Imported now: only the worker process loads torch / onnxruntime.
    return import_named(spec.head_model)(kind, typed)
