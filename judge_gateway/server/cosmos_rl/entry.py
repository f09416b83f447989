"""A cosmos-rl request's entry in the result store, typed: pending from enqueue until its one final
entry (done or failed) replaces it.

The store keeps each entry as a JSON object under the request's uuid; `to_store()` writes exactly
the keys, in the order, that entries have always had, and `read_entry` reads every entry written
so far (older gateway versions and other replicas share the store). A key the reader does not know
is ignored; a missing optional key reads as absent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

from ...exceptions import Unavailable
from ...schema import ErrorCode


class UnreadableEntry(Unavailable, ValueError):
    """A stored entry that is no cosmos-rl entry (its `status` is none of pending, done, failed)."""


@dataclass(frozen=True)
class Accepted:
    """What an accepted request's entry keeps from enqueue to its end: the rewards it asked for,
    the ones it skipped (weight <= 0), and one prompt per sample (a failed request's filled lists
    are grouped by them). None: the entry has no such key (a malformed queue entry's failure)."""

    rewards: list[str] | None = None
    skipped: list[str] | None = None
    prompts: list[str] | None = None

    def as_fields(self) -> dict[str, Any]:
        pairs = (("rewards", self.rewards), ("skipped", self.skipped), ("prompts", self.prompts))
        return {k: v for k, v in pairs if v is not None}

    @classmethod
    def of_fields(cls, raw: dict[str, Any]) -> Accepted:
        return cls(raw.get("rewards"), raw.get("skipped"), raw.get("prompts"))


@dataclass(frozen=True)
class PendingEntry:
    """Accepted, not finished: `owner` is the gateway process that accepted it (its heartbeat says
    whether it lives), `deadline` the wall time by which it must be finished."""

    accepted: Accepted
    owner: str | None = None
    accepted_at: float | None = None
    deadline: float = 0.0
    watch: dict[str, Any] | None = None  # the request's run tags (watch.RunTags.as_entry())
    status: Literal["pending"] = "pending"

    def to_store(self) -> dict[str, Any]:
        head: dict[str, Any] = {"status": self.status}
        if self.owner is not None:
            head["owner"] = self.owner
        if self.accepted_at is not None:
            head["accepted_at"] = self.accepted_at
        return {**head, "deadline": self.deadline, **self.accepted.as_fields(),
                **({"watch": self.watch} if self.watch is not None else {})}


@dataclass(frozen=True)
class DoneEntry:
    """Scored: one result envelope (envelope.py) per reward the request asked for."""

    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    finished_at: float | None = None
    status: Literal["done"] = "done"

    def to_store(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "results": self.results, "skipped": self.skipped}
        if self.finished_at is not None:
            out["finished_at"] = self.finished_at
        return out


@dataclass(frozen=True)
class FailedEntry:
    """Failed as a whole: why, and the error code every sample's fill carries."""

    accepted: Accepted
    reason: str | None
    code: str = ErrorCode.backend_error.value
    finished_at: float | None = None
    status: Literal["failed"] = "failed"

    @classmethod
    def now(cls, reason: str, accepted: Accepted | None,
            code: ErrorCode = ErrorCode.backend_error) -> FailedEntry:
        return cls(accepted or Accepted(), reason, code.value, time.time())

    def to_store(self) -> dict[str, Any]:
        out = {**self.accepted.as_fields(), "status": self.status, "reason": self.reason, "code": self.code}
        if self.finished_at is not None:
            out["finished_at"] = self.finished_at
        return out


Entry = PendingEntry | DoneEntry | FailedEntry
FinalEntry = DoneEntry | FailedEntry


def read_entry(raw: dict[str, Any]) -> Entry:
    """The typed entry of a stored JSON object; UnreadableEntry when it is no cosmos-rl entry."""
    status = raw.get("status")
    if status == "pending":
        return PendingEntry(Accepted.of_fields(raw), raw.get("owner"), raw.get("accepted_at"),
                            float(raw.get("deadline", 0)), raw.get("watch"))
    if status == "done":
        return DoneEntry(raw.get("results", {}), raw.get("skipped", []), raw.get("finished_at"))
    if status == "failed":
        return FailedEntry(Accepted.of_fields(raw), raw.get("reason"),
                           raw.get("code", ErrorCode.backend_error.value), raw.get("finished_at"))
    raise UnreadableEntry(f"a stored entry with status {str(status)[:40]!r} is no cosmos-rl request's entry")


def kept_s(store: object) -> float:
    """How long the store keeps an entry (store.ttl_s): the bound on retrying a result's write."""
    return float(getattr(store, "ttl_s", 3600.0))
