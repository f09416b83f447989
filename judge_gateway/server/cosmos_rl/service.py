"""cosmos-rl reward service protocol: POST /api/reward/{ping,enqueue,pull,latent_attr} over Gateway.score.

Better than the original in every failure case: an enqueue body is validated before a uuid is
given (400 with the reason otherwise); a full queue answers 503 instead of dropping; every
accepted request ends in a result or an explicit failure.

cosmos-rl's trainer reads only the legacy `scores` lists (never `valid`) and never re-enqueues:
a sample's value there is trained on, fill or not. So transient judge faults are scored again
within the request's deadline first, and what is still invalid gets the reward's configured
policy (cosmos_rl.on_invalid; default group_mean, which leaves its advantage at zero), with
`valid`, `errors` and `filled_by` next to the lists for clients that look.

Pending entries live in the store too. Each gateway process writes a heartbeat; a pending entry
whose owner's heartbeat is gone (the process died or restarted) reads as failed at once, and
any pending entry past cosmos_rl.request_timeout_s reads as failed. cosmos-rl's trainer client
does not enqueue again: it keeps retrying the pull of that uuid (a 5xx for ~50 min inside each
fetch, a 4xx at each later step) and trains on nothing behind it. So a failed request's pull
answers 200 with every sample invalid and filled by the reward's policy (cosmos_rl.on_failed =
fill, the default; `status: failed` and the reason beside the lists), or 500 (on_failed = error).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid as uuidlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from ...gateway import Gateway
from ...json_body import JSONBodyError, parse_json
from ...latents import TorchWorker, TorchWorkerError
from ...media import ImageMedia, MediaError, VideoMedia
from ...protocol_config import (
    WAN_CHANNELS,
    WAN_NAMES,
    CosmosReward,
    CosmosRLConfig,
    LegacyKey,
)
from ...schema import TRANSIENT_ERRORS, ErrorCode, JudgeScore, RewardRequest, SampleInput
from ...store import ResultStore, StoreError, retry_store_write
from .tensors import (
    EnqueueMeta,
    PayloadError,
    check_enqueue_limits,
    check_image,
    check_latent,
    check_video,
    decoded_video_shape,
    input_info,
    load_npy,
    parse_meta,
    sniff,
    split_body,
)
from ...work_queue import BacklogFull, QueuedWork, RedisWorkQueue
from .envelope import legacy_lists
from ..disconnect import CLIENT_CLOSED, ClientDisconnected, unless_disconnected

log = logging.getLogger(__name__)

HEARTBEAT_S = 5.0
HEARTBEAT_TTL_S = 20.0
MAX_FORM_FIELDS = 64  # pull and ping forms carry two
DEAD_CONSUMER_S = 600.0  # a queue consumer (a past gateway process) idle this long, with nothing pending, is dropped


@dataclass
class Prepared:
    """A validated enqueue: everything the background task needs."""

    meta: EnqueueMeta
    rewards: dict[str, CosmosReward]
    skipped: list[str]
    medium: str  # "image" | "video"
    pixels: np.ndarray | None  # [B,H,W,3] images or [B,T,H,W,3] videos
    latents: np.ndarray | None  # float32 [B,C,T,H,W]
    fps: list[float] | None
    info: dict[str, Any]
    batch: int
    extra_meta: list[dict[str, Any]] = field(default_factory=list)


class CosmosRLService:
    def __init__(self, gateway: Gateway, store: ResultStore, cfg: CosmosRLConfig,
                 queue: RedisWorkQueue | None = None, instance: str | None = None) -> None:
        self.gateway = gateway
        self.store = store
        self.cfg = cfg
        self.instance = instance or uuidlib.uuid4().hex
        # store.queue: accepted work sits on a Redis Stream until its result is stored; any replica
        # on that Redis scores it (work_queue.py). None: this process scores what it accepts.
        self.queue = queue
        self._consumer: asyncio.Task | None = None
        self._entry_ids: dict[str, str] = {}  # uid -> its stream entry, while it runs here
        self._unstored: dict[str, dict[str, Any]] = {}  # uid -> final entry the store has not taken yet
        self.worker = TorchWorker(cfg.latents) if cfg.latents.python else None
        self._tasks: dict[str, asyncio.Task] = {}
        self._accepted: dict[str, dict[str, Any]] = {}  # uid -> _accepted_of(prepared), while it runs
        self._heartbeat: asyncio.Task | None = None
        self._readiness: dict[str, tuple[float, bool, str | None]] = {}  # judge -> (probed at, ok, reason)
        self._failed_heads: dict[str, str] = {}  # head -> why its last load failed, until it is ready

    # ---- reward names ----------------------------------------------------------------------

    def resolve(self, name: str) -> CosmosReward:
        mapping = self.cfg.rewards.get(name)
        if mapping is None:
            if name in self.gateway.judges:  # any configured judge by its own name
                return CosmosReward(judge=name, keys={name: LegacyKey(source="reward")})
            raise PayloadError(
                f"unknown reward {name!r}: not a cosmos-rl reward name ({', '.join(sorted(self.cfg.rewards))}) "
                f"nor a configured judge ({', '.join(self.gateway.judges) or 'none'})"
            )
        if mapping.judge not in self.gateway.judges:
            raise PayloadError(f"reward {name!r} is not configured on this gateway (it needs judge {mapping.judge!r})")
        return mapping

    def media_of(self, reward: CosmosReward) -> set[str]:
        """The media a reward can score (heads take images or videos; VLM judges what their template has)."""
        if reward.media:
            return {reward.media}
        return {m for m in self.gateway.judges[reward.judge].media if m in ("image", "video")} or {"image"}

    async def _check_ready(self, rewards: dict[str, CosmosReward]) -> None:
        """Refuse, before a uuid is given, rewards whose judge cannot score now (see JudgeUnready)."""
        for name, reward in rewards.items():
            judge = self.gateway.judges[reward.judge]
            now = time.monotonic()
            cached = self._readiness.get(reward.judge)
            if cached is None or now - cached[0] > self.gateway.config.server.readiness_interval_s:
                ok, reason = await judge.probe()
                cached = self._readiness[reward.judge] = (now, ok, reason)
            _, ok, reason = cached
            if ok:
                self._failed_heads.pop(reward.judge, None)
                continue
            why = f"reward {name!r} cannot be scored now: judge {reward.judge!r} is not ready ({reason})"
            if judge.backend_name is not None:  # a VLM backend: it may be starting; the client retries
                raise JudgeUnready(why + "; retry when its vLLM server is up", 503)
            if (reason or "").startswith("failed"):  # a head that could not load: retrying will not help
                self._failed_heads[reward.judge] = reason or "failed"
            elif reward.judge in self._failed_heads:  # it failed before and is retrying its load now
                why = (f"reward {name!r} cannot be scored now: judge {reward.judge!r} failed to load "
                       f"({self._failed_heads[reward.judge]}) and is retrying")
            else:
                continue  # a head loading for the first time: accept; scoring waits for the load
            raise JudgeUnready(why + "; fix the judge's model files (see /readyz) and restart or retry later", 424)

    def _check_decoder(self, channels: int) -> None:
        assert self.worker is not None
        if channels not in self.worker.decoders:
            have = ", ".join(f"{WAN_NAMES[n]}" for n in self.worker.decoders.values())
            want = WAN_CHANNELS[channels]
            raise PayloadError(f"latents have {channels} channels ({WAN_NAMES[want]}) but this gateway has no such "
                               f"decoder (cosmos_rl.latents.{want}); it decodes {have}")
        failure = self.worker.load_failure(channels)
        if failure is not None:
            raise JudgeUnready(f"the latent decoder could not be loaded: {failure}", 424)

    # ---- enqueue ---------------------------------------------------------------------------

    async def prepare(self, body: bytes, *, check_ready: bool = True) -> Prepared:
        meta_json, data = split_body(body)
        meta = parse_meta(meta_json)
        rewards, skipped = {}, []
        for name, weight in meta.reward_fn.items():
            if weight <= 0:  # the protocol: weight <= 0 means skip
                skipped.append(name)
                continue
            rewards[name] = self.resolve(name)
        if not rewards:
            raise PayloadError("every reward in `reward_fn` has weight <= 0: nothing to score")
        if self.cfg.refuse_unready and check_ready:
            await self._check_ready(rewards)
        def check_medium(medium: str, what: str) -> None:
            wrong = [n for n, r in rewards.items() if medium not in self.media_of(r)]
            if wrong:
                other = "videos" if medium == "image" else "images"
                raise PayloadError(f"{what} but {', '.join(wrong)} score {other} only")

        kind = sniff(data)
        if kind == "npy":
            arr = await asyncio.to_thread(load_npy, data)
            dtype_name = f"torch.{arr.dtype}"
        else:
            if self.worker is None:
                raise PayloadError("torch-saved tensors are loaded by the torch worker (cosmos_rl.latents.python), "
                                   "which this gateway does not have: send npy")
            try:
                arr, dtype_name = await self.worker.load_torch(data)
            except TorchWorkerError as err:
                raise PayloadError(f"torch payload refused: {err}") from None

        pixels = latents = None
        if meta.media_type == "image":
            pixels = check_image(arr)
            medium = "image"
            check_medium(medium, "media_type is 'image'")
        elif meta.media_type == "video":
            pixels = check_video(arr)
            medium = "video"
            check_medium(medium, "media_type is 'video'")
        else:
            if self.worker is None or not self.worker.can_decode:
                raise PayloadError("latent input (media_type missing or 'latent') needs a latent decoder, and none is "
                                   "configured on this gateway (cosmos_rl.latents.python + wan2_1 / wan2_2); send "
                                   "media_type 'image' or 'video' with uint8 pixels")
            latents = check_latent(arr)
            self._check_decoder(int(latents.shape[1]))
            medium = "image" if latents.shape[2] == 1 else "video"
            check_medium(medium, f"latents with T={latents.shape[2]} decode to {medium}s")
        batch = int(arr.shape[0])
        if batch < 1:
            raise PayloadError("the tensor's batch dimension is 0")
        if batch > self.cfg.max_batch:
            raise PayloadError(f"batch {batch} exceeds cosmos_rl.max_batch = {self.cfg.max_batch}")
        if meta.prompts is not None and len(meta.prompts) != batch:
            raise PayloadError(f"the tensor's batch is {batch} but `prompts` has {len(meta.prompts)} entries")
        self._check_limits(batch, pixels, latents, meta.prompts)
        fps = None
        if medium == "video":
            infos = meta.video_infos
            if infos is None:
                raise PayloadError(f"video rewards ({', '.join(rewards)}) need `video_infos` with `video_fps` per sample")
            if len(infos) != batch:
                raise PayloadError(f"the tensor's batch is {batch} but `video_infos` has {len(infos)} entries")
            fps = [_video_fps(i, info) for i, info in enumerate(infos)]
        per_sample = []
        for i in range(batch):
            md = {}
            for k, v in meta.extra.items():
                md[k] = v[i] if isinstance(v, list) and len(v) == batch else v
            per_sample.append(md)
        info = await asyncio.to_thread(input_info, arr, dtype_name)  # min/max of a video: off the loop
        if medium == "video" and meta.video_infos is not None:
            info["video_infos"] = meta.video_infos
        return Prepared(meta, rewards, skipped, medium, pixels, latents, fps, info, batch, per_sample)

    def _check_limits(self, batch: int, pixels: np.ndarray | None, latents: np.ndarray | None,
                      prompts: list[str] | None) -> None:
        """Frames, pixels and prompt limits, before a uuid is given (not at pull)."""
        limits = self.gateway.config.media.limits()
        if latents is not None:
            _, t, h, w = decoded_video_shape(latents.shape)
            check_enqueue_limits(batch, t, h, w, prompts, limits, f"latents {list(latents.shape)} decode to "
                                 f"{t} frames of {w}x{h}")
        else:
            assert pixels is not None
            t, h, w = (1, *pixels.shape[1:3]) if pixels.ndim == 4 else pixels.shape[1:4]
            check_enqueue_limits(batch, t, h, w, prompts, limits, f"tensor {list(pixels.shape)}")

    async def enqueue(self, body: bytes, *,
                      until: Callable[[Awaitable[Prepared]], Awaitable[Prepared]] | None = None) -> str:
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
            "deadline": deadline, **self._accepted_of(prepared),
        }, ttl_s=self.cfg.request_timeout_s + self._ttl())
        if self.queue is not None:  # accepted once it is on the stream; a consumer (any replica) scores it
            await self.queue.add(uid, body, deadline)
            return uid
        self._track(uid, self._run(uid, prepared, deadline))
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

    async def _run(self, uid: str, p: Prepared, deadline_at: float, entry_id: str | None = None) -> None:
        """Score an accepted request by its deadline (wall time) and store its one final entry."""
        left = max(0.0, deadline_at - time.time())
        deadline = time.monotonic() + left
        try:
            async with asyncio.timeout(left):
                entry = await self._score(uid, p, deadline)
        except TimeoutError:
            entry = self._failed(f"not finished within cosmos_rl.request_timeout_s = {self.cfg.request_timeout_s}s",
                                 self._accepted_of(p), ErrorCode.timeout)
        except asyncio.CancelledError:
            raise
        except TorchWorkerError as err:
            entry = self._failed(f"latent decoding failed: {err}", self._accepted_of(p))
        except Exception as err:
            log.exception("cosmos-rl request %s failed", uid)
            entry = self._failed(f"{type(err).__name__}: {err}", self._accepted_of(p))
        await self._store_final(uid, entry, entry_id)

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
        except (PayloadError, JudgeUnready, TorchWorkerError) as err:  # replicas configured differently?
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
        await self._run(work.uid, prepared, work.deadline, work.entry_id)

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
        """A failed request's pull under on_failed = fill: every sample invalid, its legacy values
        what the reward's on_invalid policy fills (one constant per request: zero advantage)."""
        prompts = entry.get("prompts")
        if self.cfg.on_failed != "fill" or not prompts or name not in entry.get("rewards", []):
            return None
        reward = self.resolve(name)
        reason = f"the request failed: {entry.get('reason')}"
        cell = JudgeScore.failure(reward.judge, ErrorCode(entry.get("code", ErrorCode.backend_error.value)), reason)
        fill = self.cfg.fill_of(reward)
        lists = legacy_lists(reward, fill, [cell] * len(prompts), prompts)
        return {
            "scores": lists.scores, "input_info": {}, "duration": "0.00", "decoded_duration": "0.00",
            "type": name, "status": "failed", "reason": entry.get("reason"),
            "message": f"{reason}; every sample is invalid, its legacy values filled by on_invalid = {fill.policy}",
            "judge": reward.judge,
            "valid": lists.valid, "errors": lists.errors, "on_invalid": fill.policy,
            "filled_by": lists.filled_by, "fill_value": fill.value, "judge_scores": [],
        }

    async def _score(self, uid: str, p: Prepared, deadline: float | None = None) -> dict[str, Any]:
        started = time.perf_counter()
        decoded_s = 0.0
        pixels = p.pixels
        if p.latents is not None:
            assert self.worker is not None
            t0 = time.perf_counter()
            video = await self.worker.decode(p.latents)  # [B,3,T,H,W] uint8
            decoded_s = time.perf_counter() - t0
            pixels = video[:, :, 0].transpose(0, 2, 3, 1) if p.medium == "image" else video.transpose(0, 2, 3, 4, 1)
        assert pixels is not None
        samples = await asyncio.to_thread(self._samples, p, pixels)
        judges = list(dict.fromkeys(r.judge for r in p.rewards.values()))
        if deadline is None:
            deadline = time.monotonic() + self.cfg.request_timeout_s
        cells = await self._scored(uid, samples, judges, deadline)
        duration = time.perf_counter() - started
        results = {}
        for name, reward in p.rewards.items():
            results[name] = self.envelope(name, reward, cells[reward.judge], p, duration, decoded_s)
        return {"status": "done", "results": results, "skipped": p.skipped, "finished_at": time.time()}

    async def _scored(self, uid: str, samples: list[SampleInput], judges: list[str],
                      deadline: float) -> dict[str, list[JudgeScore]]:
        """Every judge's cell per sample; cells that failed transiently are scored again (bounded
        backoff, cosmos_rl.retry_*) while the request's deadline allows, since whatever is left
        invalid gets filled and the trainer trains on the fill."""
        response = await self.gateway.score(RewardRequest(samples=samples, judges=judges, request_id=uid))
        cells = {j: [r.scores[j] for r in response.results] for j in judges}
        delay = self.cfg.retry_backoff_s
        reserve = min(1.0, 0.05 * self.cfg.request_timeout_s)  # finish (and fill) before the request times out
        for attempt in range(2, self.cfg.retry_attempts + 2):
            todo = {j: [i for i, c in enumerate(cs) if _transient(c)] for j, cs in cells.items()}
            todo = {j: idx for j, idx in todo.items() if idx}
            if not todo:
                break
            budget = deadline - time.monotonic() - delay - reserve
            if budget <= 0:
                log.info("cosmos-rl %s: no time left to re-score %d transient failures", uid,
                         sum(map(len, todo.values())))
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.cfg.retry_backoff_max_s)

            async def again(judge: str, idx: list[int], attempt: int = attempt, budget: float = budget) -> None:
                request = RewardRequest(samples=[samples[i] for i in idx], judges=[judge],
                                        request_id=f"{uid}:attempt{attempt}")
                try:
                    async with asyncio.timeout(budget):
                        retried = await self.gateway.score(request)
                except TimeoutError:
                    return
                for i, result in zip(idx, retried.results):
                    cell = result.scores[judge]
                    cell.details["attempts"] = attempt
                    cells[judge][i] = cell

            await asyncio.gather(*(again(j, idx) for j, idx in todo.items()))
        return cells

    def _samples(self, p: Prepared, pixels: np.ndarray) -> list[SampleInput]:
        out = []
        for i in range(p.batch):
            prompt = p.meta.prompts[i] if p.meta.prompts is not None else ""
            try:
                if p.medium == "image":
                    sample = SampleInput(prompt=prompt, image=ImageMedia.from_array(pixels[i]), metadata=p.extra_meta[i])
                else:
                    assert p.fps is not None
                    sample = SampleInput(prompt=prompt, video=VideoMedia.from_array(pixels[i], p.fps[i]),
                                         metadata=p.extra_meta[i])
            except MediaError as err:
                raise PayloadError(f"sample {i}: {err}") from None
            out.append(sample)
        return out

    def envelope(self, name: str, reward: CosmosReward, cells: list[JudgeScore], p: Prepared,
                 duration: float, decoded_s: float) -> dict[str, Any]:
        """The original's result envelope, plus per-sample `valid`, `errors`, `filled_by` and JudgeScores.

        cosmos-rl's trainer reads only `scores`: an invalid sample's legacy values there are what
        the reward's invalid policy fills in (see cosmos_legacy), and it trains on them; `valid`,
        `errors` and `filled_by` say which they are for anyone who looks.
        """
        fill = self.cfg.fill_of(reward)
        prompts = p.meta.prompts if p.meta.prompts is not None else [""] * len(cells)
        lists = legacy_lists(reward, fill, cells, prompts)
        return {
            "scores": lists.scores,
            "input_info": p.info,
            "duration": f"{duration:.2f}",
            "decoded_duration": f"{decoded_s:.2f}",
            "type": name,
            # Ours, next to the legacy keys.
            "status": "done",
            "judge": reward.judge,
            "valid": lists.valid,
            "errors": lists.errors,
            "on_invalid": fill.policy,
            "filled_by": lists.filled_by,
            "fill_value": fill.value,
            # via JSON: pydantic writes inf/nan as null, which the store and the reply can carry
            "judge_scores": [json.loads(c.model_dump_json()) for c in cells],
        }

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
                return 425, {**base, "status": "pending", "message": f"Not found scores for {uid}: still scoring"}
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

    # ---- latent_attr -----------------------------------------------------------------------

    def set_latent_attr(self, raw: str | None) -> tuple[int, dict[str, Any]]:
        """The original's POST /api/reward/latent_attr: it rebuilds its Wan2.1 decoder from these
        fields. Here only `load_mean_std` changes anything; a client never names files or devices
        on the server, and the other fields do not affect decoding (each is listed with why)."""
        if raw is None:
            raise PayloadError("latent_attr needs the form field `fields` (a JSON object)")
        try:
            fields = parse_json(raw, "`fields`")  # the safe parser: depth, digits, UTF-8 bounded
        except JSONBodyError as err:
            raise PayloadError(str(err)) from None
        if not isinstance(fields, dict):
            raise PayloadError("`fields` must be a JSON object")
        if self.worker is None or not self.worker.can_decode:
            raise PayloadError("this gateway has no latent decoder (cosmos_rl.latents); latent_attr has nothing to set")
        wan21 = self.cfg.latents.wan2_1
        applied: dict[str, Any] = {}
        ignored: dict[str, str] = {}
        for key, value in fields.items():
            if key == "load_mean_std":
                if not isinstance(value, bool):
                    raise PayloadError(f"`load_mean_std` must be true or false, got {value!r}")
                if value and not (wan21 and wan21.images_mean_std and wan21.video_mean_std):
                    raise PayloadError("load_mean_std = true needs the statistics files on the gateway "
                                       "(cosmos_rl.latents.wan2_1.images_mean_std and video_mean_std)")
                self.worker.load_mean_std = value
                applied[key] = value
            elif key in ("vae_pth", "device"):
                ignored[key] = (f"the gateway decodes with its configured decoders (cosmos_rl.latents: "
                                f"{self._decoder_names()}, device {self.cfg.latents.device}); a client never "
                                "chooses files or devices on the server")
            elif key in ("chunk_duration", "temporal_window"):
                ignored[key] = "used by the Wan2.1 encoder only; decoding does not depend on it"
            elif key in ("fps", "num_frames", "height", "width"):
                ignored[key] = ("stored but never used by the original; the frame rate comes with each "
                                "request (video_infos[i].video_fps)")
            else:
                ignored[key] = "not a latent attribute of the original"
        return 200, {"message": "Latent attributes set successfully", "applied": applied, "ignored": ignored,
                     "load_mean_std": self.worker.load_mean_std}

    def _decoder_names(self) -> str:
        return ", ".join(f"{name} = {vae.checkpoint!r}" for name, vae in self.cfg.latents.decoders().values())

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
            await self.worker.aclose()


def _is_uuid(text: str) -> bool:
    try:
        return str(uuidlib.UUID(text)) == text
    except ValueError:
        return False


class QueueFull(RuntimeError):
    pass


class JudgeUnready(RuntimeError):
    """A reward's judge (or the latent decoder) cannot score now. 424 when it failed to load:
    cosmos-rl's trainer gives up on a 4xx at once, with this message, instead of training on fills;
    503 (+ Retry-After) while a VLM backend is unreachable: the trainer retries with backoff."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _video_fps(i: int, info: dict[str, Any]) -> float:
    """`video_fps` (what the original's handlers read) or `fps` (what its README's example sends)."""
    values = {k: info[k] for k in ("video_fps", "fps") if k in info}
    if not values:
        raise PayloadError(f"video_infos[{i}] needs `video_fps` (or `fps`): the frame rate of the video")
    for key, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v <= 1000):
            raise PayloadError(f"video_infos[{i}].{key} must be a number in (0, 1000], got {v!r}")
    if len(values) == 2 and float(values["video_fps"]) != float(values["fps"]):
        raise PayloadError(f"video_infos[{i}] has video_fps = {values['video_fps']} and fps = {values['fps']}: "
                           "which is it?")
    return float(next(iter(values.values())))




def _transient(cell: JudgeScore) -> bool:
    """Worth scoring again: a backend fault, or a head whose worker crashed under it (respawned)."""
    if cell.valid or cell.error is None:
        return False
    return cell.error.code in TRANSIENT_ERRORS or (cell.error.code == ErrorCode.head_error
                                                    and bool(cell.details.get("worker_crashed")))


async def _fields(request: Request) -> dict[str, str]:
    """Form-encoded fields (what the clients send), or a JSON object."""
    body = await request.body()
    ctype = request.headers.get("content-type", "")
    if "json" in ctype or body.lstrip()[:1] == b"{":
        try:
            data = parse_json(body or b"{}")
        except JSONBodyError as err:
            raise PayloadError(str(err)) from None
        if not isinstance(data, dict):
            raise PayloadError("JSON body must be an object")
        return {k: json.dumps(v) if isinstance(v, (dict, list)) else str(v) for k, v in data.items()}
    try:
        # a bound keeps a huge form from becoming a huge dict
        parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
    except UnicodeDecodeError:
        raise PayloadError("form body is not UTF-8") from None
    except ValueError as err:  # more fields than the bound
        raise PayloadError(f"form body refused: {err} (at most {MAX_FORM_FIELDS})") from None
    return {k: v[0] for k, v in parsed.items()}


def install(app: FastAPI, service: CosmosRLService) -> None:
    metrics = service.gateway.metrics

    def bad(message: str, status: int = 400) -> JSONResponse:
        return JSONResponse({"message": message, "error": message, "status": "rejected"}, status_code=status)

    @app.post("/api/reward/ping", summary="cosmos-rl: ping (form field info_data, only logged)")
    async def ping(request: Request) -> JSONResponse:
        try:
            fields = await _fields(request)
        except PayloadError:
            fields = {}
        log.info("cosmos-rl ping: %s", fields.get("info_data", "")[:500])
        return JSONResponse({"message": "Ping request received", "status": "ok"})

    @app.post("/api/reward/enqueue", summary="cosmos-rl: enqueue `<JSON>\\n<tensor bytes>`; 400 with the reason if invalid")
    async def enqueue(request: Request) -> JSONResponse:
        started = time.perf_counter()
        status = "error"
        try:
            body = await request.body()
            try:
                uid = await service.enqueue(body, until=lambda work: unless_disconnected(request, work))
            except ClientDisconnected:
                status = "cancelled"
                metrics.cancelled_requests.labels("cosmos_rl").inc()
                return bad("the client disconnected before the request was accepted", CLIENT_CLOSED)
            except PayloadError as err:
                status = "invalid"
                return bad(str(err))
            except QueueFull as err:
                status = "rejected"
                resp = bad(str(err), 503)
                resp.headers["Retry-After"] = "1"
                return resp
            except JudgeUnready as err:
                status = "rejected"
                resp = bad(str(err), err.status)
                if err.status == 503:
                    resp.headers["Retry-After"] = "10"
                return resp
            except StoreError as err:
                resp = bad(f"result store unavailable: {err}", 503)
                resp.headers["Retry-After"] = "2"
                return resp
            status = "ok"
            return JSONResponse({"uuid": uid})
        finally:
            metrics.requests.labels("cosmos_rl", status).inc()
            metrics.request_latency.labels("cosmos_rl").observe(time.perf_counter() - started)

    @app.post("/api/reward/pull", summary="cosmos-rl: pull (form fields uuid, type); non-200 with `status` while not ready")
    async def pull(request: Request) -> JSONResponse:
        try:
            fields = await _fields(request)
        except PayloadError as err:
            return bad(str(err))
        # The original defaults a missing `type` to dance_grpo (cosmos_rl.default_pull_type).
        uid, reward = fields.get("uuid", ""), fields.get("type") or service.cfg.default_pull_type
        if not uid:
            return bad("pull needs the form field `uuid` (and `type`, the reward name)")
        try:
            code, body = await service.pull(uid, reward, type_given=bool(fields.get("type")))
        except StoreError as err:
            return JSONResponse({"uuid": uid, "type": reward, "status": "unavailable",
                                 "message": f"result store unavailable: {err}"}, status_code=503,
                                headers={"Retry-After": "2"})
        return JSONResponse(body, status_code=code)

    @app.post("/api/reward/latent_attr",
              summary="cosmos-rl: set latent decoder attributes (form field `fields`, a JSON object)")
    async def latent_attr(request: Request) -> JSONResponse:
        try:
            fields = await _fields(request)
            code, body = service.set_latent_attr(fields.get("fields"))
        except PayloadError as err:
            return bad(str(err))
        return JSONResponse(body, status_code=code)
