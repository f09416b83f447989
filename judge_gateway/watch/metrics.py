"""The watch's Prometheus series, on the gateway's registry (served by /metrics). Per-run series
are removed when a run leaves memory (watch.max_runs), so label sets stay bounded."""

from __future__ import annotations

import weakref

from prometheus_client import CollectorRegistry, Counter, Gauge

from .report import AlarmReport, WindowReport


_OF_REGISTRY: "weakref.WeakKeyDictionary[CollectorRegistry, WatchMetrics]" = weakref.WeakKeyDictionary()


def watch_metrics(registry: CollectorRegistry) -> "WatchMetrics":
    """The watch's series on `registry`, made once: a registry refuses a second series of a name, and
    one gateway may serve several apps (create_app called again on it, as the tests do)."""
    metrics = _OF_REGISTRY.get(registry)
    if metrics is None:
        metrics = _OF_REGISTRY[registry] = WatchMetrics(registry)
    return metrics


class WatchMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.samples = Counter("judge_gateway_watch_samples_total", "Samples of watched requests: offered (a "
                               "training judge with shadows scored them), sampled, scored by the shadows.",
                               ["outcome"], registry=registry)
        self.shed = Counter("judge_gateway_watch_shed_total", "Sampled samples the shadows never scored, by reason "
                            "(queue_full, waited_too_long, late_window, too_many_runs, shadow_error, shutdown).",
                            ["reason"], registry=registry)
        self.queue_depth = Gauge("judge_gateway_watch_queue_depth", "Sampled samples waiting for the shadows.",
                                 registry=registry)
        self.in_flight = Gauge("judge_gateway_watch_in_flight", "Samples in shadow scoring now.", registry=registry)
        self.window = Gauge("judge_gateway_watch_window", "The last sealed window of a run.", ["run"],
                            registry=registry)
        self.mean = Gauge("judge_gateway_watch_mean", "A judge's mean valid reward in the run's last sealed window.",
                          ["run", "judge"], registry=registry)
        self.invalid_rate = Gauge("judge_gateway_watch_invalid_rate", "A judge's invalid share in the run's last "
                                  "sealed window.", ["run", "judge"], registry=registry)
        self.spearman = Gauge("judge_gateway_watch_spearman", "Spearman of a training judge and a shadow in the "
                              "run's last sealed window.", ["run", "train", "shadow"], registry=registry)
        self.drift_ks = Gauge("judge_gateway_watch_drift_ks", "KS distance of a judge's last sealed window from "
                              "the run's baseline.", ["run", "judge"], registry=registry)
        self.alarm = Gauge("judge_gateway_watch_alarm", "1 while an alarm fires.", ["run", "kind", "judge", "shadow"],
                           registry=registry)
        self.alarms = Counter("judge_gateway_watch_alarms_total", "Alarm episodes fired.", ["run", "kind"],
                              registry=registry)
        self._per_run = (self.window, self.mean, self.invalid_rate, self.spearman, self.drift_ks, self.alarm,
                         self.alarms)

    def sealed(self, run: str, window: WindowReport, fired: list[AlarmReport], firing: list[AlarmReport],
               resolved: list[AlarmReport]) -> None:
        """A window was sealed: its figures; alarms that fired at this seal, fire now, resolved at it."""
        self.window.labels(run).set(window.window)
        for judge, stats in window.judges.items():
            if stats.mean is not None:
                self.mean.labels(run, judge).set(stats.mean)
            if stats.invalid_rate is not None:
                self.invalid_rate.labels(run, judge).set(stats.invalid_rate)
            if stats.drift_ks is not None:
                self.drift_ks.labels(run, judge).set(stats.drift_ks)
        for pair in window.pairs:
            if pair.spearman is not None:
                self.spearman.labels(run, pair.train, pair.shadow).set(pair.spearman)
        for alarm in fired:
            self.alarms.labels(run, alarm.kind).inc()
        for alarm in resolved:
            self.alarm.labels(run, alarm.kind, alarm.judge, alarm.shadow or "").set(0)
        for alarm in firing:
            self.alarm.labels(run, alarm.kind, alarm.judge, alarm.shadow or "").set(1)

    def forget(self, run: str) -> None:
        """Drop every series of a run that left memory."""
        for metric in self._per_run:
            for labels in list(metric._metrics):  # noqa: SLF001 - prometheus_client has no public listing
                if labels[0] == run:
                    metric.remove(*labels)
