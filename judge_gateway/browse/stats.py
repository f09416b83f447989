"""The numbers behind the browser's charts: invalid rates, A/B agreement, model ranking."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..runs import sample_error_codes
from ..tuning.compare import spearman
from .data import Run, band_of

COMBINED = "combined reward"
# The ranking's interval: a 95% percentile bootstrap of the mean, from this many resamples drawn
# with a fixed seed (the same runs show the same interval on every page load and in the export).
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
_BOOTSTRAP_CHUNK = 2_000_000  # resampled values drawn at once (bounds the memory of a large group)
# Past this many values the bootstrap (resamples x values draws: ~0.1 s at 4000, ~3 s at 100k)
# gives way to the normal interval, clipped to the values' range: there the mean's sampling
# distribution is normal to well under a thousandth of the reward scale (at 10k uniform values the
# two intervals' ends differ by 1e-4), and the clip keeps the bound the bootstrap keeps.
BOOTSTRAP_MAX_VALUES = 4000
Z95 = 1.959964  # two-sided 95% normal quantile
# Without bands, a verdict is pass / fail at this reward.
PASS_AT = 0.5


def valid_rewards(run: Run, judge: str) -> list[float]:
    if judge == COMBINED:  # an invalid sample's skip/fill reward is no valid reward
        return [float(x["reward"]) for x in run.lines if x.get("valid") and x.get("reward") is not None]
    out = []
    for line in run.lines:
        s = (line.get("scores") or {}).get(judge)
        if s and s.get("valid") and s.get("reward") is not None:
            out.append(float(s["reward"]))
    return out


def invalid_by_code(run: Run) -> dict[str, dict[str, float]]:
    """judge -> error code -> share of that judge's samples (sample-level codes under `sample`)."""
    out: dict[str, dict[str, float]] = {}
    for judge in run.judges:
        scored = [s for x in run.lines if (s := (x.get("scores") or {}).get(judge))]
        codes = Counter(s["error"]["code"] for s in scored if not s.get("valid") and s.get("error"))
        out[judge] = {c: n / len(scored) for c, n in codes.most_common()} if scored else {}
    bad = Counter(c for x in run.lines for c in set(sample_error_codes(x))
                  if c in ("bad_input", "request_error") and not (x.get("scores")))
    if bad and run.lines:
        out["sample"] = {c: n / len(run.lines) for c, n in bad.most_common()}
    return out


def _score(line: dict[str, Any], judge: str) -> tuple[float | None, str | None]:
    """(reward, verdict) of one judge (or the combined reward) on one line."""
    if judge == COMBINED:
        r = line.get("reward")
        if r is None or not line.get("valid"):
            return None, None
        return float(r), "pass" if r >= PASS_AT else "fail"
    s = (line.get("scores") or {}).get(judge)
    if not s or not s.get("valid") or s.get("reward") is None:
        return None, None
    r = float(s["reward"])
    return r, band_of(s) or ("pass" if r >= PASS_AT else "fail")


PAIRINGS = ("key", "source", "prompt")


def _occurrence_keys(lines: list[dict[str, Any]], field: str) -> list[tuple[Any, int] | None]:
    """(value of `field`, how many earlier lines had it) per line, in index order: the k-th
    sample of a prompt in A pairs with the k-th sample of that prompt in B (several seeds per
    prompt), never all of them with one."""
    seen: Counter[Any] = Counter()
    out: list[tuple[Any, int] | None] = []
    for line in lines:
        value = line.get(field)
        if value is None or value == "":
            out.append(None)
            continue
        out.append((value, seen[value]))
        seen[value] += 1
    return out


def _by_index(run: Run) -> list[dict[str, Any]]:
    return sorted(run.lines, key=lambda x: x.get("index", 0))


def pairing(a: Run, b: Run) -> str:
    """How samples of two runs correspond: by content key (same media and prompt: two templates
    or models on one set), else by file name or prompt (two checkpoints rendering the same
    prompts): whichever pairs the most."""
    def count(field: str) -> int:
        right = {k for k in _occurrence_keys(_by_index(b), field) if k is not None}
        return sum(1 for k in _occurrence_keys(_by_index(a), field) if k is not None and k in right)
    return max(PAIRINGS, key=lambda f: (count(f), -PAIRINGS.index(f)))


def _counts(run: Run, field: str) -> Counter[Any]:
    return Counter(x.get(field) for x in run.lines if x.get(field) not in (None, ""))


def repeated_values(a: Run, b: Run, field: str) -> int:
    """How many values of `field` (in both runs) more than one sample of a run shares."""
    ca, cb = _counts(a, field), _counts(b, field)
    return sum(1 for v in ca.keys() & cb.keys() if ca[v] > 1 or cb[v] > 1)


def ambiguous_values(a: Run, b: Run, field: str) -> int:
    """How many values of `field` repeat within a run and occur a different number of times in
    A and B: their samples pair by order of index, which may not be the same seed in each."""
    ca, cb = _counts(a, field), _counts(b, field)
    return sum(1 for v in ca.keys() & cb.keys() if (ca[v] > 1 or cb[v] > 1) and ca[v] != cb[v])


@dataclass
class Comparison:
    judge: str
    paired_by: str
    paired: int
    repeated: int  # values of paired_by shared by several samples (paired in index order)
    ambiguous: int  # of those, values whose count differs between A and B
    spearman: float
    mean_a: float
    mean_b: float
    flipped: list[dict[str, Any]]
    rewards_a: list[float]
    rewards_b: list[float]


def common_judges(a: Run, b: Run) -> list[str]:
    return [j for j in a.judges if j in b.judges] + [COMBINED]


def compare_runs(a: Run, b: Run, judge: str) -> Comparison:
    """Per-sample agreement of two runs, samples paired as `pairing` says."""
    by = pairing(a, b)
    lines_a, lines_b = _by_index(a), _by_index(b)
    right = {k: x for k, x in zip(_occurrence_keys(lines_b, by), lines_b) if k is not None}
    ra, rb, flipped = [], [], []
    for left, k in zip(lines_a, _occurrence_keys(lines_a, by)):
        other = right.get(k) if k is not None else None
        if other is None:
            continue
        (xa, va), (xb, vb) = _score(left, judge), _score(other, judge)
        if xa is None or xb is None:
            continue
        ra.append(xa)
        rb.append(xb)
        if va != vb:
            flipped.append({"index_a": left.get("index"), "index_b": other.get("index"),
                            "source": left.get("source", ""), "prompt": left.get("prompt", ""),
                            "verdict_a": va, "verdict_b": vb, "reward_a": xa, "reward_b": xb})
    x, y = np.array(ra), np.array(rb)
    return Comparison(judge=judge, paired_by=by, paired=len(x), repeated=repeated_values(a, b, by),
                      ambiguous=ambiguous_values(a, b, by), spearman=spearman(x, y) if len(x) else math.nan,
                      mean_a=float(x.mean()) if len(x) else math.nan,
                      mean_b=float(y.mean()) if len(y) else math.nan, flipped=flipped,
                      rewards_a=ra, rewards_b=rb)


@dataclass
class RankRow:
    group: str
    n: int
    mean: float
    low: float
    high: float


def origin_field(loaded: list[Run]) -> str:
    """What the samples say made them: `checkpoint`, else `model`, else nothing (`run`)."""
    for name in ("checkpoint", "model"):
        if any(x.get(name) for r in loaded for x in r.lines):
            return name
    return "run"


def mean_interval(values: np.ndarray) -> tuple[float, float]:
    """A 95% percentile bootstrap interval of the mean of `values`: the 2.5% and 97.5% quantiles
    of the means of BOOTSTRAP_RESAMPLES resamples with replacement. Each resampled mean lies
    between the values' minimum and maximum, so the interval respects whatever bounds the reward
    has: a reward in [0, 1] gets an interval in [0, 1] (mean +- 1.96 standard errors gave
    [.., 1.0895] for a few rewards near 1). Above BOOTSTRAP_MAX_VALUES values: the normal interval
    clipped to their range. (nan, nan) for fewer than 2 values: no spread to resample."""
    n = len(values)
    if n < 2:
        return math.nan, math.nan
    lowest, highest = float(values.min()), float(values.max())
    if n > BOOTSTRAP_MAX_VALUES:
        mean, se = float(values.mean()), float(values.std(ddof=1) / math.sqrt(n))
        return max(lowest, mean - Z95 * se), min(highest, mean + Z95 * se)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    means = np.empty(BOOTSTRAP_RESAMPLES)
    chunk = max(1, _BOOTSTRAP_CHUNK // n)
    for start in range(0, BOOTSTRAP_RESAMPLES, chunk):
        k = min(chunk, BOOTSTRAP_RESAMPLES - start)
        means[start:start + k] = values[rng.integers(0, n, size=(k, n))].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    # The quantiles of means within [lowest, highest] are too; min/max only absorb float rounding.
    return max(lowest, float(low)), min(highest, float(high))


def rank_groups(loaded: list[Run], judge: str) -> tuple[str, list[RankRow]]:
    """Mean reward per checkpoint (else per model, else per run) over the given runs, with a
    95% bootstrap interval (mean_interval), best first. Invalid samples are left out (they
    carry no number)."""
    field = origin_field(loaded)
    groups: dict[str, list[float]] = defaultdict(list)
    for run in loaded:
        for line in run.lines:
            reward, _ = _score(line, judge)
            if reward is None:
                continue
            name = run.name if field == "run" else str(line.get(field) or "(none)")
            groups[name].append(reward)
    rows = []
    for name, values in groups.items():
        v = np.array(values, dtype=float)
        low, high = mean_interval(v)
        rows.append(RankRow(group=name, n=len(v), mean=float(v.mean()), low=low, high=high))
    rows.sort(key=lambda r: -r.mean)
    return field, rows
