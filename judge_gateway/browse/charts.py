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

from ..watch import AlarmReport, RunReport
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


ALARM_COLOURS = {"divergence": "#b91c1c", "correlation": "#7c3aed", "invalid_rate": "#c2410c", "drift": "#0369a1"}


def _window_x(report: RunReport) -> tuple[list[float], str]:
    """x of each window: its last step when the trainer sends steps, else its number."""
    if report.windowing == "step" and all(w.steps for w in report.windows):
        return [float(w.steps[1]) for w in report.windows if w.steps], "step"
    return [float(w.window) for w in report.windows], "window"


def _mark_alarms(ax, report: RunReport, xs: list[float], alarms: list[AlarmReport]) -> None:
    """A vertical line where each alarm fired, labelled with its kind; baseline windows shaded."""
    by_window = {w.window: x for w, x in zip(report.windows, xs)}
    base = [x for w, x in zip(report.windows, xs) if w.baseline]
    if base:
        ax.axvspan(min(base) - 0.5, max(base) + 0.5, color="#e5e7eb", zorder=0, label="baseline")
    for alarm in alarms:
        x = by_window.get(alarm.fired_window)
        if x is None:
            continue
        colour = ALARM_COLOURS.get(alarm.kind, "#b91c1c")
        ax.axvline(x, color=colour, linestyle=":", linewidth=1.5).set_gid(f"alarm-{alarm.kind}-{alarm.fired_window}")
        ax.annotate(f"{alarm.kind}", (x, 1.0), xycoords=("data", "axes fraction"), rotation=90, va="top",
                    ha="right", fontsize=7, color=colour)


@_plain_text
def watch_curves(report: RunReport, train: str, shadows: list[str]) -> str:
    """Mean reward per window of a training judge (left axis, with its 10-90% band) and of its
    shadows (right axis: their scales differ), alarms of the pair marked where they fired."""
    xs, label = _window_x(report)
    fig, ax = plt.subplots(figsize=(7.5, 3.0))

    def series(judge: str, field: str) -> list[float]:
        return [getattr(w.judges[judge], field) if judge in w.judges and getattr(w.judges[judge], field) is not None
                else math.nan for w in report.windows]

    alarms = [a for a in report.alarms if a.judge == train or a.judge in shadows or a.shadow in shadows]
    _mark_alarms(ax, report, xs, alarms)
    ax.fill_between(xs, series(train, "q10"), series(train, "q90"), color="#1d4ed8", alpha=0.12, linewidth=0)
    (line,) = ax.plot(xs, series(train, "mean"), color="#1d4ed8", marker="o", markersize=3, label=f"{train} (training)")
    line.set_gid(f"curve-{train}")
    ax.set_ylabel(f"{train} mean", color="#1d4ed8", fontsize=8)
    ax.set_xlabel(label)
    right = ax.twinx()
    for k, shadow in enumerate(shadows):
        (line,) = right.plot(xs, series(shadow, "mean"), linestyle="--", marker="s", markersize=3,
                             color=["#15803d", "#a16207", "#be185d", "#0f766e"][k % 4], label=f"{shadow} (shadow)")
        line.set_gid(f"curve-{shadow}")
    right.set_ylabel("shadow mean", fontsize=8)
    handles = ax.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    right.legend(handles, [h.get_label() for h in handles], fontsize=7, loc="upper left")
    ax.set_title(f"{train} vs its shadows, per {label}", fontsize=10)
    return _svg(fig)


@_plain_text
def watch_invalid(report: RunReport) -> str:
    """Each judge's invalid rate per window (%)."""
    xs, label = _window_x(report)
    fig, ax = plt.subplots(figsize=(7.5, 2.2))
    judges = list(dict.fromkeys(j for w in report.windows for j in w.judges))
    for judge in judges:
        rates = [100 * w.judges[judge].invalid_rate if judge in w.judges and w.judges[judge].invalid_rate is not None
                 else math.nan for w in report.windows]
        (line,) = ax.plot(xs, rates, marker=".", label=judge)
        line.set_gid(f"invalid-{judge}")
    _mark_alarms(ax, report, xs, [a for a in report.alarms if a.kind == "invalid_rate"])
    ax.set_ylim(0, max(5.0, ax.get_ylim()[1]))
    ax.set_ylabel("% invalid", fontsize=8)
    ax.set_xlabel(label)
    ax.set_title("invalid rate per judge", fontsize=10)
    if judges:
        ax.legend(fontsize=7)
    return _svg(fig)


RESIDENCY_COLOURS = {"asleep": "#9ca3af", "wake": "#15803d", "failed": "#b91c1c", "refused": "#c2410c"}


@_plain_text
def residency_timeline(report: RunReport) -> str:
    """Each colocated unit's sleeps on the run's clock: a grey bar while it slept (to its wake, or to
    now), a green tick per wake, a red cross per failed sleep or wake, an orange one per refused
    sleep; dotted lines where windows were sealed (with their last step when the trainer sent one)."""
    events = sorted(report.residency, key=lambda e: e.at)
    start = min([e.at for e in events] + [w.opened_at for w in report.windows])
    end = max([e.at for e in events] + [w.sealed_at for w in report.windows])
    units = list(dict.fromkeys(e.unit for e in events))
    fig, ax = plt.subplots(figsize=(7.5, 0.8 + 0.45 * len(units)))
    for lane, unit in enumerate(units):
        asleep_from: float | None = None
        label = f"{unit} ({', '.join(next(e.judges for e in events if e.unit == unit))})"
        for e in (e for e in events if e.unit == unit):
            x = e.at - start
            if e.event == "sleep":
                asleep_from = x
            elif e.event == "wake":
                if asleep_from is not None:
                    ax.broken_barh([(asleep_from, x - asleep_from)], (lane - 0.3, 0.6),
                                   color=RESIDENCY_COLOURS["asleep"]).set_gid(f"residency-asleep-{lane}")
                asleep_from = None
                (tick,) = ax.plot([x], [lane], marker="|", markersize=14, color=RESIDENCY_COLOURS["wake"])
                tick.set_gid(f"residency-wake-{lane}")
            else:
                colour = RESIDENCY_COLOURS["refused" if e.event == "sleep_refused" else "failed"]
                (mark,) = ax.plot([x], [lane], marker="x", markersize=8, color=colour)
                mark.set_gid(f"residency-{e.event}")
                if e.event == "wake_failed":
                    asleep_from = None
        if asleep_from is not None:  # asleep now
            ax.broken_barh([(asleep_from, max(end - start - asleep_from, 0.0))], (lane - 0.3, 0.6),
                           color=RESIDENCY_COLOURS["asleep"])
        ax.text(0, lane + 0.38, label, fontsize=7, va="bottom")
    for w in report.windows:
        x = w.sealed_at - start
        ax.axvline(x, color="#d1d5db", linestyle=":", linewidth=1)
        if w.steps:
            ax.annotate(f"step {w.steps[1]}", (x, 1.0), xycoords=("data", "axes fraction"), rotation=90, va="top",
                        ha="right", fontsize=6, color="#6b7280")
    ax.set_yticks([])
    ax.set_ylim(-0.6, len(units) - 0.1)
    ax.set_xlabel("seconds since the run's first sample")
    ax.set_title("colocated judges: asleep (grey), wakes (green), failures (red)", fontsize=10)
    ax.set_gid("residency-timeline")
    return _svg(fig)
