"""Score bands: a reward's label (High / Medium / Low) from a configured map of lower bounds.

A map is {label: lower bound}; a reward gets the label of the highest bound it reaches, and the
lowest band also takes every reward below its own bound (it is open below), so every valid
reward has a band. VLM judges scoring a video get DEFAULT_VIDEO_BANDS unless their config sets
`bands` (their rewards are in [0, 1]); heads, whose scores have their own scale, only configured ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

# High >= 0.7, Medium in [0.3, 0.7), Low < 0.3.
DEFAULT_VIDEO_BANDS: dict[str, float] = {"High": 0.7, "Medium": 0.3, "Low": -math.inf}


def check_bands(bands: Mapping[str, float]) -> dict[str, float]:
    """The map as given, or ValueError naming what is wrong (empty labels, NaN, equal bounds)."""
    for label, bound in bands.items():
        if not label.strip():
            raise ValueError("a band label must not be empty")
        if math.isnan(bound) or bound == math.inf:
            raise ValueError(f"band {label!r}: the lower bound must be a number or -inf, got {bound}")
    bounds = list(bands.values())
    if len(set(bounds)) != len(bounds):
        raise ValueError(f"two bands share a lower bound: {dict(bands)}")
    return dict(bands)


def band_of(reward: float, bands: Mapping[str, float]) -> str | None:
    """The label for `reward` (None when the map is empty)."""
    ordered = sorted(bands.items(), key=lambda item: item[1], reverse=True)
    for label, bound in ordered:
        if reward >= bound:
            return label
    return ordered[-1][0] if ordered else None
