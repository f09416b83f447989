"""Fit aggregation weights to human preference pairs, and measure pairwise agreement.

The model is exactly what the gateway computes: a sample's score is the weighted mean of its
features (rubric aspects, or judges' rewards) on the reward scale,

    s = sum_i w_i v_i / sum_i w_i m_i      (m_i = 0 where feature i is left out)

and P(a preferred over b) = sigmoid(beta * (s_a - s_b)) (Bradley-Terry; a tie label counts as
1/2). Weights are a softmax (non-negative, summing to 1), beta > 0, fitted by Adam on the mean
negative log-likelihood: numpy only. Without left-out features this is a logistic model on
feature differences with non-negative weights.

Features that are N/A (NaN) follow a policy: `skip` (left out of the mean), `value` (counted as
`na_value`), or `invalidate` (the sample has no score). A pair with an unscored sample is
excluded from fitting and from accuracy, and counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

NAPolicy = Literal["skip", "value", "invalidate"]
LABEL_Y = {"a": 1.0, "b": 0.0, "tie": 0.5}


@dataclass(frozen=True)
class Aggregation:
    """Weights over named features, an N/A policy, and a tie threshold on score differences."""

    names: tuple[str, ...]
    weights: tuple[float, ...]
    na_policy: NAPolicy = "skip"
    na_value: float | None = None
    tie_threshold: float = 0.0

    def weight_dict(self) -> dict[str, float]:
        return dict(zip(self.names, self.weights))

    def scores(self, values: np.ndarray) -> np.ndarray:
        """Per-sample score; NaN where the sample has none under this policy."""
        w = np.asarray(self.weights, dtype=float)
        v, m = _masked(values, self.na_policy, self.na_value)
        den = m @ w
        with np.errstate(invalid="ignore", divide="ignore"):
            s = (v @ w) / den
        s[den <= 0] = np.nan
        if self.na_policy == "invalidate":
            s[np.isnan(values).any(axis=1)] = np.nan
        return s


def _masked(values: np.ndarray, policy: NAPolicy, na_value: float | None) -> tuple[np.ndarray, np.ndarray]:
    na = np.isnan(values)
    if policy == "value":
        assert na_value is not None
        return np.where(na, na_value, values), np.ones_like(values)
    return np.where(na, 0.0, values), (~na).astype(float)


@dataclass
class PairSet:
    """Labelled pairs as feature matrices: rows of `va` and `vb` are the two samples."""

    va: np.ndarray
    vb: np.ndarray
    labels: list[str]

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, idx: np.ndarray) -> PairSet:
        return PairSet(self.va[idx], self.vb[idx], [self.labels[i] for i in idx])


# --------------------------------------------------------------------------- accuracy


def pair_accuracy(d: np.ndarray, labels: list[str], tie_threshold: float) -> dict[str, float | int]:
    """Accuracy without ties (tie labels dropped; d == 0 earns 1/2) and with ties.

    With ties, |d| <= tie_threshold predicts a tie (VideoAlign's evaluation, after Deutsch et al.
    "Ties Matter"). `d` holds s_a - s_b; NaN entries (unscored pairs) are excluded and counted.
    """
    lab = np.asarray(labels)
    ok = ~np.isnan(d)
    d, lab = d[ok], lab[ok]
    nt = lab != "tie"
    sign_true = np.where(lab == "a", 1.0, -1.0)
    if nt.any():
        credit = np.where(d[nt] == 0, 0.5, (np.sign(d[nt]) == sign_true[nt]).astype(float))
        acc_nt = float(credit.mean())
    else:
        acc_nt = math.nan
    pred = np.where(np.abs(d) <= tie_threshold, "tie", np.where(d > 0, "a", "b"))
    acc_t = float((pred == lab).mean()) if len(lab) else math.nan
    return {"acc_no_ties": acc_nt, "acc_with_ties": acc_t, "pairs": len(lab),
            "pairs_no_ties": int(nt.sum()), "excluded": int((~ok).sum())}


def best_tie_threshold(d: np.ndarray, labels: list[str]) -> float:
    """The threshold t maximising accuracy with ties on these pairs (smallest t among equals)."""
    lab = np.asarray(labels)
    ok = ~np.isnan(d)
    d, lab = d[ok], lab[ok]
    if not len(d) or not (lab == "tie").any():
        return 0.0
    order = np.argsort(np.abs(d), kind="stable")
    ad, lab, ds = np.abs(d)[order], lab[order], d[order]
    # Threshold at ad[j] makes pairs 0..j (and equal |d| after) ties.
    correct_sign = ((ds > 0) & (lab == "a")) | ((ds < 0) & (lab == "b"))
    tie_hits = np.concatenate([[0], np.cumsum(lab == "tie")])
    sign_hits_after = np.concatenate([np.cumsum(correct_sign[::-1])[::-1], [0]])
    candidates = np.concatenate([[0.0], ad])
    best_t, best_acc = 0.0, -1.0
    for t in np.unique(candidates):
        j = int(np.searchsorted(ad, t, side="right"))  # pairs with |d| <= t
        acc = tie_hits[j] + sign_hits_after[j]
        if acc > best_acc:
            best_t, best_acc = float(t), float(acc)
    return best_t


def differences(agg: Aggregation, pairs: PairSet) -> np.ndarray:
    return agg.scores(pairs.va) - agg.scores(pairs.vb)


# --------------------------------------------------------------------------- fitting


@dataclass
class FitResult:
    aggregation: Aggregation
    beta: float
    nll: float
    pairs_used: int
    excluded: int
    candidates: dict[str, float] = field(default_factory=dict)  # policy label -> training NLL


def usable(pairs: PairSet, policy: NAPolicy, na_value: float | None) -> np.ndarray:
    """Which pairs this N/A policy can score on both sides (the pairs a fit can use)."""
    _, ma = _masked(pairs.va, policy, na_value)
    _, mb = _masked(pairs.vb, policy, na_value)
    valid = np.ones(len(pairs), dtype=bool)
    if policy == "invalidate":
        valid &= ~np.isnan(pairs.va).any(axis=1) & ~np.isnan(pairs.vb).any(axis=1)
    # A pair whose sample has no feature at all can never be scored.
    return valid & (ma.sum(axis=1) > 0) & (mb.sum(axis=1) > 0)


def _fit_weights(pairs: PairSet, policy: NAPolicy, na_value: float | None, *, steps: int = 1500,
                 lr: float = 0.05, l2: float = 1e-3, seed: int = 0) -> tuple[np.ndarray, float, float, int]:
    """Softmax weights and beta minimising the pairwise NLL; (w, beta, nll, pairs used)."""
    k = pairs.va.shape[1]
    va, ma = _masked(pairs.va, policy, na_value)
    vb, mb = _masked(pairs.vb, policy, na_value)
    y = np.array([LABEL_Y[lab] for lab in pairs.labels])
    valid = usable(pairs, policy, na_value)
    va, ma, vb, mb, y = va[valid], ma[valid], vb[valid], mb[valid], y[valid]
    n = len(y)
    if n == 0:
        return np.full(k, 1.0 / k), 1.0, math.inf, 0
    theta = np.zeros(k)
    gamma = math.log(10.0)
    params = np.concatenate([theta, [gamma]])
    m1 = np.zeros_like(params)
    m2 = np.zeros_like(params)
    nll = math.inf
    for step in range(1, steps + 1):
        theta, gamma = params[:k], params[k]
        w = np.exp(theta - theta.max())
        w /= w.sum()
        beta = math.exp(gamma)
        den_a, den_b = ma @ w, mb @ w
        sa, sb = (va @ w) / den_a, (vb @ w) / den_b
        d = sa - sb
        z = beta * d
        p = 1.0 / (1.0 + np.exp(-z))
        # NLL of soft labels: softplus(-z) * y + softplus(z) * (1 - y)
        nll = float(np.mean(y * np.logaddexp(0, -z) + (1 - y) * np.logaddexp(0, z)))
        r = (p - y) / n                                   # dNLL/dz per pair
        g_d = r * beta
        # ds/dw = (v - s m) / (m . w), row-wise
        g_w = ((va - sa[:, None] * ma) / den_a[:, None]).T @ g_d - \
              ((vb - sb[:, None] * mb) / den_b[:, None]).T @ g_d
        g_theta = w * (g_w - g_w @ w) + l2 * 2 * (theta - theta.mean())
        g_gamma = float(np.sum(r * d)) * beta
        grad = np.concatenate([g_theta, [g_gamma]])
        m1 = 0.9 * m1 + 0.1 * grad
        m2 = 0.999 * m2 + 0.001 * grad * grad
        params = params - lr * (m1 / (1 - 0.9 ** step)) / (np.sqrt(m2 / (1 - 0.999 ** step)) + 1e-8)
        params[k] = min(max(params[k], -5.0), 8.0)        # keep beta in a sane range
    theta = params[:k]
    w = np.exp(theta - theta.max())
    return w / w.sum(), math.exp(params[k]), nll, n


def policy_candidates(pairs: PairSet, default: tuple[NAPolicy, float | None],
                      na_values: tuple[float, ...]) -> list[tuple[NAPolicy, float | None]]:
    """N/A policies worth trying: the default only, unless the data has N/A features."""
    has_na = bool(np.isnan(pairs.va).any() or np.isnan(pairs.vb).any())
    if not has_na:
        return [default]
    out: list[tuple[NAPolicy, float | None]] = [("skip", None)]
    out += [("value", v) for v in na_values]
    if default not in out:
        out.insert(0, default)
    return out


def fit_aggregation(pairs: PairSet, names: tuple[str, ...], policies: list[tuple[NAPolicy, float | None]],
                    *, seed: int = 0) -> FitResult:
    """Weights per candidate N/A policy; keep the policy with the lowest training NLL, then fit
    the tie threshold on the same training pairs."""
    best: FitResult | None = None
    tried: dict[str, float] = {}
    for policy, na_value in policies:
        w, beta, nll, used = _fit_weights(pairs, policy, na_value, seed=seed)
        label = policy if policy != "value" else f"value={na_value:g}"
        tried[label] = nll
        agg = Aggregation(names, tuple(float(x) for x in w), policy, na_value)
        if best is None or nll < best.nll - 1e-9:
            best = FitResult(agg, beta, nll, used, len(pairs) - used)
    assert best is not None
    best.candidates = tried
    t = best_tie_threshold(differences(best.aggregation, pairs), pairs.labels)
    best.aggregation = replace(best.aggregation, tie_threshold=t)
    return best


def with_tie_threshold(agg: Aggregation, pairs: PairSet) -> Aggregation:
    return replace(agg, tie_threshold=best_tie_threshold(differences(agg, pairs), pairs.labels))


# --------------------------------------------------------------------------- cross-validation


@dataclass
class FoldResult:
    fold: int
    train_pairs: int
    test_pairs: int
    excluded: int
    default: dict[str, float | int]
    tuned: dict[str, float | int]
    tuned_aggregation: Aggregation


def kfold_indices(n: int, k: int, seed: int) -> list[np.ndarray]:
    if k < 2:
        raise ValueError(f"--folds must be >= 2, got {k}")
    if n < k:
        raise ValueError(f"{n} labelled pairs cannot be split into {k} folds")
    perm = np.random.default_rng(seed).permutation(n)
    return [np.sort(f) for f in np.array_split(perm, k)]


def cross_validate(pairs: PairSet, names: tuple[str, ...], default: Aggregation,
                   policies: list[tuple[NAPolicy, float | None]], *, k: int = 5, seed: int = 0) -> list[FoldResult]:
    """Default vs tuned aggregation on each held-out fold. Both get their tie threshold from the
    training folds; both are scored on the same held-out pairs (those valid under both)."""
    folds = kfold_indices(len(pairs), k, seed)
    out: list[FoldResult] = []
    for i, test_idx in enumerate(folds):
        train_idx = np.setdiff1d(np.arange(len(pairs)), test_idx)
        train, test = pairs.subset(train_idx), pairs.subset(test_idx)
        tuned = fit_aggregation(train, names, policies, seed=seed).aggregation
        base = with_tie_threshold(default, train)
        d_def, d_tun = differences(base, test), differences(tuned, test)
        both = ~np.isnan(d_def) & ~np.isnan(d_tun)
        d_def, d_tun = np.where(both, d_def, np.nan), np.where(both, d_tun, np.nan)
        out.append(FoldResult(
            fold=i, train_pairs=len(train), test_pairs=int(both.sum()), excluded=int((~both).sum()),
            default=pair_accuracy(d_def, test.labels, base.tie_threshold),
            tuned=pair_accuracy(d_tun, test.labels, tuned.tie_threshold),
            tuned_aggregation=tuned,
        ))
    return out


def summarize(folds: list[FoldResult]) -> dict[str, dict[str, float]]:
    """Mean and std over folds of each accuracy, for default and tuned."""
    out: dict[str, dict[str, float]] = {}
    for which in ("default", "tuned"):
        for metric in ("acc_no_ties", "acc_with_ties"):
            vals = np.array([getattr(f, which)[metric] for f in folds], dtype=float)
            vals = vals[~np.isnan(vals)]
            out.setdefault(which, {})[metric] = float(vals.mean()) if len(vals) else math.nan
            out[which][metric + "_std"] = float(vals.std()) if len(vals) else math.nan
    return out
