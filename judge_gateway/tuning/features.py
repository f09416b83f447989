"""Turn cached scores into feature matrices for the fit: rubric aspects or judges' rewards.

Features are on the reward scale (rubric aspects mapped from the template's scale to [0, 1]),
so a tie threshold means the same thing for every judge. NaN marks an N/A feature. A sample
with no usable score at all (parse error, timeout ...) excludes its pair, counted by error code.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .cache import CachedScore
from .collect import ScoreTable
from .fit import PairSet
from .prefs import PreferenceData


@dataclass
class Features:
    pairs: PairSet
    names: tuple[str, ...]
    pair_ids: list[str]
    excluded: Counter = field(default_factory=Counter)  # reason -> pairs


def _reason(score: CachedScore | None, judge: str) -> str:
    if score is None:
        return f"{judge}: not scored"
    return f"{judge}: {score.error_code or 'invalid'}"


def rubric_features(data: PreferenceData, table: ScoreTable, judge: str, aspects: tuple[str, ...],
                    scale: tuple[float, float], *, missing_invalid: bool = True) -> Features:
    lo, hi = scale
    va, vb, labels, ids = [], [], [], []
    excluded: Counter = Counter()

    def row(score: CachedScore | None) -> list[float] | str:
        if score is None or score.aspects is None:
            return _reason(score, judge)
        if missing_invalid and any(a in score.missing for a in aspects):
            return f"{judge}: aspect missing from the reply"
        out = []
        for a in aspects:
            v = score.aspects.get(a)
            out.append(float("nan") if not isinstance(v, (int, float)) else (float(v) - lo) / (hi - lo))
        return out

    for pair in data.labelled:
        ra, rb = row(table.get((pair.a.key, judge))), row(table.get((pair.b.key, judge)))
        bad = next((r for r in (ra, rb) if isinstance(r, str)), None)
        if bad is not None:
            excluded[bad] += 1
            continue
        va.append(ra), vb.append(rb), labels.append(pair.label), ids.append(pair.id)
    k = len(aspects)
    return Features(PairSet(np.array(va, dtype=float).reshape(-1, k), np.array(vb, dtype=float).reshape(-1, k),
                            labels), aspects, ids, excluded)


def judge_features(data: PreferenceData, table: ScoreTable, judges: tuple[str, ...]) -> Features:
    """One feature per judge: its reward, NaN when invalid (the combine policy decides)."""
    va, vb, labels, ids = [], [], [], []
    for pair in data.labelled:
        rows = []
        for sample in (pair.a, pair.b):
            vals = []
            for j in judges:
                s = table.get((sample.key, j))
                vals.append(float(s.reward) if s is not None and s.valid and s.reward is not None else float("nan"))
            rows.append(vals)
        va.append(rows[0]), vb.append(rows[1]), labels.append(pair.label), ids.append(pair.id)
    k = len(judges)
    invalid: Counter = Counter()
    for pair in data.labelled:
        for sample in (pair.a, pair.b):
            for j in judges:
                s = table.get((sample.key, j))
                if s is None or not s.valid:
                    invalid[_reason(s, j)] += 1
    return Features(PairSet(np.array(va, dtype=float).reshape(-1, k), np.array(vb, dtype=float).reshape(-1, k),
                            labels), judges, ids, invalid)
