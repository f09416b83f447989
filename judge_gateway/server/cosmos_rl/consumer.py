"""The durable queue's consumer (store.queue): accepted cosmos-rl work waits on a Redis Stream
that every replica on that Redis consumes (work_queue.py). This process takes entries as far as
cosmos_rl.max_pending allows (idle entries of dead replicas first), scores each to one final
entry (jobs.py), and stops the ones another replica has claimed from it."""

from __future__ import annotations

import asyncio
import logging
import time

from ...latents import LatentDecoderError
from ...store import ResultStore, StoreError
from ...watch import RunTags
from ...work_queue import QueuedWork, RedisWorkQueue
from .entry import (
    Accepted,
    DoneEntry,
    Entry,
    FailedEntry,
    PendingEntry,
    UnreadableEntry,
    read_entry,
)
from .jobs import Jobs, accepted_of
from .payload import JudgeUnready, PayloadChecks
from .tensors import PayloadError

log = logging.getLogger(__name__)
DEAD_CONSUMER_S = 600.0  # a queue consumer (a past gateway process) idle this long, with nothing pending, is dropped


class QueueConsumer:
    def __init__(self, queue: RedisWorkQueue, store: ResultStore, jobs: Jobs, payloads: PayloadChecks,
                 instance: str) -> None:
        self.queue = queue
        self.store = store
        self.jobs = jobs
        self.payloads = payloads
        self.instance = instance
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self.consume())

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    async def consume(self) -> None:
        """Take work from the stream as far as max_pending allows: idle entries of dead replicas
        first (every claim_interval_s), then new ones. A store outage pauses it, never ends it."""
        queue = self.queue
        claimed_at = 0.0
        swept_at = time.monotonic()
        delay = 0.2
        while True:
            room = self.jobs.room()
            if room <= 0:
                await asyncio.sleep(0.05)
                continue
            try:
                items: list[QueuedWork] = []
                if time.monotonic() - claimed_at >= queue.cfg.claim_interval_s:
                    claimed_at = time.monotonic()
                    items = await queue.claim_idle(room)
                    if items:
                        log.warning("cosmos-rl: claimed %d requests of a replica that stopped touching them: %s",
                                    len(items), ", ".join(w.uid for w in items))
                    if time.monotonic() - swept_at >= DEAD_CONSUMER_S:
                        swept_at = time.monotonic()
                        await queue.forget_dead_consumers(DEAD_CONSUMER_S)
                if not items:
                    items = await queue.read(room, block_ms=int(min(1.0, queue.cfg.claim_interval_s) * 1000))
                delay = 0.2
            except StoreError as err:
                log.warning("cosmos-rl queue unavailable (%s); retrying in %.1f s", err, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            except Exception:  # a bug must not end the consumer silently: this replica would stop taking work
                log.exception("cosmos-rl queue consumer failed; retrying in %.1f s", delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            for work in items:
                if work.uid not in self.jobs.tasks:  # else already scoring here
                    self.jobs.track(work.uid, self.run_queued(work), work.entry_id)

    async def keep_claims(self) -> None:
        """Touch the entries running here (within the visibility timeout, so no replica claims
        them); stop the ones another replica claimed meanwhile."""
        self.stop_lost(await self.queue.keep(list(self.jobs.entry_ids.values())))

    def stop_lost(self, lost: list[str]) -> None:
        """Stop scoring entries another replica has claimed (it thought this one dead): it scores them."""
        gone = set(lost)
        for uid, entry_id in list(self.jobs.entry_ids.items()):
            task = self.jobs.tasks.get(uid)
            # one storing its result (or acknowledging it just now) finishes on its own
            if entry_id in gone and task is not None and not task.done() and uid not in self.jobs.unstored:
                log.warning("cosmos-rl %s: another replica claimed its queue entry; it is scored there", uid)
                task.cancel()

    async def _ack(self, work: QueuedWork) -> None:
        try:
            await self.jobs.ack(work.uid, work.entry_id)
        except StoreError:
            log.exception("cosmos-rl %s: its queue entry could not be acknowledged", work.uid)

    async def _existing(self, uid: str) -> Entry | None:
        try:
            raw = await self.store.get(uid)
        except StoreError:
            return None
        try:
            return read_entry(raw) if raw is not None else None
        except UnreadableEntry:
            return None

    async def run_queued(self, work: QueuedWork) -> None:
        """Score one stream entry to its final entry, or fail it with the reason: never leave it
        pending (it would be claimed again and again)."""
        if work.malformed is not None:
            log.error("cosmos-rl: queue entry %s is malformed (%s)", work.entry_id, work.malformed)
            if work.uid:
                await self.jobs.store_final(work.uid, FailedEntry.now(f"its queue entry is malformed: {work.malformed}",
                                                                      None), work.entry_id)
            else:
                await self._ack(work)
            return
        existing = await self._existing(work.uid)
        if isinstance(existing, (DoneEntry, FailedEntry)):  # stored by another
            await self._ack(work)
            return
        accepted = existing.accepted if isinstance(existing, PendingEntry) else Accepted()
        cap = self.queue.cfg.max_deliveries
        if work.deliveries > cap:  # each replica that took it stopped: it may be what kills them
            entry = FailedEntry.now(f"handed out {work.deliveries} times (store.queue.max_deliveries = {cap}): "
                                    "every replica that scored it stopped before finishing", accepted)
            await self.jobs.store_final(work.uid, entry, work.entry_id)
            return
        try:
            prepared = await self.payloads.prepare(work.body, check_ready=False)
        except (PayloadError, JudgeUnready, LatentDecoderError) as err:  # replicas configured differently?
            entry = FailedEntry.now(f"the request could not be prepared on gateway {self.instance}: {err}", accepted)
            await self.jobs.store_final(work.uid, entry, work.entry_id)
            return
        except Exception as err:  # never leave an entry pending for ever: it would be claimed again and again
            log.exception("cosmos-rl %s: preparing the queued request failed", work.uid)
            entry = FailedEntry.now(f"the request could not be prepared on gateway {self.instance}: "
                                    f"{type(err).__name__}: {err}", accepted)
            await self.jobs.store_final(work.uid, entry, work.entry_id)
            return
        self.jobs.accepted[work.uid] = accepted_of(prepared)
        tags = RunTags.from_entry(existing.watch if isinstance(existing, PendingEntry) else None)
        await self.jobs.run(work.uid, prepared, work.deadline, work.entry_id, tags)
