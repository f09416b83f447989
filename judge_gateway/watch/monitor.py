"""One run's statistics: each sealed window's figures, the baseline, and the alarms' episodes.

Pure bookkeeping over sealed windows (no I/O, no clock): the live watch feeds it what it
scores, and a test can feed it recorded score streams the same way.

An alarm fires when its rule holds at `alarms.persist` consecutive seals; it stays firing while
the rule keeps holding and resolves after `persist` seals in a row without it (or not judged).
(Divergence also compares with the baseline, so a hack that plateaus keeps its alarm firing.)
Each episode is one AlarmReport; the count of episodes per kind is what the metrics count.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ..config import WatchConfig
from .alarms import Check, evaluate, invalid_count, paired_scores, valid_scores
from .report import AlarmReport, JudgeWindow, PairWindow, WindowReport
from .stats import ks_2samp, spearman, summarize, wasserstein1
from .windows import Window

MAX_ALARMS = 500  # alarm episodes kept per run (the oldest resolved ones go first)


@dataclass
class _Episode:
    held: int = 0  # consecutive seals the rule held
    quiet: int = 0  # consecutive seals it did not, while firing
    alarm: AlarmReport | None = None  # the open episode


class RunMonitor:
    def __init__(self, run: str, cfg: WatchConfig) -> None:
        self.run = run
        self.cfg = cfg
        # The rules read at most the last 2N windows' rows; older windows live on as their reports.
        self.history: deque[Window] = deque(maxlen=2 * cfg.alarms.windows)
        self.reports: deque[WindowReport] = deque(maxlen=cfg.history_windows)
        self.baseline: list[Window] = []
        self.alarms: list[AlarmReport] = []
        self.shadows: dict[str, list[str]] = {}  # training judge -> shadows, as seen in this run
        self._episodes: dict[tuple[str, str, str | None], _Episode] = {}

    def watch_pair(self, train: str, shadows: list[str]) -> None:
        known = self.shadows.get(train, [])
        if any(s not in known for s in shadows):
            # a new dict, never a change in place: a seal may be reading the old one in a thread
            self.shadows = {**self.shadows, train: [*known, *(s for s in shadows if s not in known)]}

    @property
    def judges(self) -> list[str]:
        return list(dict.fromkeys([*self.shadows, *(s for ss in self.shadows.values() for s in ss)]))

    def seal(self, window: Window, sealed_at: float) -> tuple[WindowReport, list[AlarmReport]]:
        """Take a sealed window: its figures, and the alarms that fired at this seal."""
        is_baseline = len(self.baseline) < self.cfg.baseline_windows
        if is_baseline:
            self.baseline.append(window)
        self.history.append(window)
        report = self._window_report(window, sealed_at, is_baseline)
        self.reports.append(report)
        fired = self._judge(evaluate(self.history, self.baseline, self.shadows, self.cfg.alarms), window)
        return report, fired

    def _window_report(self, window: Window, sealed_at: float, is_baseline: bool) -> WindowReport:
        judges: dict[str, JudgeWindow] = {}
        for judge in self.judges:
            invalid, scored = invalid_count([window], judge)
            if not scored:
                continue
            values = valid_scores([window], judge)
            summary = summarize(values)
            entry = JudgeWindow(scored=scored, valid=len(values), invalid_rate=invalid / scored,
                                **(vars(summary) if summary else {}))
            reference = valid_scores(self.baseline, judge)
            if not is_baseline and values and reference:
                ks = ks_2samp(values, reference)
                assert ks is not None
                entry.drift_ks, entry.drift_p, entry.drift_w1 = ks.d, ks.p, wasserstein1(values, reference)
            judges[judge] = entry
        pairs = []
        for train, shadows in self.shadows.items():
            for shadow in shadows:
                xs, ys = paired_scores([window], train, shadow)
                if xs:
                    pairs.append(PairWindow(train=train, shadow=shadow, pairs=len(xs), spearman=spearman(xs, ys)))
        return WindowReport(window=window.number, steps=window.steps, opened_at=window.opened_at,
                            sealed_at=sealed_at, samples=len(window.rows), baseline=is_baseline,
                            judges=judges, pairs=pairs)

    def _judge(self, checks: list[Check], window: Window) -> list[AlarmReport]:
        fired = []
        judged = {c.key: c for c in checks}
        persist = self.cfg.alarms.persist
        for key in set(judged) | set(self._episodes):
            episode = self._episodes.setdefault(key, _Episode())
            check = judged.get(key)
            if check is not None and check.holds:
                episode.held += 1
                episode.quiet = 0
                if episode.alarm is not None:
                    episode.alarm.last_window = window.number
                elif episode.held >= persist:
                    episode.alarm = AlarmReport(
                        kind=check.kind, judge=check.judge, shadow=check.shadow, state="firing",
                        fired_window=window.number, fired_step=window.steps[1] if window.steps else None,
                        last_window=window.number, message=f"watch run {self.run!r}: {check.message}",
                        evidence=check.evidence)
                    self._keep(episode.alarm)
                    fired.append(episode.alarm)
            else:
                episode.held = 0
                if episode.alarm is not None:
                    episode.quiet += 1
                    if episode.quiet >= persist:
                        episode.alarm.state = "resolved"
                        episode.alarm = None
                        episode.quiet = 0
        return fired

    def _keep(self, alarm: AlarmReport) -> None:
        self.alarms.append(alarm)
        if len(self.alarms) > MAX_ALARMS:
            resolved = next((a for a in self.alarms if a.state == "resolved"), self.alarms[0])
            self.alarms.remove(resolved)

    def firing(self) -> list[AlarmReport]:
        return [e.alarm for e in self._episodes.values() if e.alarm is not None]
