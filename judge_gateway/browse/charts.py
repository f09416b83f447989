"""The browser's charts, drawn by matplotlib into inline SVG (so the export stays one file)."""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable
from typing import ParamSpec

import matplotlib

matplotlib.use("Agg")  # no display: charts are files
import matplotlib.pyplot as plt

from .stats import RankRow

P = ParamSpec("P")

# Run, judge, checkpoint and model names are user text: a `$` in one must print as a `$`, not
# start mathtext (which fails on unbalanced or invalid TeX).
_PLAIN_TEXT = {"text.parse_math": False}


def _plain_text(draw: Callable[P, str]) -> Callable[P, str]:
    @functools.wraps(draw)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> str:
        with plt.rc_context(_PLAIN_TEXT):
            return draw(*args, **kwargs)
    return wrapped


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and doctype: it is inlined in HTML


@_plain_text
def histogram(values_by_run: dict[str, list[float]], title: str) -> str:
    fig, ax = plt.subplots(figsize=(4.2, 2.6))
    bins = [i / 20 for i in range(21)]
    lo = min((min(v) for v in values_by_run.values() if v), default=0.0)
    hi = max((max(v) for v in values_by_run.values() if v), default=1.0)
    if lo < 0 or hi > 1:  # rewards outside [0, 1] (e.g. raw head scores): bins over their range
        bins = 20
    for name, values in values_by_run.items():
        ax.hist(values, bins=bins, alpha=0.6, label=f"{name} (n={len(values)})")
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("reward")
    ax.set_ylabel("samples")
    ax.legend(fontsize=7)
    return _svg(fig)


@_plain_text
def invalid_rates(rates: dict[str, dict[str, float]], title: str) -> str:
    """A stacked bar per judge: the share of its samples invalid, split by error code."""
    judges = list(rates)
    codes = sorted({c for per in rates.values() for c in per})
    fig, ax = plt.subplots(figsize=(4.2, 2.6))
    bottom = [0.0] * len(judges)
    for code in codes:
        heights = [100 * rates[j].get(code, 0.0) for j in judges]
        ax.bar(judges, heights, bottom=bottom, label=code)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_ylabel("% of samples invalid")
    ax.set_title(title, fontsize=10)
    ax.set_ylim(0, max(5.0, max(bottom, default=0.0) * 1.2))
    if codes:
        ax.legend(fontsize=7)
    ax.tick_params(axis="x", labelsize=8)
    return _svg(fig)


@_plain_text
def ranking(rows: list[RankRow], title: str, judge: str) -> str:
    fig, ax = plt.subplots(figsize=(5.0, 0.5 + 0.35 * max(len(rows), 2)))
    names = [r.group for r in rows][::-1]
    means = [r.mean for r in rows][::-1]
    err = [[0.0 if math.isnan(r.low) else r.mean - r.low for r in rows][::-1],
           [0.0 if math.isnan(r.high) else r.high - r.mean for r in rows][::-1]]
    ax.errorbar(means, names, xerr=err, fmt="o", capsize=4)
    ax.set_xlabel(f"mean {judge} (95% CI)")
    ax.set_title(f"{title} by mean reward", fontsize=10)
    return _svg(fig)


@_plain_text
def scatter(a: list[float], b: list[float], name_a: str, name_b: str, title: str) -> str:
    fig, ax = plt.subplots(figsize=(3.6, 3.4))
    ax.scatter(a, b, s=8, alpha=0.6)
    ax.set_xlabel(name_a)
    ax.set_ylabel(name_b)
    ax.set_title(title, fontsize=10)
    return _svg(fig)
