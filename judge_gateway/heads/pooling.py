"""Per-frame scores of a video -> one score."""

from __future__ import annotations

import math
from collections.abc import Sequence


def pool_scores(values: Sequence[float], method: str, top_k: int = 3) -> float:
    if not values:
        raise ValueError("no frame scores to pool")
    if any(not math.isfinite(v) for v in values):
        raise ValueError(f"non-finite frame score in {list(values)}")
    if method == "mean":
        return sum(values) / len(values)
    if method == "min":
        return min(values)
    if method == "topk_mean":
        best = sorted(values, reverse=True)[: max(1, top_k)]
        return sum(best) / len(best)
    raise ValueError(f"unknown pooling {method!r}")
