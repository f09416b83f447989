"""The alarm rules (docs/guides/watch.md says how to read each and what to do). Each rule pools
the last N sealed windows ("recent") and compares them with a reference; a rule without enough
valid scores on either side (alarms.min_samples) is not judged (None), never judged as fine or bad.

- divergence (per training judge and shadow): two references, the N windows before the recent
  ones (a hack that sets in) and the baseline windows (one that creeps in too slowly for N windows
  to show). Holds against either when the training judge rose (rank AUC >= rise_auc and
  Mann-Whitney z >= rise_z) while the shadow rose by at most shadow_share of that (AUC - 0.5), or
  fell; the evidence is the comparison that holds (else the one against the previous windows).
- correlation (per training judge and shadow): reference = the baseline windows. Judged when
  they agreed in the baseline (Spearman >= min_baseline_corr and above zero with Fisher z >=
  corr_z); holds when the recent Spearman is at least corr_drop lower with Fisher z >= corr_z.
- invalid_rate (per judge): holds when the recent invalid rate exceeds the baseline's by
  invalid_jump (absolute) with two-proportion z >= invalid_z.
- drift (per judge whose role is in drift_on): holds when the KS distance of the recent valid
  scores from the baseline's is >= drift_ks with p <= drift_p (Wasserstein-1 reported beside).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..config import WatchAlarms
from .report import AlarmKind, Evidence
from .stats import correlation_drop_z, correlation_z, ks_2samp, rank_shift, spearman, two_proportion_z, wasserstein1
from .windows import Window


@dataclass(frozen=True)
class Check:
    """One rule judged at one window seal."""

    kind: AlarmKind
    judge: str
    shadow: str | None
    holds: bool
    message: str
    evidence: Evidence

    @property
    def key(self) -> tuple[str, str, str | None]:
        return self.kind, self.judge, self.shadow


def valid_scores(windows: Sequence[Window], judge: str) -> list[float]:
    return [v for w in windows for row in w.rows if (v := row.get(judge)) is not None]


def invalid_count(windows: Sequence[Window], judge: str) -> tuple[int, int]:
    """(invalid, scored) of a judge over the windows."""
    scored = [row[judge] for w in windows for row in w.rows if judge in row]
    return sum(v is None for v in scored), len(scored)


def paired_scores(windows: Sequence[Window], a: str, b: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for w in windows:
        for row in w.rows:
            x, y = row.get(a), row.get(b)
            if x is not None and y is not None:
                xs.append(x)
                ys.append(y)
    return xs, ys


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _span(windows: Sequence[Window]) -> str:
    first, last = windows[0], windows[-1]
    label = "window" if first is last else "windows"
    if first.steps is not None and last.steps is not None:
        return f"{label} {first.number}-{last.number} (steps {first.steps[0]}-{last.steps[1]})"
    return f"{label} {first.number}-{last.number}"


def _evidence(recent: Sequence[Window], reference: Sequence[Window], judges: list[str],
              values: dict[str, float | None]) -> Evidence:
    return Evidence(windows=[w.number for w in recent], reference=[w.number for w in reference], values=values,
                    means={j: [_mean(valid_scores([w], j)) for w in [*reference, *recent]] for j in judges})


def divergence(recent: Sequence[Window], earlier: Sequence[Window], train: str, shadow: str,
               cfg: WatchAlarms, baseline: bool = False) -> Check | None:
    sides = [valid_scores(recent, train), valid_scores(earlier, train),
             valid_scores(recent, shadow), valid_scores(earlier, shadow)]
    if min(map(len, sides)) < cfg.min_samples:
        return None
    t, s = rank_shift(sides[0], sides[1]), rank_shift(sides[2], sides[3])
    assert t is not None and s is not None
    rise_t, rise_s = t.auc - 0.5, s.auc - 0.5
    holds = t.auc >= cfg.rise_auc and t.z >= cfg.rise_z and rise_s <= cfg.shadow_share * rise_t
    went = "fell" if rise_s < 0 else ("stayed flat" if rise_s <= cfg.shadow_share * max(rise_t, 0.0) else "rose")
    against = f"the baseline, {_span(earlier)}" if baseline else _span(earlier)
    message = (f"divergence: training judge {train} rose (AUC {t.auc:.2f}, z {t.z:.1f}) over {_span(recent)} "
               f"against {against} while its shadow {shadow} {went} (AUC {s.auc:.2f}, z {s.z:.1f})")
    values = {"train_auc": t.auc, "train_z": t.z, "shadow_auc": s.auc, "shadow_z": s.z,
              "train_mean_reference": _mean(sides[1]), "train_mean_recent": _mean(sides[0]),
              "shadow_mean_reference": _mean(sides[3]), "shadow_mean_recent": _mean(sides[2])}
    return Check("divergence", train, shadow, holds, message, _evidence(recent, earlier, [train, shadow], values))


def divergences(recent: Sequence[Window], references: list[tuple[Sequence[Window], bool]], train: str,
                shadow: str, cfg: WatchAlarms) -> Check | None:
    """The divergence rule against each (reference, is the baseline): the first that holds, else the
    first judged."""
    checks = [c for ref, base in references if (c := divergence(recent, ref, train, shadow, cfg, base)) is not None]
    return next((c for c in checks if c.holds), checks[0] if checks else None)


def correlation(recent: Sequence[Window], baseline: Sequence[Window], train: str, shadow: str,
                cfg: WatchAlarms) -> Check | None:
    before, after = paired_scores(baseline, train, shadow), paired_scores(recent, train, shadow)
    if min(len(before[0]), len(after[0])) < cfg.min_samples:
        return None
    rho_before, rho_after = spearman(*before), spearman(*after)
    if rho_before is None or rho_after is None or rho_before < cfg.min_baseline_corr:
        return None  # they never agreed (or one is constant): a collapse is not defined
    agreed = correlation_z(rho_before, len(before[0]))
    z = correlation_drop_z(rho_before, len(before[0]), rho_after, len(after[0]))
    assert z is not None and agreed is not None
    if agreed < cfg.corr_z:
        return None  # an agreement chance alone could give: nothing to collapse from
    holds = rho_before - rho_after >= cfg.corr_drop and z >= cfg.corr_z
    message = (f"correlation: Spearman of {train} and its shadow {shadow} fell from {rho_before:.2f} "
               f"(baseline) to {rho_after:.2f} over {_span(recent)} (z {z:.1f})")
    values = {"spearman_baseline": rho_before, "spearman_recent": rho_after, "z": z, "baseline_z": agreed,
              "pairs_baseline": float(len(before[0])), "pairs_recent": float(len(after[0]))}
    return Check("correlation", train, shadow, holds, message, _evidence(recent, baseline, [train, shadow], values))


def invalid_rate(recent: Sequence[Window], baseline: Sequence[Window], judge: str,
                 cfg: WatchAlarms) -> Check | None:
    (k1, n1), (k0, n0) = invalid_count(recent, judge), invalid_count(baseline, judge)
    if min(n1, n0) < cfg.min_samples:
        return None
    z = two_proportion_z(k1, n1, k0, n0)
    assert z is not None
    p1, p0 = k1 / n1, k0 / n0
    holds = p1 - p0 >= cfg.invalid_jump and z >= cfg.invalid_z
    message = (f"invalid_rate: {judge} is invalid for {100 * p1:.1f}% of samples over {_span(recent)} "
               f"against {100 * p0:.1f}% in the baseline (z {z:.1f})")
    values = {"rate_baseline": p0, "rate_recent": p1, "z": z, "scored_baseline": float(n0), "scored_recent": float(n1)}
    return Check("invalid_rate", judge, None, holds, message, _evidence(recent, baseline, [judge], values))


def drift(recent: Sequence[Window], baseline: Sequence[Window], judge: str, cfg: WatchAlarms) -> Check | None:
    now, before = valid_scores(recent, judge), valid_scores(baseline, judge)
    if min(len(now), len(before)) < cfg.min_samples:
        return None
    ks = ks_2samp(now, before)
    assert ks is not None
    w1 = wasserstein1(now, before)
    holds = ks.d >= cfg.drift_ks and ks.p <= cfg.drift_p
    message = (f"drift: {judge}'s scores over {_span(recent)} moved from the baseline's (KS {ks.d:.2f}, "
               f"p {ks.p:.1e}, Wasserstein-1 {w1:.3g}; mean {_mean(before):.3g} -> {_mean(now):.3g})")
    values = {"ks": ks.d, "p": ks.p, "wasserstein1": w1, "mean_baseline": _mean(before), "mean_recent": _mean(now)}
    return Check("drift", judge, None, holds, message, _evidence(recent, baseline, [judge], values))


def evaluate(history: Sequence[Window], baseline: Sequence[Window], shadows: dict[str, list[str]],
             cfg: WatchAlarms) -> list[Check]:
    """Every rule that can be judged at the seal of history[-1]. `shadows`: training judge ->
    its shadows, as seen in the run."""
    n = cfg.windows
    history = list(history)
    checks: list[Check | None] = []
    recent = history[-n:]
    after_baseline = bool(baseline) and len(recent) == n and recent[0].number > baseline[-1].number
    references: list[tuple[Sequence[Window], bool]] = []
    if len(history) >= 2 * n and history[-2 * n].number + 2 * n - 1 == history[-1].number:
        references.append((history[-2 * n:-n], False))
    if after_baseline and (not references or references[0][0][0].number > baseline[-1].number):
        references.append((baseline, True))  # not when the previous windows are (or overlap) the baseline
    if references:
        checks += [divergences(recent, references, t, s, cfg) for t, ss in shadows.items() for s in ss]
    if after_baseline:
        checks += [correlation(recent, baseline, t, s, cfg) for t, ss in shadows.items() for s in ss]
        judges = list(dict.fromkeys([*shadows, *(s for ss in shadows.values() for s in ss)]))
        checks += [invalid_rate(recent, baseline, j, cfg) for j in judges]
        roles = {j: ("train" if j in shadows else "shadow") for j in judges}
        checks += [drift(recent, baseline, j, cfg) for j in judges if roles[j] in cfg.drift_on]
    return [c for c in checks if c is not None]
