"""The statistics of the watch, on plain arrays (numpy only; the gateway's venv has no scipy).

Each function states its formula; tests/unit/test_watch_stats.py checks them against values
scipy.stats computes for the same inputs. A figure that has no value for its input (fewer than
two samples, a constant series) is None, never a number standing in for one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def average_ranks(x: Sequence[float] | np.ndarray) -> np.ndarray:
    """1-based ranks; tied values share the mean of their positions (scipy.stats.rankdata 'average')."""
    values = np.asarray(x, dtype=float)
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])  # first position of each tie group
    ends = np.r_[starts[1:], len(values)]  # one past its last
    group = np.cumsum(np.r_[True, ordered[1:] != ordered[:-1]]) - 1
    ranks = np.empty(len(values))
    ranks[order] = ((starts + ends + 1) / 2.0)[group]
    return ranks


def _tie_term(ranks: np.ndarray) -> float:
    """sum(t^3 - t) over the tie groups of a rank vector."""
    _, counts = np.unique(ranks, return_counts=True)
    return float(np.sum(counts.astype(float) ** 3 - counts))


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's rank correlation: Pearson's r of the average ranks. None below 3 pairs or when
    either side is constant."""
    if len(a) != len(b):
        raise ValueError(f"spearman needs paired values ({len(a)} != {len(b)})")
    if len(a) < 3:
        return None
    ra, rb = average_ranks(a), average_ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])


@dataclass(frozen=True)
class RankShift:
    """How `later` sits against `earlier`: auc = P(a later value beats an earlier one), ties 1/2
    (the Mann-Whitney U over n_later * n_earlier); z = (U - n1 n2 / 2) / sd(U) with the tie
    correction, no continuity correction; 0 when every value is equal."""

    auc: float
    z: float
    n_later: int
    n_earlier: int


def rank_shift(later: Sequence[float], earlier: Sequence[float]) -> RankShift | None:
    n1, n2 = len(later), len(earlier)
    if n1 == 0 or n2 == 0:
        return None
    ranks = average_ranks(np.r_[np.asarray(later, dtype=float), np.asarray(earlier, dtype=float)])
    u = float(ranks[:n1].sum()) - n1 * (n1 + 1) / 2.0
    n = n1 + n2
    variance = n1 * n2 / 12.0 * ((n + 1) - _tie_term(ranks) / (n * (n - 1))) if n > 1 else 0.0
    z = (u - n1 * n2 / 2.0) / math.sqrt(variance) if variance > 0 else 0.0
    return RankShift(auc=u / (n1 * n2), z=z, n_later=n1, n_earlier=n2)


def kolmogorov_sf(x: float) -> float:
    """P(K > x) of the Kolmogorov distribution: 2 sum_k (-1)^(k-1) exp(-2 k^2 x^2) (scipy's kstwobign.sf)."""
    if x <= 0:
        return 1.0
    if x < 0.2:  # the series converges slowly here and the value is 1 to double precision
        return 1.0
    total = 0.0
    for k in range(1, 101):
        term = (-1) ** (k - 1) * math.exp(-2.0 * k * k * x * x)
        total += term
        if abs(term) < 1e-17:
            break
    return min(1.0, max(0.0, 2.0 * total))


@dataclass(frozen=True)
class KSResult:
    """Two-sample Kolmogorov-Smirnov: d = max |F_a - F_b|, p = kolmogorov_sf(d * sqrt(n m / (n + m))),
    the limiting distribution of the statistic (scipy.stats.kstwobign; scipy's ks_2samp uses the
    finite-n kstwo with n = round(n m / (n + m)), which differs by a few hundredths at small n)."""

    d: float
    p: float


def ks_2samp(a: Sequence[float], b: Sequence[float]) -> KSResult | None:
    if len(a) == 0 or len(b) == 0:
        return None
    xa, xb = np.sort(np.asarray(a, dtype=float)), np.sort(np.asarray(b, dtype=float))
    grid = np.r_[xa, xb]
    fa = np.searchsorted(xa, grid, side="right") / len(xa)
    fb = np.searchsorted(xb, grid, side="right") / len(xb)
    d = float(np.max(np.abs(fa - fb)))
    en = len(xa) * len(xb) / (len(xa) + len(xb))
    return KSResult(d=d, p=kolmogorov_sf(d * math.sqrt(en)))


def wasserstein1(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Earth mover's distance between the two empirical distributions: the integral of
    |F_a(x) - F_b(x)| dx (scipy.stats.wasserstein_distance), in the scores' own units."""
    if len(a) == 0 or len(b) == 0:
        return None
    xa, xb = np.sort(np.asarray(a, dtype=float)), np.sort(np.asarray(b, dtype=float))
    grid = np.sort(np.r_[xa, xb])
    widths = np.diff(grid)
    fa = np.searchsorted(xa, grid[:-1], side="right") / len(xa)
    fb = np.searchsorted(xb, grid[:-1], side="right") / len(xb)
    return float(np.sum(np.abs(fa - fb) * widths))


def two_proportion_z(k1: int, n1: int, k0: int, n0: int) -> float | None:
    """z of p1 = k1/n1 against p0 = k0/n0 with the pooled proportion; None without samples, 0
    when the pooled proportion is 0 or 1 (nothing varies)."""
    if n1 == 0 or n0 == 0:
        return None
    pooled = (k1 + k0) / (n1 + n0)
    if pooled in (0.0, 1.0):
        return 0.0
    return (k1 / n1 - k0 / n0) / math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n0))


SPEARMAN_VARIANCE = 1.06  # var(atanh rho) ~ 1.06 / (n - 3) for Spearman's rho (Fieller, Hartley and Pearson)
_CLIP = 0.999999  # atanh(+-1) is infinite: a perfect correlation counts as this one


def _fisher(r: float) -> float:
    return math.atanh(max(-_CLIP, min(_CLIP, r)))


def correlation_z(r: float, n: int) -> float | None:
    """z of Spearman's rho against 0: atanh(r) / sqrt(1.06 / (n - 3)); None below 4 pairs."""
    if n < 4:
        return None
    return _fisher(r) / math.sqrt(SPEARMAN_VARIANCE / (n - 3))


def correlation_drop_z(r_before: float, n_before: int, r_after: float, n_after: int) -> float | None:
    """z of a fall in Spearman's rho: (atanh r_before - atanh r_after) / sqrt(1.06/(n_before-3) +
    1.06/(n_after-3)); None below 4 pairs on either side."""
    if n_before < 4 or n_after < 4:
        return None
    return (_fisher(r_before) - _fisher(r_after)) / math.sqrt(
        SPEARMAN_VARIANCE / (n_before - 3) + SPEARMAN_VARIANCE / (n_after - 3))


@dataclass(frozen=True)
class Summary:
    """Mean and the 10th, 50th and 90th percentiles (linear interpolation, numpy's default)."""

    mean: float
    q10: float
    q50: float
    q90: float


def summarize(values: Sequence[float]) -> Summary | None:
    if len(values) == 0:
        return None
    x = np.asarray(values, dtype=float)
    q10, q50, q90 = np.quantile(x, [0.1, 0.5, 0.9])
    return Summary(mean=float(x.mean()), q10=float(q10), q50=float(q50), q90=float(q90))


def percentile_rank(sorted_values: Sequence[float], x: float) -> float | None:
    """The share of `sorted_values` below x, ties counting half: where x sits in a reference."""
    n = len(sorted_values)
    if n == 0:
        return None
    ref = np.asarray(sorted_values, dtype=float)
    below = int(np.searchsorted(ref, x, side="left"))
    at_or_below = int(np.searchsorted(ref, x, side="right"))
    return (below + 0.5 * (at_or_below - below)) / n
