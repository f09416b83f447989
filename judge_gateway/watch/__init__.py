"""The reward-hacking watch: shadow judges score a sampled share of live training traffic off the
critical path; per-window statistics raise alarms (docs/guides/watch.md).

    tags.py      a request's run and step (native fields, X-Judge-Gateway-Run / -Step headers)
    service.py   Watch: the bounded, shedding queue, the shadow workers, when windows are sealed
    watched_run.py  one run: its scored samples per window, sealing (statistics, record, report)
    windows.py   cutting a run into windows (by step, else by count and time); sealing
    stats.py     the statistics (ranks, Spearman, Mann-Whitney, KS, Wasserstein-1, ...)
    alarms.py    the alarm rules;  monitor.py  a run's window figures and alarm episodes
    disagree.py  where training and shadow disagree;  thumbs.py  thumbnails
    record.py    the run folder;  report.py  GET /v1/watch and watch.json;  metrics.py  Prometheus
"""

from .monitor import RunMonitor
from .report import AlarmReport, Disagreement, RunReport, WatchReport, WindowReport
from .service import Watch
from .tags import DEFAULT_RUN, RUN_HEADER, STEP_HEADER, BadTags, RunTags, tags_from
from .windows import Window

__all__ = [
    "Watch", "RunTags", "BadTags", "tags_from", "RUN_HEADER", "STEP_HEADER", "DEFAULT_RUN",
    "RunMonitor", "Window", "WatchReport", "RunReport", "WindowReport", "AlarmReport", "Disagreement",
]
