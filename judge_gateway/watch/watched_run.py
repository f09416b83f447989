"""One watched run's state between samples and record: its open windows, the scored samples each
holds until it is sealed (with the thumbnails of its most disagreeing ones), and sealing: the
window's statistics and alarms (monitor.py), the metrics, the warning log line, the record
(record.py) and the run's report for GET /v1/watch.

`seal` runs in a worker thread, one seal of a run at a time (the caller holds `lock`); everything
else runs on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import WatchConfig
from ..runs import ScoreLine
from ..schema import JudgeScore, ResidencyEvent
from .disagree import Gap, Reference, TopK, largest_gap
from .metrics import WatchMetrics
from .monitor import RunMonitor
from .record import RunRecord
from .report import Disagreement, RunReport
from .windows import RunWindows, Window

log = logging.getLogger(__name__)

RUN_DISAGREEMENTS = 24  # most disagreeing samples listed per run


@dataclass
class Entry:
    """A scored sample held in its window until the window is sealed."""

    line: dict[str, Any]  # its scores.jsonl line (runs.ScoreLine once written), less the index it gets then
    row: dict[str, float | None]  # judge -> reward, None when invalid: what the statistics read
    gap: Gap | None
    thumb: tuple[bytes, str] | None = None  # (JPEG, "image" | "video") while it ranks in its window


@dataclass
class Sampled:
    """Where a scored sample came from (the request, its place in it, its run's step and window)."""

    api: str
    request_id: str
    position: int
    step: int | None
    window: Window
    watched_at: float


class WatchedRun:
    def __init__(self, name: str, cfg: WatchConfig, folder: Path, config_sha256: str,
                 timeline: Callable[[float], list[ResidencyEvent]] | None = None) -> None:
        self.name = name
        self.started_at = time.time()
        self.timeline = timeline  # the colocated judges' sleeps and wakes since a time (residency/)
        self.cfg = cfg
        self.folder = folder
        self.config_sha256 = config_sha256
        self.windows = RunWindows(steps_per_window=cfg.steps_per_window, window_samples=cfg.window_samples,
                                  window_s=cfg.window_s, max_step_jump=cfg.max_step_jump,
                                  resync_requests=cfg.resync_requests)
        self.monitor = RunMonitor(name, cfg)
        self.record: RunRecord | None = None
        self.record_error: str | None = None
        self.entries: dict[int, list[Entry]] = {}  # window number -> its scored samples
        self.tops: dict[int, TopK[Entry]] = {}  # window number -> its samples with the largest gaps
        self.refs: dict[str, Reference] = {}
        self.disagreements: TopK[Disagreement] = TopK(RUN_DISAGREEMENTS)
        self.thumbnails = 0
        self.last_seen = 0.0
        self.said_windowing = False  # the log has said this run is windowed by count and time
        self.lock = asyncio.Lock()  # one seal of this run at a time
        self.report: RunReport | None = None  # as of its last seal

    # ---- samples (event loop) ----------------------------------------------------------------

    def entry(self, origin: Sampled, prompt: str, group_id: str | None, scores: dict[str, JudgeScore]) -> Entry:
        row = {j: (s.reward if s.valid else None) for j, s in scores.items()}
        gap = largest_gap(row, self.monitor.shadows, self.refs)
        train = [t for t in scores if t in self.cfg.shadows]
        line = {
            "source": f"watch:{origin.api}", "key": f"{origin.request_id}:{origin.position}", "prompt": prompt,
            "run": self.name, "step": origin.step, "window": origin.window.number, "api": origin.api,
            "request_id": origin.request_id, "watched_at": origin.watched_at,
            **({"group_id": group_id} if group_id else {}),
            "scores": {j: s.model_dump(mode="json") for j, s in scores.items()},
            "reward": None, "valid": all(s.valid for s in scores.values()),
            "watch": {"train": train, "shadows": [s for s in scores if s not in train],
                      "gap": gap.value if gap else None, "gap_pair": [gap.train, gap.shadow] if gap else None},
        }
        return Entry(line, row, gap)

    def wants_thumbnail(self, window: Window, entry: Entry) -> bool:
        """Would the entry rank among its window's thumbnails (so it is worth drawing one)?"""
        if entry.gap is None or self.thumbnails >= self.cfg.max_thumbnails:
            return False
        top = self.tops.get(window.number)
        return top.would_take(entry.gap.value) if top is not None else self.cfg.thumbnails_per_window > 0

    def keep_thumbnail(self, window: Window, entry: Entry, thumb: tuple[bytes, str] | None) -> None:
        entry.thumb = thumb
        if thumb is None or entry.gap is None:
            return
        dropped = self.tops.setdefault(window.number, TopK(self.cfg.thumbnails_per_window)).offer(entry.gap.value,
                                                                                                   entry)
        if dropped is not None:
            dropped.thumb = None  # its bytes are not kept

    def add(self, window: Window, entry: Entry) -> None:
        self.entries.setdefault(window.number, []).append(entry)
        self.windows.add(window, entry.row)

    # ---- sealing (a worker thread) -----------------------------------------------------------

    def seal(self, windows: list[Window], metrics: WatchMetrics) -> None:
        """Statistics, alarms, record and report of sealed windows."""
        for window in windows:
            before = self.monitor.firing()
            report, fired = self.monitor.seal(window, time.time())
            for alarm in fired:
                log.warning("%s", alarm.message)
            firing = self.monitor.firing()
            metrics.sealed(self.name, report, fired, firing, resolved=[a for a in before if a not in firing])
            self._write(window)
        self.report = self._report()
        if self.record is not None:
            try:
                self.record.write_report(self.report)
            except OSError as err:
                self._record_failed(err)

    def _write(self, window: Window) -> None:
        entries = self.entries.pop(window.number, [])
        top = self.tops.pop(window.number, None)
        if not entries:
            return
        try:
            if self.record is None:
                info = {"run": self.name, "source": "watch", "judges": self.monitor.judges,
                        "watch": {"shadows": self.monitor.shadows, "sample_rate": self.cfg.sample_rate},
                        "config_sha256": self.config_sha256, "media_roots": []}
                self.record = RunRecord(self.folder, self.name, info, max_file_bytes=self.cfg.max_file_bytes,
                                        keep_files=self.cfg.keep_files, max_run_folders=self.cfg.max_run_folders,
                                        max_run_age_s=self.cfg.max_run_age_days * 86400)
            record = self.record
            record.update_judges(self.monitor.judges)
            kept = {id(e) for e in (top.items() if top else [])}
            for entry in entries:
                entry.line["index"] = index = record.next_index
                record.next_index += 1
                if id(entry) in kept and entry.thumb is not None and self.thumbnails < self.cfg.max_thumbnails:
                    entry.line["image"] = record.thumbnail(index, entry.thumb[0])
                    entry.line["watch"]["thumbnail_of"] = entry.thumb[1]
                    self.thumbnails += 1
                if entry.gap is not None:
                    self._disagreement(entry)
            record.append([ScoreLine.model_validate(e.line) for e in entries])
        except OSError as err:
            self._record_failed(err)

    def _disagreement(self, entry: Entry) -> None:
        line, gap = entry.line, entry.gap
        assert gap is not None
        scores = line["scores"]
        self.disagreements.offer(gap.value, Disagreement(
            index=line["index"], window=line["window"], step=line["step"], prompt=line["prompt"], train=gap.train,
            shadow=gap.shadow, train_reward=scores[gap.train]["reward"], shadow_reward=scores[gap.shadow]["reward"],
            gap=gap.value, thumbnail=line.get("image"), api=line["api"], request_id=line["request_id"]))

    def _record_failed(self, err: OSError) -> None:
        if self.record_error is None:
            log.error("watch run %r: its record cannot be written under %s: %s", self.name, self.folder, err)
        self.record_error = f"{type(err).__name__}: {err}"

    # ---- reports -----------------------------------------------------------------------------

    def note(self) -> str | None:
        if self.windows.mode != "time":
            return None
        return (f"the trainer sent no step: windows close after watch.window_samples = {self.cfg.window_samples} "
                f"sampled samples or watch.window_s = {self.cfg.window_s} s")

    def _report(self) -> RunReport:
        """The run as of a seal (in the seal's worker thread)."""
        return RunReport(run=self.name, folder=str(self.record.folder) if self.record else None,
                         windowing=self.windows.mode or "time", note=self.note(), record_error=self.record_error,
                         train=dict(self.monitor.shadows), open_samples=self.windows.open_samples,
                         pending=self.windows.pending, windows=list(self.monitor.reports),
                         alarms=list(self.monitor.alarms), disagreements=self.disagreements.items(),
                         residency=self._residency())

    def _residency(self) -> list[ResidencyEvent]:
        return self.timeline(self.started_at) if self.timeline is not None else []

    def current(self, windows: int) -> RunReport:
        """GET /v1/watch's view: the last seal's report (nothing a seal thread writes is read here)
        with the live counts, and its last `windows` windows."""
        base = self.report or RunReport(run=self.name, folder=None, windowing=self.windows.mode or "time",
                                        note=self.note(), train=dict(self.monitor.shadows), open_samples=0,
                                        pending=0, windows=[], alarms=[], disagreements=[])
        return base.model_copy(update={"open_samples": self.windows.open_samples, "pending": self.windows.pending,
                                       "windows": base.windows[-windows:] if windows else [],
                                       "residency": self._residency()})

    def thumbnail_file(self, index: int) -> Path | None:
        return self.record.thumbnail_file(index) if self.record is not None and index >= 0 else None

    def close(self) -> None:
        if self.record is not None:
            self.record.close()
