"""Request fields a protocol adapter receives and does not use: never dropped silently. Each
name is logged once (per process) and counted in /metrics
(`judge_gateway_ignored_request_fields_total{api, field}`); the label set is bounded, so a
client inventing names cannot grow the metrics without end."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

from ..metrics import Metrics

log = logging.getLogger(__name__)
MAX_NAMES = 256
OTHER = "(other)"
_NAME_RE = re.compile(r"^[A-Za-z0-9_.\[\]-]{1,64}$")


class IgnoredFields:
    def __init__(self, metrics: Metrics, api: str) -> None:
        self.metrics = metrics
        self.api = api
        self._seen: set[str] = set()

    def note(self, names: Iterable[str], why: str) -> None:
        """Count each ignored field name; the first time a name is seen, log it with `why`."""
        for name in names:
            label = name if _NAME_RE.match(name) and (name in self._seen or len(self._seen) < MAX_NAMES) else OTHER
            if label not in self._seen:
                self._seen.add(label)
                log.warning("%s: request field %r is not used (%s); logged once, counted in "
                            "judge_gateway_ignored_request_fields_total", self.api, name[:80], why)
            self.metrics.count(self.metrics.ignored_fields, (self.api, label))
