"""`judge-gateway prompts compare FAMILY@A FAMILY@B`: how two template versions disagree.

Both versions score the same samples with the same judge settings (backend, options); the
report gives rank agreement of the rewards (Spearman, Pearson), the pair flip rate (pairs
whose preferred sample changes), and, for labelled pairs, each version's pairwise accuracy.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np

from ..config import GatewayConfig, JudgeConfig
from ..prompts import load_template
from .cache import ScoreCache
from .collect import JudgeSpec, ScoreTable, collect_scores
from .fit import best_tie_threshold, pair_accuracy
from .prefs import PreferenceData, load_preferences


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    sx = x[order]
    i = 0
    while i < len(x):  # average ranks for ties
        j = i
        while j + 1 < len(x) and sx[j + 1] == sx[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2
        i = j + 1
    return ranks


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 2 or a.std() == 0 or b.std() == 0:
        return math.nan
    return float(np.corrcoef(a, b)[0, 1])


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    return _corr(_ranks(a), _ranks(b))


@dataclass
class CompareReport:
    refs: tuple[str, str]
    samples: int
    valid_both: int
    invalid: dict[str, int]
    spearman: float
    pearson: float
    mean_abs_diff: float
    pairs_compared: int
    flips: int
    accuracy: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def flip_rate(self) -> float:
        return self.flips / self.pairs_compared if self.pairs_compared else math.nan

    def render(self) -> str:
        a, b = self.refs
        lines = [
            (f"samples: {self.samples}, valid under both: {self.valid_both} "
             f"(invalid: {a} {self.invalid[a]}, {b} {self.invalid[b]})"),
            (f"Spearman rho: {self.spearman:.4f}   Pearson r: {self.pearson:.4f}   "
             f"mean |reward diff|: {self.mean_abs_diff:.4f}"),
            f"flip rate: {self.flip_rate:.4f} ({self.flips} of {self.pairs_compared} pairs change their preferred sample)",
        ]
        for ref in self.refs:
            acc = self.accuracy.get(ref)
            if acc:
                lines.append(
                    f"{ref}: pairwise accuracy without ties {100 * acc['acc_no_ties']:.2f}% "
                    f"({acc['pairs_no_ties']} pairs), with ties {100 * acc['acc_with_ties']:.2f}% "
                    f"({acc['pairs']} pairs, tie threshold {acc['tie_threshold']:.4f} calibrated on this data)")
        if not self.accuracy:
            lines.append("no labelled pairs: no accuracy")
        return "\n".join(lines)


def compare_scores(data: PreferenceData, table: ScoreTable, names: tuple[str, str]) -> CompareReport:
    """Agreement between two judges' (template versions') rewards on the same samples."""
    samples = data.samples()
    ra, rb, invalid = [], [], {names[0]: 0, names[1]: 0}
    reward: dict[tuple[str, str], float] = {}
    for key in samples:
        both = True
        for name in names:
            s = table.get((key, name))
            if s is None or not s.valid or s.reward is None:
                invalid[name] += 1
                both = False
            else:
                reward[(key, name)] = float(s.reward)
        if both:
            ra.append(reward[(key, names[0])])
            rb.append(reward[(key, names[1])])
    a, b = np.array(ra), np.array(rb)
    flips = compared = 0
    diffs: dict[str, list[float]] = {n: [] for n in names}
    labels: list[str] = []
    for pair in data.pairs:
        ds = []
        for name in names:
            x, y = reward.get((pair.a.key, name)), reward.get((pair.b.key, name))
            ds.append(math.nan if x is None or y is None else x - y)
        if any(math.isnan(d) for d in ds):
            continue
        compared += 1
        flips += int(np.sign(ds[0]) != np.sign(ds[1]))
        if pair.label is not None:
            labels.append(pair.label)
            for name, d in zip(names, ds):
                diffs[name].append(d)
    accuracy: dict[str, dict[str, Any]] = {}
    if labels:
        for name in names:
            d = np.array(diffs[name])
            t = best_tie_threshold(d, labels)
            accuracy[name] = {**pair_accuracy(d, labels, t), "tie_threshold": t}
    return CompareReport(
        refs=names, samples=len(samples), valid_both=len(a), invalid=invalid,
        spearman=spearman(a, b), pearson=_corr(a, b),
        mean_abs_diff=float(np.abs(a - b).mean()) if len(a) else math.nan,
        pairs_compared=compared, flips=flips, accuracy=accuracy)


def pick_judge(cfg: GatewayConfig, family: str, judge: str | None) -> str:
    if judge is not None:
        if judge not in cfg.judges:
            raise ValueError(f"unknown judge {judge!r}; configured: {', '.join(cfg.judges)}")
        return judge
    for name, j in cfg.judges.items():
        if j.template and j.template.split("@")[0] == family:
            return name
    raise ValueError(f"no configured judge uses template family {family!r}; name one with --judge "
                     "(its backend and options are used for both versions)")


def compare_templates(cfg: GatewayConfig, ref_a: str, ref_b: str, data_path: str, opts: Any, *,
                      judge: str | None = None, out: TextIO | None = None) -> CompareReport:
    """Score the data's samples with both template versions through `judge`'s backend and report."""
    out = out or sys.stdout
    from ..config import validate_config

    dirs = cfg.prompts.dirs
    ta, tb = load_template(ref_a, dirs), load_template(ref_b, dirs)  # refuses unpinned or unknown versions
    if ta.id != tb.id:
        raise ValueError(f"compare two versions of one family, got {ta.id!r} and {tb.id!r}")
    if ta.kind != tb.kind:
        raise ValueError(f"{ref_a} is {ta.kind!r} but {ref_b} is {tb.kind!r}")
    name = pick_judge(cfg, ta.id, judge)
    base: JudgeConfig = cfg.judges[name]
    if base.kind != ta.kind:
        raise ValueError(f"judge {name!r} is a {base.kind!r} judge; {ref_a} is a {ta.kind!r} template")
    options = base.options.model_dump(mode="json", exclude_unset=True, exclude={"shadow_template"})
    model = cfg.backends[base.backend].model if base.backend else ""
    # A config of its own: the judge twice, once per version (validated like any config).
    doc = cfg.model_dump(mode="json")
    doc["judges"] = {
        f"{name}@{t.version}": {**base.model_dump(mode="json"), "template": t.ref, "options": options, "default": True}
        for t in (ta, tb)
    }
    two = validate_config(doc, source=f"<prompts compare {ref_a} {ref_b}>")
    specs = [JudgeSpec(gateway_name=f"{name}@{t.version}", cache_name=name, template_sha256=t.sha256, model=model)
             for t in (ta, tb)]
    data = load_preferences(data_path)
    print(f"judge {name!r} ({model}), data {data.path}: {len(data.pairs)} pairs, "
          f"{len(data.labelled)} labelled", file=out)
    for t in (ta, tb):
        print(f"  {t.ref}: sha256 {t.sha256}", file=out)

    def make() -> Any:
        from ..client import AsyncRewardClient

        return AsyncRewardClient(config=two)

    table, counts = collect_scores(data, specs, ScoreCache(opts.cache), client_factory=make,
                                   cache_only=opts.cache_only, batch_size=opts.batch_size,
                                   concurrency=opts.concurrency, progress=opts.progress)
    print(f"scores: {counts['cached']} from the cache, {counts['scored']} scored now", file=out)
    # Columns named by template ref for the report.
    column = {f"{name}@{t.version}": t.ref for t in (ta, tb)}
    by_version: ScoreTable = {(key, column[g]): row for (key, g), row in table.items()}
    report = compare_scores(data, by_version, (ta.ref, tb.ref))
    print(report.render(), file=out)
    return report
