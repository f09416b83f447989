"""The cosmos-rl requests this process is scoring: one task each, run to the request's deadline,
ending in exactly one final entry in the store (a result, or a failure with its reason) and, in
queue mode, the acknowledgement of its stream entry. A store outage delays the write (retried,
the result served from memory meanwhile); it never drops accepted work."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable

from ...config import CosmosRLConfig
from ...latents import LatentDecoderError
from ...schema import ErrorCode
from ...store import ResultStore, StoreError, retry_store_write
from ...watch import RunTags, Watch
from ...work_queue import RedisWorkQueue
from .entry import Accepted, FailedEntry, FinalEntry, kept_s
from .payload import Prepared
from .scoring import RequestScorer, Scored

log = logging.getLogger(__name__)


def accepted_of(p: Prepared) -> Accepted:
    """What a prepared request's entry keeps from enqueue to its end (entry.Accepted)."""
    prompts = list(p.meta.prompts) if p.meta.prompts is not None else [""] * p.batch
    return Accepted(list(p.rewards), p.skipped, prompts)


class Jobs:
    def __init__(self, store: ResultStore, cfg: CosmosRLConfig, scorer: RequestScorer,
                 queue: RedisWorkQueue | None, watch: Watch | None) -> None:
        self.store = store
        self.cfg = cfg
        self.scorer = scorer
        self.queue = queue
        self.watch = watch  # handed each request's scores once its result is stored
        self.tasks: dict[str, asyncio.Task] = {}  # uid -> its task, while it runs here
        self.accepted: dict[str, Accepted] = {}  # uid -> what its entry keeps, while it runs
        self.entry_ids: dict[str, str] = {}  # uid -> its stream entry, while it runs here
        self.unstored: dict[str, FinalEntry] = {}  # uid -> final entry the store has not taken yet

    def room(self) -> int:
        """How many more requests this process may score now (cosmos_rl.max_pending)."""
        return self.cfg.max_pending - len(self.tasks)

    def track(self, uid: str, work: Awaitable[None], entry_id: str | None = None,
              accepted: Accepted | None = None) -> None:
        task = asyncio.ensure_future(work)
        self.tasks[uid] = task
        if entry_id is not None:
            self.entry_ids[uid] = entry_id
        if accepted is not None:
            self.accepted[uid] = accepted
        task.add_done_callback(lambda _t, u=uid: (self.tasks.pop(u, None), self.accepted.pop(u, None),
                                                  self.entry_ids.pop(u, None)))

    async def run(self, uid: str, p: Prepared, deadline_at: float, entry_id: str | None = None,
                  tags: RunTags | None = None) -> None:
        """Score an accepted request by its deadline (wall time) and store its one final entry."""
        left = max(0.0, deadline_at - time.time())
        deadline = time.monotonic() + left
        scored: list[Scored] = []
        entry: FinalEntry
        try:
            async with asyncio.timeout(left):
                entry = await self.scorer.score(uid, p, deadline, scored.append)
        except TimeoutError:
            entry = FailedEntry.now(f"not finished within cosmos_rl.request_timeout_s = {self.cfg.request_timeout_s}s",
                                    accepted_of(p), ErrorCode.timeout)
        except asyncio.CancelledError:
            raise
        except LatentDecoderError as err:
            entry = FailedEntry.now(f"latent decoding failed: {err}", accepted_of(p))
        except Exception as err:
            log.exception("cosmos-rl request %s failed", uid)
            entry = FailedEntry.now(f"{type(err).__name__}: {err}", accepted_of(p))
        await self.store_final(uid, entry, entry_id)
        if scored and tags is not None and self.watch is not None:
            self.watch.offer_cells("cosmos_rl", *scored[0], tags, uid)

    async def store_final(self, uid: str, entry: FinalEntry, entry_id: str | None) -> None:
        """Store the result through a store outage (retried, served from memory here meanwhile),
        then acknowledge its queue entry: accepted work is never dropped for a failed write."""
        self.unstored[uid] = entry
        try:
            written = await retry_store_write(lambda: self.store.put_final(uid, entry.to_store()), f"result of {uid}",
                                              give_up_after_s=kept_s(self.store))
            if not written:
                log.info("cosmos-rl %s: another replica stored its result first; this one is dropped", uid)
            if entry_id is not None and self.queue is not None:
                await self.ack(uid, entry_id)
        except StoreError:
            log.exception("cosmos-rl %s: its result could not be stored", uid)
        finally:
            self.unstored.pop(uid, None)

    async def ack(self, uid: str, entry_id: str) -> None:
        """Acknowledge a stream entry, retried through a store outage (StoreError past kept_s)."""
        assert self.queue is not None
        queue = self.queue
        await retry_store_write(lambda: queue.done(entry_id), f"acknowledgement of {uid}",
                                give_up_after_s=kept_s(self.store))

    async def aclose(self) -> None:
        """Stop every task. Without the queue, unfinished requests are stored as failed (never left
        pending); with it, they stay on the stream for another replica (or this one restarted)."""
        for uid, task in list(self.tasks.items()):
            if task.done():  # its result is stored already: a failure must not overwrite it
                continue
            finished = self.unstored.get(uid)  # scored, its write under way: that result, not a failure
            task.cancel()
            if self.queue is not None:
                continue
            entry = finished or FailedEntry.now("the gateway shut down before finishing; enqueue it again",
                                                self.accepted.get(uid))
            try:  # put_final: a result another writer stored meanwhile stays
                await self.store.put_final(uid, entry.to_store())
            except StoreError:
                pass
        if self.queue is not None and self.tasks:
            log.info("cosmos-rl: %d unfinished requests left on the queue for another replica", len(self.tasks))
        if self.tasks:
            await asyncio.gather(*self.tasks.values(), return_exceptions=True)
