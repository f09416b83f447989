"""Text tables and a PNG plot of a tuning run's cross-validation."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .fit import FoldResult


def _pct(x: float) -> str:
    return "   -  " if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:6.2f}"


def cv_table(folds: list[FoldResult], summary: dict[str, dict[str, float]]) -> str:
    """Held-out accuracy per fold, default vs tuned, without and with ties."""
    lines = [
        "held-out pairwise accuracy (%)        default            tuned",
        "fold  pairs  excl    no-ties  with-ties    no-ties  with-ties",
    ]
    for f in folds:
        lines.append(f"{f.fold:>4}  {f.test_pairs:>5}  {f.excluded:>4}    {_pct(f.default['acc_no_ties'])}"
                     f"     {_pct(f.default['acc_with_ties'])}     {_pct(f.tuned['acc_no_ties'])}"
                     f"     {_pct(f.tuned['acc_with_ties'])}")
    d, t = summary["default"], summary["tuned"]
    lines.append(f"mean               {_pct(d['acc_no_ties'])}     {_pct(d['acc_with_ties'])}"
                 f"     {_pct(t['acc_no_ties'])}     {_pct(t['acc_with_ties'])}")
    lines.append(f"std                {_pct(d['acc_no_ties_std'])}     {_pct(d['acc_with_ties_std'])}"
                 f"     {_pct(t['acc_no_ties_std'])}     {_pct(t['acc_with_ties_std'])}")
    return "\n".join(lines)


def weights_table(default: dict[str, float], tuned: dict[str, float]) -> str:
    total = sum(v for v in default.values() if v > 0) or 1.0
    width = max(len(n) for n in tuned) + 2
    lines = [f"{'feature':<{width}} default   tuned"]
    for name, w in tuned.items():
        lines.append(f"{name:<{width}} {default.get(name, 0.0) / total:7.3f} {w:7.3f}")
    return "\n".join(lines)


def plot_cv(path: str | Path, folds: list[FoldResult], weights: dict[str, float],
            default_weights: dict[str, float], title: str) -> Path | None:
    """Accuracy per fold (default vs tuned, without and with ties) and the weights, as a PNG.

    Returns None when matplotlib is not installed (the `tune` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    import numpy as np

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    x = np.arange(len(folds))
    for ax, metric, label in ((axes[0], "acc_no_ties", "without ties"), (axes[1], "acc_with_ties", "with ties")):
        dv = [100 * f.default[metric] for f in folds]
        tv = [100 * f.tuned[metric] for f in folds]
        ax.bar(x - 0.2, dv, 0.4, label="default")
        ax.bar(x + 0.2, tv, 0.4, label="tuned")
        ax.set_xticks(x, [str(f.fold) for f in folds])
        ax.set_xlabel("held-out fold")
        ax.set_ylabel("pairwise accuracy (%)")
        ax.set_title(f"accuracy {label}")
        finite = [v for v in dv + tv if not math.isnan(v)]
        if finite:
            ax.set_ylim(max(0.0, min(finite) - 10), min(100.0, max(finite) + 5))
        ax.legend(loc="lower right")
    names = list(weights)
    total = sum(v for v in default_weights.values() if v > 0) or 1.0
    xw = np.arange(len(names))
    axes[2].bar(xw - 0.2, [default_weights.get(n, 0.0) / total for n in names], 0.4, label="default")
    axes[2].bar(xw + 0.2, [weights[n] for n in names], 0.4, label="tuned")
    axes[2].set_xticks(xw, names, rotation=20, ha="right", fontsize=8)
    axes[2].set_title("weights (sum 1)")
    axes[2].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def fold_record(f: FoldResult) -> dict[str, Any]:
    def clean(d: dict[str, Any]) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}

    agg = f.tuned_aggregation
    return {"fold": f.fold, "train_pairs": f.train_pairs, "test_pairs": f.test_pairs, "excluded": f.excluded,
            "default": clean(f.default), "tuned": clean(f.tuned),
            "tuned_weights": agg.weight_dict(), "tuned_na_policy": agg.na_policy,
            "tuned_tie_threshold": agg.tie_threshold}
