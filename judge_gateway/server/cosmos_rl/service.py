"""The cosmos-rl job service: what the routes call. It accepts a request (validated, a pending
entry stored, then scored in the background), answers a pull with what happened to it (pull.py),
and starts and stops the background work: the heartbeat, the queue consumer, the running jobs.

cosmos-rl's trainer reads only the legacy `scores` lists (never `valid`) and never re-enqueues:
a sample's value there is trained on, fill or not. So transient judge faults are scored again
within the request's deadline first (rescore.py), and what is still invalid gets the reward's
configured policy (cosmos_rl.on_invalid; default group_mean, which leaves its advantage at zero),
with `valid`, `errors` and `filled_by` next to the lists for clients that look (envelope.py).

Pending entries live in the store too (entry.py). Each gateway process writes a heartbeat
(heartbeat.py); a pending entry whose owner's heartbeat is gone (the process died or restarted)
reads as failed at once, and any pending entry past cosmos_rl.request_timeout_s reads as failed.
cosmos-rl's trainer client does not enqueue again: it keeps retrying the pull of that uuid (a 5xx
for ~50 min inside each fetch, a 4xx at each later step) and trains on nothing behind it. So a
failed request's pull answers 200 with every sample invalid and filled by the reward's policy
(cosmos_rl.on_failed = fill, the default; `status: failed` and the reason beside the lists), or
500 (on_failed = error). With store.queue, accepted work waits on a Redis Stream that every
replica consumes (consumer.py).

    entry.py      the typed store entries (pending, done, failed) and their JSON
    jobs.py       the requests scoring in this process, each to one stored final entry
    scoring.py    one request: latents decoded, samples scored, result envelopes
    consumer.py   the durable queue's consumer (store.queue)
    heartbeat.py  this process's heartbeat, read by every replica's pull
    pull.py       what a pull finds, as typed outcomes (routes.py picks the status codes)
"""
from __future__ import annotations

import json
import time
import uuid as uuidlib
from collections.abc import Awaitable, Callable
from typing import Any

from ...config import CosmosReward, CosmosRLConfig
from ...exceptions import Overloaded
from ...gateway import Gateway
from ...latents import LatentDecoderSupervisor
from ...store import ResultStore, StoreError
from ...watch import RunTags, Watch
from ...work_queue import BacklogFull, RedisWorkQueue
from .consumer import QueueConsumer
from .entry import PendingEntry, kept_s
from .heartbeat import HEARTBEAT_S, Heartbeat
from .jobs import Jobs, accepted_of
from .payload import PayloadChecks, Prepared
from .pull import Pull, Pulled
from .scoring import RequestScorer
from .tensors import PayloadError


class QueueFull(Overloaded):
    pass


class CosmosRLService:
    def __init__(self, gateway: Gateway, store: ResultStore, cfg: CosmosRLConfig,
                 queue: RedisWorkQueue | None = None, instance: str | None = None, watch: Watch | None = None,
                 persistence: str = "refuse") -> None:
        self.gateway = gateway
        self.store = store
        self.cfg = cfg
        self.persistence = persistence  # store.persistence: refuse accepts while the store would lose them
        self.instance = instance or uuidlib.uuid4().hex
        # store.queue: accepted work sits on a Redis Stream until its result is stored; any replica
        # on that Redis scores it (work_queue.py). None: this process scores what it accepts.
        self.queue = queue
        self.worker = LatentDecoderSupervisor(cfg.latents) if cfg.latents.python else None
        self.payloads = PayloadChecks(gateway, cfg, self.worker)
        self.jobs = Jobs(store, cfg, RequestScorer(gateway, cfg, self.payloads, self.worker), queue, watch)
        self.consumer = QueueConsumer(queue, store, self.jobs, self.payloads, self.instance) if queue else None
        # in queue mode, running entries are touched well within the visibility timeout
        interval = min(HEARTBEAT_S, queue.cfg.visibility_timeout_s / 4) if queue is not None else HEARTBEAT_S
        self.heartbeat = Heartbeat(store, self.instance, interval,
                                   self.consumer.keep_claims if self.consumer is not None else None)
        self.pull_of = Pull(store, cfg, self.heartbeat, queued=queue is not None, unstored=self.jobs.unstored,
                            resolve=self.resolve)

    # ---- payloads (payload.py) ---------------------------------------------------------------

    def resolve(self, name: str) -> CosmosReward:
        return self.payloads.resolve(name)

    async def prepare(self, body: bytes, *, check_ready: bool = True) -> Prepared:
        return await self.payloads.prepare(body, check_ready=check_ready)

    def set_latent_attr(self, raw: str | None) -> dict[str, Any]:
        return self.payloads.set_latent_attr(raw)

    async def not_ready(self, info_data: str) -> dict[str, str]:
        """Reward name -> why it cannot be scored now, for the rewards a ping names (its
        `info_data`'s reward_fn, as an enqueue's metadata has it) or, naming none, every reward
        name this gateway maps to a configured judge. A ping never fails: a name it cannot use
        is listed with the reason."""
        try:
            meta = json.loads(info_data) if info_data else {}
        except ValueError:
            meta = {}
        named = meta.get("reward_fn") if isinstance(meta, dict) else None
        names = list(named) if isinstance(named, dict) and named else [
            n for n, r in self.cfg.rewards.items() if r.judge in self.gateway.judges]
        judges: dict[str, str] = {}
        out: dict[str, str] = {}
        for name in names:
            try:
                judges[name] = self.resolve(str(name)).judge
            except PayloadError as err:
                out[str(name)] = str(err)
        unscorable = await self.gateway.unscorable(list(judges.values()))
        for name, judge in judges.items():
            if judge in unscorable:
                out[name] = f"judge {judge!r} is not ready ({unscorable[judge]})"
        return out

    # ---- enqueue and pull --------------------------------------------------------------------

    async def enqueue(self, body: bytes, *, until: Callable[[Awaitable[Prepared]], Awaitable[Prepared]] | None = None,
                      tags: RunTags | None = None) -> str:
        """Validate, store a pending entry, start scoring in the background; the uuid.
        `until` wraps the preparation (the server cancels it when the client leaves before it has
        a uuid); once a uuid is given, the request is accepted and runs to its end."""
        if self.queue is None and self.jobs.room() <= 0:
            raise QueueFull(f"{len(self.jobs.tasks)} requests are being scored (cosmos_rl.max_pending = "
                            f"{self.cfg.max_pending}); retry shortly")
        preparing = self.prepare(body)
        prepared = await (until(preparing) if until is not None else preparing)
        if self.queue is None and self.jobs.room() <= 0:  # re-check: preparing awaited
            raise QueueFull(f"cosmos_rl.max_pending = {self.cfg.max_pending} requests are being scored; retry shortly")
        if self.queue is not None:
            try:
                await self.queue.check_room()
            except BacklogFull as err:
                raise QueueFull(str(err)) from None
        refusal = await self.store.accept_refusal(self.persistence)
        if refusal is not None:  # no uuid is given out that a Redis kill would lose
            raise StoreError(refusal)
        if not self.heartbeat.running:
            await self.heartbeat.write()  # before the first uuid is given: another replica's pull reads it
        await self.start()
        uid = str(uuidlib.uuid4())
        now = time.time()
        deadline = now + self.cfg.request_timeout_s
        accepted = accepted_of(prepared)
        pending = PendingEntry(accepted, self.instance, now, deadline, tags.as_entry() if tags else None)
        await self.store.put(uid, pending.to_store(), ttl_s=self.cfg.request_timeout_s + kept_s(self.store))
        if self.queue is not None:  # accepted once it is on the stream; a consumer (any replica) scores it
            await self.queue.add(uid, body, deadline)
            return uid
        self.jobs.track(uid, self.jobs.run(uid, prepared, deadline, tags=tags), accepted=accepted)
        return uid

    async def pull(self, uid: str, reward: str) -> Pulled:
        """What happened to request `uid`, for its reward `reward`; routes.py answers with it."""
        return await self.pull_of(uid, reward)

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """At start-up (the app's lifespan) and at each enqueue: the heartbeat, and in queue mode
        the consumer, so a replica claims a dead one's work without waiting for a request of its own."""
        if self.consumer is not None:
            self.consumer.start()
        self.heartbeat.start()

    async def aclose(self) -> None:
        """Stop. Without the queue, unfinished requests are stored as failed (never left pending);
        with it, they stay on the stream for another replica (or this one restarted) to claim."""
        if self.consumer is not None:
            self.consumer.stop()
        await self.jobs.aclose()
        self.heartbeat.stop()
        if self.worker is not None:
            await self.worker.aclose(timeout_s=5.0)  # killed if it has not exited by then
