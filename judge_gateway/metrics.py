"""Prometheus metrics of one gateway (its own registry, so several can live in one process).

What a request adds (its counts and latencies) is recorded as a plain tuple on a list (`count`,
`observe`) and applied to the registry when it is read (`render`, `flush`) or when the list holds
FLUSH_AT of them: prometheus_client's labels() lookup and its locks cost ~5% of a yes/no request's
CPU on the serving path, and nothing reads the registry between scrapes. Gauges of state (the
admission slots, the media budget, the judge queues) are read from their sources at each scrape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
FLUSH_AT = 4096  # recorded updates applied at once when no scrape came for this many


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "judge_gateway_requests_total", "Reward requests by API and outcome.",
            ["api", "status"], registry=self.registry,
        )
        self.request_latency = Histogram(
            "judge_gateway_request_latency_seconds", "Wall time of a whole reward request.",
            ["api"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.samples = Counter(
            "judge_gateway_samples_total", "Samples scored.", registry=self.registry,
        )
        self.judge_latency = Histogram(
            "judge_gateway_judge_latency_seconds", "Time one judge spent on one sample.",
            ["judge"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.scores = Counter(
            "judge_gateway_scores_total", "Judge scores by validity.",
            ["judge", "valid"], registry=self.registry,
        )
        self.invalid_scores = Counter(
            "judge_gateway_invalid_scores_total", "Invalid judge scores by error code.",
            ["judge", "code"], registry=self.registry,
        )

        self.cancelled_requests = Counter(
            "judge_gateway_cancelled_requests_total",
            "Requests whose scoring was cancelled because the HTTP client disconnected first.",
            ["api"], registry=self.registry,
        )
        self.cancelled_scores = Counter(
            "judge_gateway_cancelled_scores_total",
            "Judge scores (sample x judge) cancelled before they finished, by judge.",
            ["judge"], registry=self.registry,
        )
        # Encodes a request's judges share (MediaCache): two video judges on one clip with the
        # same sampling add one encode and one hit.
        self.media_encodes = Counter(
            "judge_gateway_media_encodes_total",
            "Media encoded for VLM requests (once per distinct medium and encoding in a request), by kind.",
            ["kind"], registry=self.registry,
        )
        self.media_cache_hits = Counter(
            "judge_gateway_media_cache_hits_total",
            "Encodes reused by another judge or sample of the same request, by kind.",
            ["kind"], registry=self.registry,
        )
        self.admission_active = Gauge(
            "judge_gateway_admission_active", "Synchronous requests scoring now.", registry=self.registry,
        )
        self.admission_waiting = Gauge(
            "judge_gateway_admission_waiting", "Synchronous requests waiting for a slot.", registry=self.registry,
        )
        self.admission_limit = Gauge(
            "judge_gateway_admission_limit", "The admission bounds (server.admission): max_active, "
            "max_waiting, max_wait_s.", ["bound"], registry=self.registry,
        )
        self.admission_refused = Counter(
            "judge_gateway_admission_refused_total", "Synchronous requests refused by admission control, by API "
            "and reason (queue_full, wait_timeout, backend_busy, media_budget, media_backlog, judge_queue).",
            ["api", "reason"], registry=self.registry,
        )
        self.media_budget = Gauge(
            "judge_gateway_media_budget_pixels", "The process-wide decoded-media budget (media.max_process_pixels): "
            "state=limit, and state=in_use, the decoded pixels reserved by the requests scoring now.",
            ["state"], registry=self.registry,
        )
        self.media_budget_waiting = Gauge(
            "judge_gateway_media_budget_waiting", "Requests waiting for room in the decoded-media budget.",
            registry=self.registry,
        )
        self.judge_queue = Gauge(
            "judge_gateway_judge_queue", "A head judge's queue: items (images or frames) or their pixels "
            "(measure) accepted and not answered (state=queued), and its bound (state=limit).",
            ["judge", "measure", "state"], registry=self.registry,
        )
        # Colocated judges (judges.NAME.residency): their sleeps and wakes (residency/controller.py).
        self.residency_state = Gauge(
            "judge_gateway_residency_state", "A colocated judge's residency state: 1 for the state it is in (awake, "
            "draining, sleeping, asleep, waking, failed), 0 for the others.",
            ["judge", "state"], registry=self.registry,
        )
        self.residency_wakes = Counter(
            "judge_gateway_residency_wakes_total", "Wakes of a colocated judge, by outcome (ok, failed).",
            ["judge", "outcome"], registry=self.registry,
        )
        self.residency_sleeps = Counter(
            "judge_gateway_residency_sleeps_total", "Sleeps of a colocated judge, by trigger (told, header, "
            "flow_factory, idle) and outcome (ok; refused: work in flight past drain_timeout_s, nothing dropped; "
            "failed).", ["judge", "trigger", "outcome"], registry=self.registry,
        )
        self.residency_wake_seconds = Histogram(
            "judge_gateway_residency_wake_seconds", "How long a colocated judge's wake took (weights back on its "
            "device, or reloaded).", ["judge"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.residency_asleep = Gauge(
            "judge_gateway_residency_asleep_seconds", "Seconds a colocated judge has been asleep since the gateway "
            "started (the current span included).", ["judge"], registry=self.registry,
        )
        self.residency_waiting = Gauge(
            "judge_gateway_residency_waiting", "Calls waiting for a colocated judge to wake.",
            ["judge"], registry=self.registry,
        )
        self.ignored_fields = Counter(
            "judge_gateway_ignored_request_fields_total",
            "Request fields a protocol adapter received and does not use, by API and field name (each is "
            "logged once); names past the first 256, or not plain identifiers, count as `(other)`.",
            ["api", "field"], registry=self.registry,
        )
        # Comparative judges, counted once per group from its report (comparisons/report.py): the
        # rates a dashboard wants are ratios of these counters (swap agreement = agreed="true" over
        # all; a 3-cycle rate = cycles over triads).
        self.comparison_groups = Counter(
            "judge_gateway_comparison_groups_total",
            "Groups judged by a comparative judge, by whether the group's deadline cut its comparisons.",
            ["judge", "timed_out"], registry=self.registry,
        )
        self.comparisons = Counter(
            "judge_gateway_comparisons_total",
            "Pairs compared by a comparative judge, by outcome: done (in the aggregation), masked "
            "(its two orders disagreed, or one failed, as configured), failed (no valid verdict).",
            ["judge", "status"], registry=self.registry,
        )
        self.comparison_calls = Counter(
            "judge_gateway_comparison_calls_total",
            "Verdicts asked of a comparative judge's backend, by outcome: `valid` or the error code.",
            ["judge", "outcome"], registry=self.registry,
        )
        self.comparison_swap_pairs = Counter(
            "judge_gateway_comparison_swap_pairs_total",
            "Pairs asked in both orders with both verdicts valid, by whether the two named the same winner.",
            ["judge", "agreed"], registry=self.registry,
        )
        self.comparison_triads = Counter(
            "judge_gateway_comparison_triads_total",
            "Triads of a group whose three pairs were decided, and how many of them were 3-cycles.",
            ["judge", "cycle"], registry=self.registry,
        )
        self._at_scrape: list[Callable[[], None]] = []  # gauges read from their sources at each scrape
        # (metric, label values, amount or value, observe?) recorded on the serving path (count, observe)
        self._pending: list[tuple[Any, tuple[str, ...], float, bool]] = []
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def count(self, metric: Counter, labels: tuple[str, ...] = (), amount: float = 1.0) -> None:
        """`metric.labels(*labels).inc(amount)`, applied at the next read of the registry."""
        self._pending.append((metric, labels, amount, False))
        if len(self._pending) >= FLUSH_AT:
            self.flush()

    def observe(self, metric: Histogram, labels: tuple[str, ...], value: float) -> None:
        """`metric.labels(*labels).observe(value)`, applied at the next read of the registry."""
        self._pending.append((metric, labels, value, True))
        if len(self._pending) >= FLUSH_AT:
            self.flush()

    def flush(self) -> None:
        """Apply every recorded update to the registry (in order)."""
        pending, self._pending = self._pending, []
        children = self._children
        for metric, labels, value, is_observation in pending:
            key = (id(metric), labels)
            child = children.get(key)
            if child is None:
                child = children[key] = metric.labels(*labels) if labels else metric
            if is_observation:
                child.observe(value)
            else:
                child.inc(value)

    def watch_admission(self, admission: Any) -> None:
        """Export the synchronous APIs' admission state (server/admission.py), read at each scrape."""
        def read() -> None:
            self.admission_active.set(admission.active)
            self.admission_waiting.set(admission.waiting)
        self._at_scrape.append(read)

    def watch_media_budget(self, budget: Any) -> None:
        """Export the process-wide decoded-media budget (media/budget.py), read at each scrape."""
        def read() -> None:
            self.media_budget.labels("limit").set(budget.limit)
            self.media_budget.labels("in_use").set(budget.in_use)
            self.media_budget_waiting.set(budget.waiting)
        self._at_scrape.append(read)

    def watch_residency(self, residency: Any) -> None:
        """Export the colocated judges' states, time asleep and waiting calls, read at each scrape."""
        self._at_scrape.append(lambda: residency.read_gauges(self.residency_state, self.residency_asleep,
                                                             self.residency_waiting))

    def watch_queues(self, queues: dict[str, Any]) -> None:
        """Export each bounded judge queue (judges/queue.py): what it holds and its bounds."""
        def read() -> None:
            for judge, q in queues.items():
                for measure, queued, limit in (("items", q.items, q.max_items), ("pixels", q.pixels, q.max_pixels)):
                    self.judge_queue.labels(judge, measure, "queued").set(queued)
                    self.judge_queue.labels(judge, measure, "limit").set(limit)
        self._at_scrape.append(read)

    def observe_media(self, encodes: dict[str, int], hits: dict[str, int]) -> None:
        for kind, n in encodes.items():
            self.count(self.media_encodes, (kind,), n)
        for kind, n in hits.items():
            self.count(self.media_cache_hits, (kind,), n)

    def observe_group(self, judge: str, report: Mapping[str, Any]) -> None:
        """A comparative judge's report on one group (`details.group` of its members)."""
        self.count(self.comparison_groups, (judge, "true" if report.get("timed_out") else "false"))
        for status, n in (report.get("comparisons") or {}).items():
            if n:
                self.count(self.comparisons, (judge, status), n)
        calls = report.get("calls") or {}
        if calls.get("valid"):
            self.count(self.comparison_calls, (judge, "valid"), calls["valid"])
        for code, n in (calls.get("failed") or {}).items():
            self.count(self.comparison_calls, (judge, code), n)
        swap = report.get("swap_agreement") or {}
        if swap.get("pairs"):
            self.count(self.comparison_swap_pairs, (judge, "true"), swap["agreed"])
            self.count(self.comparison_swap_pairs, (judge, "false"), swap["pairs"] - swap["agreed"])
        triads = report.get("transitivity") or {}
        if triads.get("triads"):
            self.count(self.comparison_triads, (judge, "true"), triads["cycles"])
            self.count(self.comparison_triads, (judge, "false"), triads["triads"] - triads["cycles"])

    def render(self) -> bytes:
        self.flush()
        for read in self._at_scrape:
            read()
        return generate_latest(self.registry)

