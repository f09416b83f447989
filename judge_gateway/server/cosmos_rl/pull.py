"""What a cosmos-rl pull finds for (uuid, reward): one of the outcomes below, read from the store
(or from memory while this process's write of a finished result waits for the store). It starts
nothing in the background; routes.py turns each outcome into its status code and body.

A pending entry is read as failed once it is past its deadline (cosmos_rl.request_timeout_s), or
once its owner's heartbeat is gone (without the durable queue: no other replica would take its
work over). A failed request's pull is filled by the reward's policy under cosmos_rl.on_failed =
fill (`Failed.filled`), since cosmos-rl's trainer never enqueues again; a scored result, once
pulled, may go after store.pulled_ttl_s.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...config import CosmosReward, CosmosRLConfig
from ...store import ResultStore
from .entry import (
    DoneEntry,
    Entry,
    FailedEntry,
    FinalEntry,
    PendingEntry,
    UnreadableEntry,
    read_entry,
)
from .envelope import failed_envelope
from .heartbeat import Heartbeat


@dataclass(frozen=True)
class NotAUuid:
    """The pull's uuid is not a uuid (no store key is read for it)."""


@dataclass(frozen=True)
class NeverAccepted:
    """No entry, and the store never saw one (or forgot it after store.forget_after_s)."""


@dataclass(frozen=True)
class Expired:
    reason: str  # why the store no longer has it (store.gone)


@dataclass(frozen=True)
class StillScoring:
    pass


@dataclass(frozen=True)
class NotAsked:
    """The request did not ask for this reward: `skipped` when it had weight <= 0 there."""

    skipped: bool
    asked: list[str]


@dataclass(frozen=True)
class Failed:
    reason: str | None
    filled: dict[str, Any] | None  # the filled envelope under on_failed = fill, else None


@dataclass(frozen=True)
class Scored:
    envelope: dict[str, Any]


Pulled = NotAUuid | NeverAccepted | Expired | StillScoring | NotAsked | Failed | Scored


class Pull:
    def __init__(self, store: ResultStore, cfg: CosmosRLConfig, heartbeat: Heartbeat, *, queued: bool,
                 unstored: dict[str, FinalEntry], resolve: Callable[[str], CosmosReward]) -> None:
        self.store = store
        self.cfg = cfg
        self.heartbeat = heartbeat
        self.queued = queued  # queued work outlives its owner: another replica claims it
        self.unstored = unstored
        self.resolve = resolve

    async def __call__(self, uid: str, reward: str) -> Pulled:
        if not _is_uuid(uid):  # only uuids this service gave out name entries: no other store key
            return NotAUuid()
        unstored = self.unstored.get(uid)  # finished here, the store not back yet
        entry = unstored if unstored is not None else await self._read(uid)
        if entry is None:
            gone = await self.store.gone(uid)
            return Expired(gone) if gone is not None else NeverAccepted()
        if isinstance(entry, PendingEntry):
            reason = await self._stale_reason(entry)
            if reason is None:
                if reward not in (entry.accepted.rewards or []):
                    return self._not_asked(entry, reward)
                return StillScoring()
            entry = FailedEntry.now(reason, entry.accepted)
        if isinstance(entry, FailedEntry):
            return Failed(entry.reason, self._filled(reward, entry))
        if reward not in entry.results:
            return self._not_asked(entry, reward)
        if unstored is None:
            await self.store.consumed(uid)  # pulled: it may now go after store.pulled_ttl_s
        return Scored(entry.results[reward])

    async def _read(self, uid: str) -> Entry | None:
        raw = await self.store.get(uid)
        if raw is None:
            return None
        try:
            return read_entry(raw)
        except UnreadableEntry as err:
            return FailedEntry.now(f"its stored entry is unreadable: {err}", None)

    @staticmethod
    def _not_asked(entry: PendingEntry | DoneEntry, reward: str) -> NotAsked:
        if isinstance(entry, PendingEntry):
            return NotAsked(reward in (entry.accepted.skipped or []), list(entry.accepted.rewards or []))
        return NotAsked(reward in entry.skipped, list(entry.results))

    def _filled(self, name: str, entry: FailedEntry) -> dict[str, Any] | None:
        """A failed request's pull under on_failed = fill (None otherwise: the pull answers 500)."""
        prompts, rewards = entry.accepted.prompts, entry.accepted.rewards or []
        if self.cfg.on_failed != "fill" or not prompts or name not in rewards:
            return None
        reward = self.resolve(name)
        return failed_envelope(name, reward, self.cfg.fill_of(reward), prompts, entry.reason, entry.code)

    async def _stale_reason(self, entry: PendingEntry) -> str | None:
        if time.time() > entry.deadline:
            return (f"not finished within cosmos_rl.request_timeout_s = {self.cfg.request_timeout_s}s "
                    "(the gateway that accepted it stopped?); enqueue it again")
        if entry.owner == self.heartbeat.instance or self.queued:
            return None
        if not await self.heartbeat.alive(entry.owner):
            return "the gateway process that accepted this request is gone (restart or crash); enqueue it again"
        return None


def _is_uuid(text: str) -> bool:
    try:
        return str(uuidlib.UUID(text)) == text
    except ValueError:
        return False
