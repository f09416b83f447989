"""One metrics wrapper for every scoring route: whatever way the route ends, one count in
judge_gateway_requests_total{api, status} and one latency observation; a client that left is
counted in judge_gateway_cancelled_requests_total too."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from ..metrics import Metrics


class Outcome:
    """How the request ended; the route sets it. Left at "error" when the route raises."""

    def __init__(self, metrics: Metrics, api: str) -> None:
        self.metrics = metrics
        self.api = api
        self.status = "error"

    def cancelled(self) -> None:
        self.status = "cancelled"
        self.metrics.count(self.metrics.cancelled_requests, (self.api,))


@contextmanager
def metered(metrics: Metrics, api: str) -> Iterator[Outcome]:
    outcome = Outcome(metrics, api)
    started = time.perf_counter()
    try:
        yield outcome
    finally:
        metrics.count(metrics.requests, (api, outcome.status))
        metrics.observe(metrics.request_latency, (api,), time.perf_counter() - started)
