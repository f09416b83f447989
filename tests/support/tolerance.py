"""Equality bounds for numbers two computations of one model give, derived from the dtype and the
magnitude of what was summed, never a fixed absolute number.

Two float32 computations of the same model (a batch of 6 against a batch of 1, our batching against
a peer's, another BLAS path) agree to a few units of float32's spacing at the magnitude of the
terms they sum, not at the magnitude of the result: a cosine near 0 is a sum of terms of size ~1,
a PickScore logit of terms of size exp(logit_scale). `assert_close` takes that `scale` (default:
the larger of the two values), allows `steps` spacings of the dtype at it (float32: 2^-23 x scale;
bfloat16: 2^-7 x scale), prints the largest observed difference in those units, and fails only
past the bound. A reduction of n float32 terms in another order differs by up to ~n spacings in
the worst case and ~sqrt(n) in practice: the default, 256 spacings (1.5e-5 relative), sits above
what the tests observe (printed) and far below any real difference (a wrong scale, a wrong
preprocessing: 1e-3 and more).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

SPACING = {"float32": 2.0 ** -23, "bfloat16": 2.0 ** -7, "float16": 2.0 ** -10, "float64": 2.0 ** -52}


def steps_apart(a: Sequence[float], b: Sequence[float], *, dtype: str = "float32",
                scale: float | None = None) -> float:
    """The largest |a - b| in units of the dtype's spacing at the magnitude (`scale`, else max |a|, |b|)."""
    assert len(a) == len(b), (len(a), len(b))
    worst = 0.0
    for x, y in zip(a, b):
        magnitude = scale if scale is not None else max(abs(x), abs(y))
        if magnitude == 0.0:
            if x != y:
                return math.inf
            continue
        worst = max(worst, abs(x - y) / (SPACING[dtype] * magnitude))
    return worst


def assert_close(a: Sequence[float], b: Sequence[float], *, what: str, dtype: str = "float32",
                 scale: float | None = None, steps: float = 256.0) -> float:
    """Assert `a` and `b` agree within `steps` spacings of `dtype` at `scale`; print and return the
    observed maximum (in spacings)."""
    a, b = [float(x) for x in a], [float(y) for y in b]
    observed = steps_apart(a, b, dtype=dtype, scale=scale)
    print(f"[tolerance] {what}: max {observed:.1f} {dtype} spacings apart (bound {steps:g})", file=sys.stderr)
    assert observed <= steps, (what, a, b, observed)
    return observed
