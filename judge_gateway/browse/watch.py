"""The watch page: a watch run folder (judge_gateway/watch/record.py) read live, so the page
follows the gateway that is writing it: watch.json is read again whenever it changes, and a
sample is looked up in the scores files when it is opened."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .. import runs
from ..watch import RunReport
from . import charts
from .data import Run, normalize_lines

WATCH_FILE = "watch.json"


def is_watch_run(run: Run) -> bool:
    return (run.path / WATCH_FILE).is_file()


class WatchFolder:
    """A run folder's watch report, re-read when its file changes."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self._stamp: tuple[int, int] | None = None
        self._report: RunReport | None = None
        self.problem: str | None = None

    def report(self) -> RunReport | None:
        path = self.run.path / WATCH_FILE
        try:
            stat = path.stat()
        except OSError as err:
            self.problem = f"{path}: {err.strerror}"
            return self._report
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp != self._stamp:
            try:
                self._report = RunReport.model_validate_json(path.read_bytes())
                self.problem = None
            except (OSError, ValidationError, ValueError) as err:
                self.problem = f"{path}: not a watch report ({str(err).splitlines()[0]})"
            self._stamp = stamp
        return self._report

    def line(self, index: int) -> dict[str, Any] | None:
        """The scores line of `index`, normalised: the current file first, then the rotated ones."""
        files = [self.run.path / runs.SCORES_FILE, *sorted(self.run.path.glob("scores.*.jsonl"), reverse=True)]
        needle = f'"index": {index}'
        for path in files:
            try:
                with open(path, encoding="utf-8") as f:
                    for text in f:
                        if needle not in text:
                            continue
                        try:
                            line = json.loads(text)
                        except json.JSONDecodeError:
                            continue
                        if isinstance(line, dict) and line.get("index") == index:
                            lines, _ = normalize_lines([line])
                            return lines[0] if lines else None
            except OSError:
                continue
        return None


def watch_context(folder: WatchFolder, r: int, refresh_s: int) -> dict[str, Any]:
    report = folder.report()
    plots, firing, resolved = [], [], []
    if report is not None and report.windows:
        plots = [charts.watch_curves(report, train, shadows) for train, shadows in report.train.items()]
        plots.append(charts.watch_invalid(report))
    if report is not None:
        firing = [a for a in report.alarms if a.state == "firing"]
        resolved = [a for a in report.alarms if a.state == "resolved"]
    return {"run": folder.run, "report": report, "problem": folder.problem, "charts": plots, "firing": firing,
            "resolved": resolved, "r": r, "refresh_s": refresh_s}


def thumbnail_path(folder: WatchFolder, index: int) -> Path | None:
    line = folder.line(index)
    return folder.run.resolve(line.get("image") or "") if line else None
