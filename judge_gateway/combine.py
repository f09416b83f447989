"""Combine per-judge rewards into one per sample, and transform them within GRPO groups."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

from .config import CombineConfig
from .schema import JudgeScore


def combine_sample(scores: Mapping[str, JudgeScore], weights: Mapping[str, float],
                   cfg: CombineConfig) -> tuple[float | None, bool, list[str]]:
    """(combined reward or None, valid, invalid judge names) for one sample."""
    invalid = [name for name, s in scores.items() if not s.valid]
    terms: list[tuple[float, float]] = []
    for name, score in scores.items():
        weight = weights[name]
        if score.valid:
            assert score.reward is not None
            terms.append((weight, score.reward))
        elif cfg.on_invalid == "invalidate":
            return None, False, invalid
        elif cfg.on_invalid == "fill":
            terms.append((weight, cfg.fill_value))
        # "skip": leave it out
    if not terms:
        return None, False, invalid
    if cfg.policy == "sum":
        value = sum(w * r for w, r in terms)
    else:
        total = sum(w for w, _ in terms)
        if total == 0:
            return None, False, invalid
        value = sum(w * r for w, r in terms) / total
    return value, not invalid, invalid


def _ranks(values: Sequence[float]) -> list[float]:
    """Average ranks (0-based), ties share the mean of their positions."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        mean_rank = (i + j) / 2
        for k in range(i, j + 1):
            ranks[order[k]] = mean_rank
        i = j + 1
    return ranks


def _ordinal_ranks(values: Sequence[float]) -> list[int]:
    """0-based ordinal ranks: ties ranked by position (a stable argsort of an argsort)."""
    order = sorted(range(len(values)), key=lambda i: values[i])  # sorted() is stable
    ranks = [0] * len(values)
    for rank, i in enumerate(order):
        ranks[i] = rank
    return ranks


def group_transform(rewards: Sequence[float | None], group_ids: Sequence[str | None],
                    kind: str) -> list[float | None]:
    """Transform each reward within its group:

    - `rank`: average rank / (n - 1), in [0, 1]; ties share their mean rank; a group of one 0.5.
    - `ordinal_rank`: ordinal rank / n, in [0, (n-1)/n]; ties ranked by position; a group of
      one 0.0. Flow-Factory's PickScore_Rank (`scores.argsort().argsort() / n`); torch's
      argsort keeps ties in position order on the CPU up to 16 values, beyond that (or on a
      GPU) its tie order is unspecified.
    - `zscore`: (x - mean) / std (population std); a group of one, or one without spread, 0.0.

    Samples without a reward (invalid) or without a group id get None and do not count in
    their group's statistics (n is the number of valid members)."""
    out: list[float | None] = [None] * len(rewards)
    if kind == "none":
        return out
    groups: dict[str, list[int]] = defaultdict(list)
    for i, (r, g) in enumerate(zip(rewards, group_ids)):
        if r is not None and g is not None:
            groups[g].append(i)
    for members in groups.values():
        vals = [rewards[i] for i in members]
        assert all(v is not None for v in vals)
        fvals = [float(v) for v in vals]  # type: ignore[arg-type]
        n = len(fvals)
        if kind == "rank":
            ranks = _ranks(fvals)
            for i, r in zip(members, ranks):
                out[i] = r / (n - 1) if n > 1 else 0.5
        elif kind == "ordinal_rank":
            for i, r in zip(members, _ordinal_ranks(fvals)):
                out[i] = r / n
        elif kind == "zscore":
            mean = sum(fvals) / n
            std = math.sqrt(sum((v - mean) ** 2 for v in fvals) / n)
            for i, v in zip(members, fvals):
                out[i] = (v - mean) / std if std > 1e-12 else 0.0
        else:
            raise ValueError(f"unknown group transform {kind!r}")
    return out
