"""Renders the browser's pages from runs; `Links` says where media and samples live (the server's
URLs, or anchors and data: URLs in the one-file export)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from . import charts
from .data import Run, judge_frames, sample_row, violations_of
from .preview import Clip, probe
from .stats import (
    COMBINED,
    common_judges,
    compare_runs,
    invalid_by_code,
    origin_field,
    rank_groups,
    valid_rewards,
)

_ENV = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                   autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
_ENV.globals.update(violations=violations_of, frames=judge_frames)


def _number(value: float | None, fmt: str = "%.4f") -> str:
    """A figure, or `-` where there is none (no pair, one value): never `nan` on a page."""
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else fmt % value


_ENV.filters["number"] = _number


@dataclass
class Links:
    sample: Callable[[int, int], str]  # (run, index) -> href of the sample's page
    # (run, index, kind) -> src; a video a browser cannot play -> its transcoded preview (preview.py)
    media: Callable[[int, int, str], str | None]
    frames: Callable[[int, int, str], str | None]  # (run, index, judge) -> src of the frames sheet
    nav: Callable[[str], list[dict[str, Any]]]  # current page -> nav entries
    poster: Callable[[int, int], str | None] = lambda r, i: None  # (run, index) -> a video's first frame
    clip: Callable[[int, int], Clip | None] = lambda r, i: None  # (run, index) -> what the video file is


def video_of(run: Run, index: int) -> Path | None:
    """The sample's video file, if it has one the browser may serve."""
    line = run.sample(index) or {}
    return run.resolve(line.get("video") or "")


def clip_of(run: Run, index: int) -> Clip | None:
    video = video_of(run, index)
    return probe(video) if video is not None else None


def grid_context(runs: list[Run], r: int, links: Links, gid: str = "grid") -> dict[str, Any]:
    run = runs[r]
    rows = [sample_row(run, line) for line in run.lines]
    rows.sort(key=lambda x: x["index"])
    return {"run": run, "rows": rows, "gid": gid, "judges": run.judges,
            "codes": sorted({c for x in rows for c in x["codes"]}),
            "bands": sorted({b for x in rows for b in x["bands"]}),
            "has_origin": any(x["model"] or x["checkpoint"] for x in rows),
            "sample_href": lambda i: links.sample(r, i),
            "media_src": lambda i, kind: links.media(r, i, kind) or "",
            "poster_src": lambda i: links.poster(r, i) or ""}


def sample_context(runs: list[Run], r: int, index: int, links: Links) -> dict[str, Any] | None:
    run = runs[r]
    line = run.sample(index)
    if line is None:
        return None
    return {"run": run, "line": line, "judges": run.judges, "player": f"player-{r}-{index}",
            "anchor": f"s-{r}-{index}",
            "media_src": lambda i, kind: links.media(r, i, kind) or "",
            "poster_src": lambda i: links.poster(r, i) or "",
            "clip": links.clip(r, index) if line.get("video") else None,
            "frames_src": lambda i, judge: links.frames(r, i, judge)}


def stats_context(runs: list[Run]) -> dict[str, Any]:
    judges = list(dict.fromkeys(j for run in runs for j in run.judges))
    plots, table = [], []
    no_valid = []
    for judge in judges:
        values = {run.name: valid_rewards(run, judge) for run in runs if judge in run.judges}
        if any(values.values()):
            plots.append(charts.histogram(values, f"{judge}: valid rewards"))
        else:  # an empty histogram says nothing: the table below says why
            no_valid.append(judge)
    for run in runs:
        rates = invalid_by_code(run)
        plots.append(charts.invalid_rates(rates, f"{run.name}: invalid rate by error code"))
        for judge in run.judges:
            scored = [s for x in run.lines if (s := (x.get("scores") or {}).get(judge))]
            invalid = [s for s in scored if not s.get("valid")]
            table.append({"run": run.name, "judge": judge, "valid": len(scored) - len(invalid),
                          "invalid": len(invalid),
                          "codes": ", ".join(f"{c} {100 * p:.1f}%" for c, p in rates.get(judge, {}).items()) or "-"})
    combined = []
    for run in runs:
        valid = valid_rewards(run, COMBINED)
        filled = [float(x["reward"]) for x in run.lines if not x.get("valid") and x.get("reward") is not None]
        combined.append({"run": run.name, "valid": len(valid), "mean": sum(valid) / len(valid) if valid else None,
                         "filled": len(filled), "filled_mean": sum(filled) / len(filled) if filled else None})
    return {"charts": plots, "table": table, "combined": combined, "no_valid": no_valid}


def compare_context(runs: list[Run], a: int, b: int, links: Links, judge: str | None = None) -> dict[str, Any]:
    ra, rb = runs[a], runs[b]
    judges = common_judges(ra, rb)
    comparisons = [compare_runs(ra, rb, j) for j in judges]
    plots = [charts.scatter(c.rewards_a, c.rewards_b, ra.name, rb.name, f"{c.judge}: rho {c.spearman:.3f}")
             for c in comparisons if c.paired]
    rank_judge = judge if judge in judges else judges[0]
    # Samples that name their checkpoint/model: rank those within each run (do A and B agree?);
    # otherwise each run is one generator, ranked against the other.
    groups = [[ra], [rb]] if origin_field([ra, rb]) != "run" else [[ra, rb]]
    rankings = []
    for group in groups:
        field, rows = rank_groups(group, rank_judge)
        title = f"{field}s of {group[0].name}" if len(group) == 1 else "runs"
        rankings.append({"title": title, "field": field, "rows": rows,
                         "chart": charts.ranking(rows, title, rank_judge) if rows else ""})
    return {"a": ra, "b": rb, "runs": runs, "comparisons": comparisons, "charts": plots, "rankings": rankings,
            "paired": any(c.paired for c in comparisons),
            "rank_judge": rank_judge, "judges": judges,
            "sample_href_a": lambda i: links.sample(a, i), "sample_href_b": lambda i: links.sample(b, i)}


def render(template: str, title: str, nav: list[dict[str, Any]], **context: Any) -> str:
    return _ENV.get_template(template).render(title=title, nav=nav, **context)
