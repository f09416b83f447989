"""The worker's head factory: a head kind's concrete HeadModel, as the kind table names it
(`config.kinds`, its `head_model`).

It lives on the worker side beside its caller (worker.py), not in `models/`: the concrete heads import
`HeadModel` from there, and a base module that imported them back would make a circle.
"""

from __future__ import annotations

from typing import Any

from ..config.kinds import KINDS, import_named
from .models.base import HeadLoadError, HeadModel


def build_head(kind: str, options: dict[str, Any]) -> HeadModel:
    spec = KINDS.get(kind)
    if spec is None or spec.head_model is None:
        raise HeadLoadError(f"unknown head kind {kind!r}")
    # Imported now: only the worker process loads torch / onnxruntime.
    return import_named(spec.head_model)(kind, options)
