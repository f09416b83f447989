"""`judge-gateway eval LABELS.jsonl --judge NAME`: how well a judge agrees with known labels.

Two kinds of label file (told apart by their lines):

- binary: `{"id", "prompt", "image"|"video", "fps"?, "label": 1|0|true|false}`: accuracy at the
  threshold (`--threshold`, else the config's `eval.thresholds[NAME]` / `eval.threshold`),
  ROC-AUC, the confusion matrix, and a calibration plot PNG (fraction labelled good per reward
  bin against the bin's mean reward);
- pairwise: the preference pairs of `tune` / `prompts compare` (`a`, `b`, `label`: a|b|tie):
  pairwise accuracy, with the same code as `prompts compare`.

Invalid scores are no prediction: they are counted by error code and left out of every figure.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from .extras import has_modules, install_command, require_extra
from .inputs import IMAGE_SUFFIXES, VIDEO_SUFFIXES, InputItem, resolve_path, sample_key
from .jsonl import iter_objects

CALIBRATION_BINS = 10
_BINARY_KEYS = {"id", "prompt", "image", "video", "fps", "label", "metadata"}


@dataclass(frozen=True)
class LabelledSample:
    key: str
    item: InputItem
    label: int
    where: str


@dataclass
class BinaryLabels:
    """Duck-types PreferenceData.samples() so the tuning score collector (and cache) serve it."""

    path: Path
    rows: list[LabelledSample]

    def samples(self) -> dict[str, Any]:
        from .tuning.prefs import PrefSample

        return {r.key: PrefSample(key=r.key, item=r.item) for r in self.rows}


def _label(value: Any, where: str) -> int:
    if isinstance(value, bool):
        return int(value)
    if value in (0, 1):
        return int(value)
    raise ValueError(f"{where}: label must be 1/0 or true/false, got {value!r}")


def load_binary_labels(path: Path) -> BinaryLabels:
    rows = []
    for _, where, obj in iter_objects(path, ValueError, _BINARY_KEYS):
        if ("image" in obj) == ("video" in obj):
            raise ValueError(f"{where}: needs exactly one of `image` or `video`")
        if "label" not in obj:
            raise ValueError(f"{where}: no `label`")
        kind = "image" if "image" in obj else "video"
        media = resolve_path(path.parent, obj[kind], f"{where}: {kind}")
        if kind == "image" and media.suffix.lower() not in IMAGE_SUFFIXES:
            raise ValueError(f"{where}: {media.name} is not an image ({', '.join(sorted(IMAGE_SUFFIXES))})")
        if kind == "video" and not media.is_dir() and media.suffix.lower() not in VIDEO_SUFFIXES:
            raise ValueError(f"{where}: {media.name} is not a video ({', '.join(sorted(VIDEO_SUFFIXES))})")
        item = InputItem(source=str(obj.get("id", where)), prompt=str(obj.get("prompt", "")), fps=obj.get("fps"),
                         metadata=obj.get("metadata", {}), **{kind: media})
        rows.append(LabelledSample(key=sample_key(item), item=item, label=_label(obj["label"], where), where=where))
    if not rows:
        raise ValueError(f"{path}: no labelled samples")
    return BinaryLabels(path=path, rows=rows)


def is_pairwise(path: Path) -> bool:
    for _, _, obj in iter_objects(path, ValueError):
        return "a" in obj and "b" in obj
    raise ValueError(f"{path}: no lines")


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """P(a random good sample outscores a random bad one), ties counting 1/2 (Mann-Whitney U)."""
    from .tuning.compare import _ranks

    pos, neg = int(labels.sum()), int(len(labels) - labels.sum())
    if not pos or not neg:
        return math.nan
    ranks = _ranks(scores) + 1  # average ranks, 1-based
    return float((ranks[labels == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))


@dataclass
class BinaryReport:
    judge: str
    threshold: float
    samples: int
    scored: int
    invalid: dict[str, int]
    accuracy: float
    auc: float
    tp: int
    fp: int
    fn: int
    tn: int
    ece: float | None
    bins: list[dict[str, float]]
    calibration_refused: str | None = None  # why no calibration was computed

    def to_json(self) -> dict[str, Any]:
        return _json_safe(self.__dict__)

    def render(self) -> str:
        invalid = sum(self.invalid.values())
        codes = ", ".join(f"{c}={n}" for c, n in self.invalid.items())
        return "\n".join([
            f"judge {self.judge}: {self.samples} labelled samples, {self.scored} scored"
            + (f", {invalid} invalid ({codes}) left out" if invalid else ""),
            f"accuracy at threshold {self.threshold:g}: {self.accuracy:.4f}",
            f"ROC-AUC: {self.auc:.4f}",
            "confusion matrix (rows: label, columns: prediction):",
            "              pred good  pred bad",
            f"  label good  {self.tp:9d}  {self.fn:8d}",
            f"  label bad   {self.fp:9d}  {self.tn:8d}",
            f"expected calibration error ({CALIBRATION_BINS} bins): {self.ece:.4f}" if self.ece is not None
            else f"calibration: not computed: {self.calibration_refused}",
        ])


def binary_report(judge: str, rewards: list[float | None], labels: list[int], codes: list[str | None],
                  threshold: float) -> BinaryReport:
    ok = [i for i, r in enumerate(rewards) if r is not None]
    s = np.array([rewards[i] for i in ok], dtype=float)
    y = np.array([labels[i] for i in ok], dtype=int)
    pred = (s >= threshold).astype(int)
    outside = s[(s < 0) | (s > 1)]
    refused = None
    if len(outside):
        # The plot compares a reward with a fraction of good labels: only a reward in [0, 1] is one.
        refused = (f"{len(outside)} of {len(s)} rewards lie outside [0, 1] (min {s.min():g}, max {s.max():g}); "
                   "calibration compares a reward with a probability")
    bins = []
    edges = np.linspace(0.0, 1.0, CALIBRATION_BINS + 1)
    which = np.clip(np.digitize(s, edges[1:-1]), 0, CALIBRATION_BINS - 1)  # rewards in [0, 1]
    ece = 0.0
    for b in range(0 if refused else CALIBRATION_BINS):
        in_bin = which == b
        if in_bin.any():
            mean, frac = float(s[in_bin].mean()), float(y[in_bin].mean())
            bins.append({"low": float(edges[b]), "high": float(edges[b + 1]), "n": int(in_bin.sum()),
                         "mean_reward": mean, "fraction_good": frac})
            ece += in_bin.sum() / len(s) * abs(mean - frac)
    return BinaryReport(
        judge=judge, threshold=threshold, samples=len(rewards), scored=len(ok),
        invalid=dict(Counter(c for c in codes if c).most_common()),
        accuracy=float((pred == y).mean()) if len(y) else math.nan, auc=roc_auc(s, y),
        tp=int(((pred == 1) & (y == 1)).sum()), fp=int(((pred == 1) & (y == 0)).sum()),
        fn=int(((pred == 0) & (y == 1)).sum()), tn=int(((pred == 0) & (y == 0)).sum()),
        ece=None if refused else (float(ece) if len(s) else math.nan), bins=bins, calibration_refused=refused)


def _json_safe(value: Any) -> Any:
    """JSON has no NaN / inf: such a figure (AUC with one class only, ...) is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def plot_calibration(report: BinaryReport, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot([0, 1], [0, 1], "--", color="grey", label="perfectly calibrated")
    xs = [b["mean_reward"] for b in report.bins]
    ys = [b["fraction_good"] for b in report.bins]
    ax.plot(xs, ys, "o-", label=report.judge)
    for b in report.bins:
        ax.annotate(str(b["n"]), (b["mean_reward"], b["fraction_good"]), fontsize=7,
                    textcoords="offset points", xytext=(4, -10))
    ax.axvline(report.threshold, color="tab:red", linewidth=0.8, label=f"threshold {report.threshold:g}")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("mean reward in bin")
    ax.set_ylabel("fraction labelled good")
    ax.set_title(f"{report.judge}: accuracy {report.accuracy:.3f}, AUC {report.auc:.3f}", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def _pairwise(cfg: Any, judge: str, path: Path, opts: Any, out: TextIO) -> int:
    from .tuning.fit import best_tie_threshold, pair_accuracy
    from .tuning.prefs import load_preferences
    from .tuning.run import score_table

    data = load_preferences(path)
    labelled = data.labelled
    if not labelled:
        raise ValueError(f"{path}: no labelled pairs")
    table = score_table(data, cfg, [judge], opts, out)
    reward = {k: (row.reward if row.valid else None) for (k, _), row in table.items()}
    d = np.array([math.nan if reward.get(p.a.key) is None or reward.get(p.b.key) is None
                  else reward[p.a.key] - reward[p.b.key] for p in labelled])
    labels = [p.label for p in labelled]
    t = best_tie_threshold(d, labels)
    acc = pair_accuracy(d, labels, t)
    codes = Counter(row.error_code for row in table.values() if not row.valid)
    print(f"judge {judge}: {len(labelled)} labelled pairs, {int(np.isnan(d).sum())} left out (a side invalid"
          + (f": {', '.join(f'{c}={n}' for c, n in codes.most_common())}" if codes else "") + ")", file=out)
    if not np.isfinite(d).any():
        print("error: no pair has a valid score on both sides; nothing to evaluate", file=sys.stderr)
        return 1
    print(f"pairwise accuracy without ties: {acc['acc_no_ties']:.4f} ({acc['pairs_no_ties']} pairs)", file=out)
    print(f"pairwise accuracy with ties: {acc['acc_with_ties']:.4f} ({acc['pairs']} pairs, tie threshold "
          f"{t:.4f} calibrated on this data)", file=out)
    return 0


def run_eval_command(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from .config import load_config
    from .tuning.run import ScoringOptions, score_table

    out = out or sys.stdout
    cfg = load_config(args.config)
    if args.judge not in cfg.judges:
        raise ValueError(f"unknown judge {args.judge!r}; configured: {', '.join(cfg.judges)}")
    if args.batch_size < 1 or args.concurrency < 1:
        raise ValueError("--batch-size and --concurrency must be >= 1")
    opts = ScoringOptions(cache=args.cache, server=args.server, api_key=args.api_key, batch_size=args.batch_size,
                          concurrency=args.concurrency, progress=not args.no_progress)
    path = Path(args.labels)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    if args.plot:  # asked for by name: say what is missing before anything is scored
        require_extra("browse", "eval --plot", ("matplotlib",))
    if is_pairwise(path):
        return _pairwise(cfg, args.judge, path, opts, out)
    data = load_binary_labels(path)
    threshold = args.threshold if args.threshold is not None else cfg.eval.threshold_for(args.judge)
    table = score_table(data, cfg, [args.judge], opts, out)
    rows = [table[(r.key, args.judge)] for r in data.rows]
    report = binary_report(args.judge, [row.reward if row.valid else None for row in rows],
                           [r.label for r in data.rows], [None if row.valid else row.error_code for row in rows],
                           threshold)
    print(report.render(), file=out)
    if not report.scored:
        print("error: no sample got a valid score; nothing to evaluate", file=sys.stderr)
        return 1
    plot = Path(args.plot) if args.plot else path.with_suffix(".calibration.png")
    if report.calibration_refused is not None:
        print(f"no calibration plot: {report.calibration_refused}", file=sys.stderr)
    elif not has_modules("matplotlib"):
        print(f"no calibration plot: it needs matplotlib: {install_command('browse')}", file=sys.stderr)
    else:
        plot_calibration(report, plot)
        print(f"calibration plot: {plot}", file=out)
    summary = plot.with_suffix(".json")
    plot.parent.mkdir(parents=True, exist_ok=True)
    summary.write_text(json.dumps(report.to_json(), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return 0
