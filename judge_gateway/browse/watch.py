"""The watch page, from either of two sources:

- a watch run folder (judge_gateway/watch/record.py), read live, so the page follows the gateway
  writing it: watch.json is read again whenever it changes, and a sample is looked up in the
  scores files when it is opened;
- a live gateway over HTTP (`browse --gateway URL`): GET /v1/watch for the runs it holds in
  memory, GET /v1/watch/thumbnail for their thumbnails.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from .. import runs
from ..watch import RunReport, WatchReport
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
        folder = runs.RunFolder(self.run.path)
        files = [folder.scores_file, *(path for _, path in reversed(folder.rotated_scores()))]
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


def watch_context(report: RunReport | None, title: str, problem: str | None, refresh_s: int,
                  thumb_src: Callable[[int], str], sample_href: Callable[[int], str]) -> dict[str, Any]:
    plots, firing, resolved = [], [], []
    if report is not None and report.windows:
        plots = [charts.watch_curves(report, train, shadows) for train, shadows in report.train.items()]
        plots.append(charts.watch_invalid(report))
    if report is not None and report.residency:
        plots.append(charts.residency_timeline(report))
    if report is not None:
        firing = [a for a in report.alarms if a.state == "firing"]
        resolved = [a for a in report.alarms if a.state == "resolved"]
    return {"heading": title, "report": report, "problem": problem, "charts": plots, "firing": firing,
            "resolved": resolved, "refresh_s": refresh_s, "thumb_src": thumb_src, "sample_href": sample_href}


def thumbnail_path(folder: WatchFolder, index: int) -> Path | None:
    line = folder.line(index)
    return folder.run.resolve(line.get("image") or "") if line else None


class GatewayWatch:
    """A live gateway's watch, read over HTTP (with its API key when it has one)."""

    def __init__(self, url: str, api_key: str | None = None, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=timeout_s,
                                  headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
        self._last: WatchReport | None = None
        self.problem: str | None = None

    def report(self) -> WatchReport | None:
        """The gateway's report now; on failure the last one read, and `problem` says why."""
        try:
            r = self._http.get("/v1/watch", params={"windows": 100_000})
            r.raise_for_status()
            self._last = WatchReport.model_validate_json(r.content)
            self.problem = None if self._last.enabled else f"{self.url}: the gateway's watch is off ([watch] enabled)"
        except (httpx.HTTPError, ValidationError, ValueError) as err:
            self.problem = f"{self.url}/v1/watch: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        return self._last

    def run(self, name: str) -> RunReport | None:
        report = self.report()
        return next((r for r in report.runs if r.run == name), None) if report else None

    def thumbnail(self, run: str, index: int) -> bytes | None:
        try:
            r = self._http.get("/v1/watch/thumbnail", params={"run": run, "index": index})
        except httpx.HTTPError:
            return None
        return r.content if r.status_code == 200 else None

    def close(self) -> None:
        self._http.close()
