"""The cosmos-rl job service: accepted requests scored in the background, their entries kept in
the result store, and a heartbeat per gateway process.

cosmos-rl's trainer reads only the legacy `scores` lists (never `valid`) and never re-enqueues:
a sample's value there is trained on, fill or not. So transient judge faults are scored again
within the request's deadline first, and what is still invalid gets the reward's configured
policy (cosmos_rl.on_invalid; default group_mean, which leaves its advantage at zero), with
`valid`, `errors` and `filled_by` next to the lists for clients that look (envelope.py).

Pending entries live in the store too. Each gateway process writes a heartbeat; a pending entry
whose owner's heartbeat is gone (the process died or restarted) reads as failed at once, and
any pending entry past cosmos_rl.request_timeout_s reads as failed. cosmos-rl's trainer client
does not enqueue again: it keeps retrying the pull of that uuid (a 5xx for ~50 min inside each
fetch, a 4xx at each later step) and trains on nothing behind it. So a failed request's pull
answers 200 with every sample invalid and filled by the reward's policy (cosmos_rl.on_failed =
fill, the default; `status: failed` and the reason beside the lists), or 500 (on_failed = error).
With store.queue, accepted work waits on a Redis Stream that every replica consumes.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid as uuidlib
from collections.abc import Awaitable, Callable
from typing import Any

from ...config import CosmosReward, CosmosRLConfig
from ...exceptions import Overloaded
from ...gateway import Gateway
from ...latents import LatentDecoderError, LatentDecoderSupervisor
from ...schema import (
    ErrorCode,
    JudgeScore,
    SampleInput,
)
from ...store import ResultStore, StoreError, retry_store_write
from ...watch import RunTags, Watch
from ...work_queue import BacklogFull, QueuedWork, RedisWorkQueue
from .envelope import failed_envelope, result_envelope
from .payload import JudgeUnready, PayloadChecks, Prepared, latents_plan
from .rescore import score_until_deadline
from .tensors import PayloadError, decoded_video_shape

log = logging.getLogger(__name__)
HEARTBEAT_S = 5.0
HEARTBEAT_TTL_S = 20.0
DEAD_CONSUMER_S = 600.0  # a queue consumer (a past gateway process) idle this long, with nothing pending, is dropped


class CosmosRLService:
    def __init__(self, gateway: Gateway, store: ResultStore, cfg: CosmosRLConfig,
                 queue: RedisWorkQueue | None = None, instance: str | None = None, watch: Watch | None = None) -> None:
        self.gateway = gateway
        self.watch = watch  # handed each request's scores once its result is stored
        self.store = store
        self.cfg = cfg
        self.instance = instance or uuidlib.uuid4().hex
        # store.queue: accepted work sits on a Redis Stream until its result is stored; any replica
        # on that Redis scores it (work_queue.py). None: this process scores what it accepts.
        self.queue = queue
        self._consumer: asyncio.Task | None = None
        self._entry_ids: dict[str, str] = {}  # uid -> its stream entry, while it runs here
        self._unstored: dict[str, dict[str, Any]] = {}  # uid -> final entry the store has not taken yet
        self.worker = LatentDecoderSupervisor(cfg.latents) if cfg.latents.python else None
        self.payloads = PayloadChecks(gateway, cfg, self.worker)
        self._tasks: dict[str, asyncio.Task] = {}
        self._accepted: dict[str, dict[str, Any]] = {}  # uid -> _accepted_of(prepared), while it runs
        self._heartbeat: asyncio.Task | None = None

    # ---- payloads (payload.py) ---------------------------------------------------------------

    def resolve(self, name: str) -> CosmosReward:
        return self.payloads.resolve(name)

    async def prepare(self, body: bytes, *, check_ready: bool = True) -> Prepared:
        return await self.payloads.prepare(body, check_ready=check_ready)

    def set_latent_attr(self, raw: str | None) -> tuple[int, dict[str, Any]]:
        return self.payloads.set_latent_attr(raw)

    # ---- enqueue ---------------------------------------------------------------------------

    async def enqueue(self, body: bytes, *, until: Callable[[Awaitable[Prepared]], Awaitable[Prepared]] | None = None,
                      tags: RunTags | None = None) -> str:
        """Validate, store a pending entry, start scoring in the background; the uuid.
        `until` wraps the preparation (the server cancels it when the client leaves before it has
        a uuid); once a uuid is given, the request is accepted and runs to its end."""
        if self.queue is None and len(self._tasks) >= self.cfg.max_pending:
            raise QueueFull(f"{len(self._tasks)} requests are being scored (cosmos_rl.max_pending = "
                            f"{self.cfg.max_pending}); retry shortly")
        preparing = self.prepare(body)
        prepared = await (until(preparing) if until is not None else preparing)
        if self.queue is None and len(self._tasks) >= self.cfg.max_pending:  # re-check: preparing awaited
            raise QueueFull(f"cosmos_rl.max_pending = {self.cfg.max_pending} requests are being scored; retry shortly")
        if self.queue is not None:
            try:
                await self.queue.check_room()
            except BacklogFull as err:
                raise QueueFull(str(err)) from None
        await self._ensure_heartbeat()
        uid = str(uuidlib.uuid4())
        now = time.time()
        deadline = now + self.cfg.request_timeout_s
        await self.store.put(uid, {
            "status": "pending", "owner": self.instance, "accepted_at": now,
            "deadline": deadline, **self._accepted_of(prepared), **({"watch": tags.as_entry()} if tags else {}),
        }, ttl_s=self.cfg.request_timeout_s + self._ttl())
        if self.queue is not None:  # accepted once it is on the stream; a consumer (any replica) scores it
            await self.queue.add(uid, body, deadline)
            return uid
        self._track(uid, self._run(uid, prepared, deadline, tags=tags))
        self._accepted[uid] = self._accepted_of(prepared)
        return uid

    def _track(self, uid: str, work: Awaitable[None], entry_id: str | None = None) -> None:
        task = asyncio.ensure_future(work)
        self._tasks[uid] = task
        if entry_id is not None:
            self._entry_ids[uid] = entry_id
        task.add_done_callback(lambda _t, u=uid: (self._tasks.pop(u, None), self._accepted.pop(u, None),
                                                  self._entry_ids.pop(u, None)))

    def _ttl(self) -> float:
        return float(getattr(self.store, "ttl_s", 3600.0))

    async def _run(self, uid: str, p: Prepared, deadline_at: float, entry_id: str | None = None,
                   tags: RunTags | None = None) -> None:
        """Score an accepted request by its deadline (wall time) and store its one final entry."""
        left = max(0.0, deadline_at - time.time())
        deadline = time.monotonic() + left
        scored: list[tuple[list[SampleInput], dict[str, list[JudgeScore]]]] = []
        try:
            async with asyncio.timeout(left):
                entry = await self._score(uid, p, deadline, scored.append)
        except TimeoutError:
            entry = self._failed(f"not finished within cosmos_rl.request_timeout_s = {self.cfg.request_timeout_s}s",
                                 self._accepted_of(p), ErrorCode.timeout)
        except asyncio.CancelledError:
            raise
        except LatentDecoderError as err:
            entry = self._failed(f"latent decoding failed: {err}", self._accepted_of(p))
        except Exception as err:
            log.exception("cosmos-rl request %s failed", uid)
            entry = self._failed(f"{type(err).__name__}: {err}", self._accepted_of(p))
        await self._store_final(uid, entry, entry_id)
        if scored and tags is not None and self.watch is not None:
            self.watch.offer_cells("cosmos_rl", *scored[0], tags, uid)

    async def _store_final(self, uid: str, entry: dict[str, Any], entry_id: str | None) -> None:
        """Store the result through a store outage (retried, served from memory here meanwhile),
        then acknowledge its queue entry: accepted work is never dropped for a failed write."""
        self._unstored[uid] = entry
        try:
            written = await retry_store_write(lambda: self.store.put_final(uid, entry), f"result of {uid}",
                                              give_up_after_s=self._ttl())
            if not written:
                log.info("cosmos-rl %s: another replica stored its result first; this one is dropped", uid)
            if entry_id is not None and self.queue is not None:
                queue = self.queue
                await retry_store_write(lambda: queue.done(entry_id), f"acknowledgement of {uid}",
                                        give_up_after_s=self._ttl())
        except StoreError:
            log.exception("cosmos-rl %s: its result could not be stored", uid)
        finally:
            self._unstored.pop(uid, None)

    # ---- the durable queue (store.queue) -----------------------------------------------------

    async def _consume(self) -> None:
        """Take work from the stream as far as max_pending allows: idle entries of dead replicas
        first (every claim_interval_s), then new ones. A store outage pauses it, never ends it."""
        assert self.queue is not None
        queue = self.queue
        claimed_at = 0.0
        swept_at = time.monotonic()
        delay = 0.2
        while True:
            room = self.cfg.max_pending - len(self._tasks)
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
                if work.uid not in self._tasks:  # else already scoring here
                    self._track(work.uid, self._run_queued(work), work.entry_id)

    def _stop_lost(self, lost: list[str]) -> None:
        """Stop scoring entries another replica has claimed (it thought this one dead): it scores them."""
        gone = set(lost)
        for uid, entry_id in list(self._entry_ids.items()):
            task = self._tasks.get(uid)
            # one storing its result (or acknowledging it just now) finishes on its own
            if entry_id in gone and task is not None and not task.done() and uid not in self._unstored:
                log.warning("cosmos-rl %s: another replica claimed its queue entry; it is scored there", uid)
                task.cancel()

    async def _ack(self, work: QueuedWork) -> None:
        assert self.queue is not None
        queue = self.queue
        try:
            await retry_store_write(lambda: queue.done(work.entry_id), f"acknowledgement of {work.uid}",
                                    give_up_after_s=self._ttl())
        except StoreError:
            log.exception("cosmos-rl %s: its queue entry could not be acknowledged", work.uid)

    async def _run_queued(self, work: QueuedWork) -> None:
        if work.malformed is not None:
            log.error("cosmos-rl: queue entry %s is malformed (%s)", work.entry_id, work.malformed)
            if work.uid:
                await self._store_final(work.uid, self._failed(f"its queue entry is malformed: {work.malformed}",
                                                               None), work.entry_id)
            else:
                await self._ack(work)
            return
        try:
            existing = await self.store.get(work.uid)
        except StoreError:
            existing = None
        if existing is not None and existing.get("status") in ("done", "failed"):  # stored by another
            await self._ack(work)
            return
        accepted = {k: existing[k] for k in ("rewards", "skipped", "prompts") if existing and k in existing}
        assert self.queue is not None
        cap = self.queue.cfg.max_deliveries
        if work.deliveries > cap:  # each replica that took it stopped: it may be what kills them
            entry = self._failed(f"handed out {work.deliveries} times (store.queue.max_deliveries = {cap}): "
                                 "every replica that scored it stopped before finishing", accepted)
            await self._store_final(work.uid, entry, work.entry_id)
            return
        try:
            prepared = await self.prepare(work.body, check_ready=False)
        except (PayloadError, JudgeUnready, LatentDecoderError) as err:  # replicas configured differently?
            entry = self._failed(f"the request could not be prepared on gateway {self.instance}: {err}", accepted)
            await self._store_final(work.uid, entry, work.entry_id)
            return
        except Exception as err:  # never leave an entry pending for ever: it would be claimed again and again
            log.exception("cosmos-rl %s: preparing the queued request failed", work.uid)
            entry = self._failed(f"the request could not be prepared on gateway {self.instance}: "
                                 f"{type(err).__name__}: {err}", accepted)
            await self._store_final(work.uid, entry, work.entry_id)
            return
        self._accepted[work.uid] = self._accepted_of(prepared)
        await self._run(work.uid, prepared, work.deadline, work.entry_id, RunTags.from_entry((existing or {}).get("watch")))

    @staticmethod
    def _accepted_of(p: Prepared) -> dict[str, Any]:
        """What an accepted request's entry keeps from enqueue to its end: the rewards it asked for,
        and one prompt per sample (a failed request's filled lists are grouped by them)."""
        prompts = list(p.meta.prompts) if p.meta.prompts is not None else [""] * p.batch
        return {"rewards": list(p.rewards), "skipped": p.skipped, "prompts": prompts}

    def _failed(self, reason: str, accepted: dict[str, Any] | None,
                code: ErrorCode = ErrorCode.backend_error) -> dict[str, Any]:
        return {**(accepted or {}), "status": "failed", "reason": reason, "code": code.value,
                "finished_at": time.time()}

    def _failed_envelope(self, name: str, entry: dict[str, Any]) -> dict[str, Any] | None:
        """A failed request's pull under on_failed = fill (None otherwise: the pull answers 500)."""
        if self.cfg.on_failed != "fill" or not entry.get("prompts") or name not in entry.get("rewards", []):
            return None
        reward = self.resolve(name)
        return failed_envelope(name, reward, self.cfg.fill_of(reward), entry)

    async def _score(self, uid: str, p: Prepared, deadline: float | None = None,
                     keep: Callable[[tuple[list[SampleInput], dict[str, list[JudgeScore]]]], None] | None = None) -> dict[str, Any]:
        # Latents decode to pixels here: their share of the process-wide decoded-media budget is
        # waited for (accepted work is never refused; _run's deadline bounds the wait).
        # `keep` gets the samples and their judges' cells (the watch's copy).
        b, t, h, w = decoded_video_shape(p.latents.shape) if p.latents is not None else (0, 0, 0, 0)
        async with self.gateway.media_budget.reserve(b * (1 if p.medium == "image" else t) * h * w, wait_s=None):
            return await self._decode_and_score(uid, p, deadline, keep)

    async def _decode_and_score(self, uid: str, p: Prepared, deadline: float | None,
                                keep: Callable[[tuple[list[SampleInput], dict[str, list[JudgeScore]]]], None] | None) -> dict[str, Any]:
        started = time.perf_counter()
        decoded_s = 0.0
        pixels = p.pixels
        judges = list(dict.fromkeys(r.judge for r in p.rewards.values()))
        plan = latents_plan(self.gateway, p, judges)  # the judges' frames, sampled and resized on the device
        if p.latents is not None:
            assert self.worker is not None
            t0 = time.perf_counter()
            video = await self.worker.decode(p.latents, plan and plan.frames, plan and plan.size)  # [B,3,T,H,W] uint8
            decoded_s = time.perf_counter() - t0
            pixels = video[:, :, 0].transpose(0, 2, 3, 1) if p.medium == "image" else video.transpose(0, 2, 3, 4, 1)
        assert pixels is not None
        samples = await asyncio.to_thread(self.payloads.samples, p, pixels, plan)
        if deadline is None:
            deadline = time.monotonic() + self.cfg.request_timeout_s
        cells = await score_until_deadline(self.gateway, self.cfg, uid, samples, judges, deadline)
        if keep is not None:
            keep((samples, cells))
        duration = time.perf_counter() - started
        results = {}
        prompts = p.meta.prompts if p.meta.prompts is not None else [""] * p.batch
        for name, reward in p.rewards.items():
            results[name] = result_envelope(name, reward, self.cfg.fill_of(reward), cells[reward.judge], prompts,
                                            p.info, duration, decoded_s, p.notes.get(name), p.ignored)
        return {"status": "done", "results": results, "skipped": p.skipped, "finished_at": time.time()}

    # ---- pull ------------------------------------------------------------------------------

    async def pull(self, uid: str, reward: str, *, type_given: bool = True) -> tuple[int, dict[str, Any]]:
        base = {"uuid": uid, "type": reward}
        if self.queue is not None:
            await self.start()  # an app whose lifespan did not run (e.g. mounted elsewhere) still consumes
        if not _is_uuid(uid):  # only uuids this service gave out name entries: no other store key
            return 404, {**base, "status": "unknown",
                         "message": f"Not found scores for {uid[:80]!r}: not a uuid this gateway gave out"}
        unstored = self._unstored.get(uid)  # finished here, the store not back yet
        entry = unstored if unstored is not None else await self.store.get(uid)
        if entry is None:
            gone = await self.store.gone(uid)
            if gone is not None:  # it was here: say so, not "unknown"
                return 410, {**base, "status": "expired", "reason": gone,
                             "message": f"Not found scores for {uid}: the request's result is gone ({gone}); "
                                        "enqueue it again"}
            return 404, {**base, "status": "unknown",
                         "message": f"Not found scores for {uid}: this gateway never accepted such a request "
                                    "(or forgot it after store.forget_after_s)"}
        status = entry.get("status")
        if status == "pending":
            reason = await self._stale_reason(entry)
            if reason is None:
                if reward not in entry.get("rewards", []):
                    return self._not_asked(base, entry, reward, type_given)
                return self.cfg.pending_status, {**base, "status": "pending",
                                                 "message": f"Not found scores for {uid}: still scoring"}
            entry = self._failed(reason, {k: entry[k] for k in ("rewards", "skipped", "prompts") if k in entry})
        if entry.get("status") == "failed":
            filled = self._failed_envelope(reward, entry)
            if filled is not None:
                return 200, filled
            return 500, {**base, "status": "failed", "message": f"request {uid} failed: {entry.get('reason')}",
                         "reason": entry.get("reason")}
        results = entry.get("results", {})
        if reward not in results:
            return self._not_asked(base, entry, reward, type_given)
        if unstored is None:
            await self.store.consumed(uid)  # pulled: it may now go after store.pulled_ttl_s
        return 200, results[reward]

    def _not_asked(self, base: dict[str, Any], entry: dict[str, Any], reward: str,
                   type_given: bool = True) -> tuple[int, dict[str, Any]]:
        if reward in entry.get("skipped", []):
            msg = f"reward {reward!r} had weight <= 0 in this request and was skipped"
        else:
            asked = entry.get("rewards") or list(entry.get("results", {}))
            msg = f"this request did not ask for reward {reward!r} (it asked for {', '.join(asked)})"
            if not type_given:
                msg += (f"; the pull had no `type` field, which means {reward!r} "
                        "(cosmos_rl.default_pull_type): send `type`")
        return 404, {**base, "status": "unknown", "message": msg}

    async def _stale_reason(self, entry: dict[str, Any]) -> str | None:
        if time.time() > float(entry.get("deadline", 0)):
            return (f"not finished within cosmos_rl.request_timeout_s = {self.cfg.request_timeout_s}s "
                    "(the gateway that accepted it stopped?); enqueue it again")
        owner = entry.get("owner")
        if owner == self.instance or self.queue is not None:  # queued work outlives its owner: claimed
            return None
        if await self.store.get(f"instance:{owner}") is None:
            return "the gateway process that accepted this request is gone (restart or crash); enqueue it again"
        return None

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """At start-up (and lazily on first use): the heartbeat, and in queue mode the consumer, so
        a replica claims a dead one's work without waiting for a request of its own."""
        if self.queue is not None and (self._consumer is None or self._consumer.done()):
            self._consumer = asyncio.create_task(self._consume())
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.create_task(self._beat())

    async def _ensure_heartbeat(self) -> None:
        if self._heartbeat is None or self._heartbeat.done():
            # written before the first uuid is given: another replica's pull reads it
            await self.store.put(f"instance:{self.instance}", {"alive": True}, ttl_s=HEARTBEAT_TTL_S)
        await self.start()

    async def _beat(self) -> None:
        interval = HEARTBEAT_S
        if self.queue is not None:  # touch running entries well within the visibility timeout
            interval = min(HEARTBEAT_S, self.queue.cfg.visibility_timeout_s / 4)
        wait = 0.0
        while True:
            await asyncio.sleep(wait)
            try:
                await self.store.put(f"instance:{self.instance}", {"alive": True}, ttl_s=HEARTBEAT_TTL_S)
                if self.queue is not None:
                    self._stop_lost(await self.queue.keep(list(self._entry_ids.values())))
                wait = interval
            except StoreError:
                log.warning("heartbeat write failed; retrying in 0.5 s", exc_info=True)
                wait = 0.5  # back soon after the store returns: others read a missing heartbeat as death

    async def aclose(self) -> None:
        """Stop. Without the queue, unfinished requests are stored as failed (never left pending);
        with it, they stay on the stream for another replica (or this one restarted) to claim."""
        if self._consumer is not None:
            self._consumer.cancel()
        for uid, task in list(self._tasks.items()):
            if task.done():  # its result is stored already: a failure must not overwrite it
                continue
            finished = self._unstored.get(uid)  # scored, its write under way: that result, not a failure
            task.cancel()
            if self.queue is not None:
                continue
            entry = finished or self._failed("the gateway shut down before finishing; enqueue it again",
                                             self._accepted.get(uid))
            try:  # put_final: a result another writer stored meanwhile stays
                await self.store.put_final(uid, entry)
            except StoreError:
                pass
        if self.queue is not None and self._tasks:
            log.info("cosmos-rl: %d unfinished requests left on the queue for another replica", len(self._tasks))
        if self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self.worker is not None:
            await self.worker.aclose(timeout_s=5.0)  # killed if it has not exited by then


def _is_uuid(text: str) -> bool:
    try:
        return str(uuidlib.UUID(text)) == text
    except ValueError:
        return False


class QueueFull(Overloaded):
    pass

