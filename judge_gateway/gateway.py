"""The Gateway: fan every (sample, judge) pair out concurrently, combine, transform groups."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from .backends import BackendPool, deadline_at
from .combine import combine_sample, group_transform
from .config import GatewayConfig, load_config
from .device_video import DeviceVideoDecoder
from .exceptions import InvalidInput
from .judge_factory import build_judges
from .judges import Judge, ScoreContext
from .judges.queue import hold_queues
from .media import MediaCache
from .media.budget import MediaBudget
from .media.pool import MediaPool
from .media.scope import MediaScope, media_scope
from .metrics import Metrics
from .residency import Residency, VllmSleepDriver
from .schema import (
    CombineInfo,
    JudgeInfo,
    JudgeScore,
    RewardRequest,
    RewardResponse,
    SampleResult,
    Timings,
)

log = logging.getLogger(__name__)
# How a head's readiness reason begins while its worker loads (workers/supervisor.py; preflight.py reads
# the same): it will score.
LOADING_STATES = ("starting:", "restarting:")
MEDIA_STOP_WAIT_S = 10.0  # how long an ended request waits for its media threads to stop (one frame each)
# Cells started per turn of the event loop: each takes its first step (media identified, encoded
# inline when small) in the turn after it starts, so a request of 4,096 samples started at once
# held every other request for over a second; in groups of this many, the others run in between.
CELLS_PER_TURN = 256


class UnknownJudgeError(InvalidInput):
    """A request named a judge that is not configured."""


class RequestTooLargeError(InvalidInput):
    """A request holds more samples than server.max_samples_per_request."""


def build_residency(config: GatewayConfig, judges: dict[str, Judge], pools: dict[str, BackendPool],
                    metrics: Metrics) -> Residency:
    """A unit per colocated head (its own driver) and per backend of colocated VLM judges (vLLM's
    sleep mode on its servers, one driver for all its judges); every judge's score goes through
    its unit (Judge.residency)."""
    residency = Residency(metrics)
    by_backend: dict[str, list[str]] = {}
    for name, judge in judges.items():
        cfg = config.judges[name].residency
        if not cfg.colocated:
            residency.add_resident(name)
        elif judge.backend_name is not None:
            by_backend.setdefault(judge.backend_name, []).append(name)
        else:
            driver = judge.residency_driver()
            assert driver is not None, f"judge {name!r} has no sleep driver"
            unit = residency.add(f"head:{name}", [name], cfg, driver)
            judge.use_residency(unit)
            on_restart = getattr(driver, "on_restart", None)
            if on_restart is not None:
                on_restart(unit.thing_restarted)
    for backend, names in by_backend.items():
        # judges on one backend have one residency table (config/residency.py checks it)
        unit = residency.add(f"backend:{backend}", names, config.judges[names[0]].residency,
                             VllmSleepDriver(pools[backend]))
        for name in names:
            judges[name].use_residency(unit)
    return residency


class GroupTooLargeError(InvalidInput):
    """A request's group is larger than a comparative judge's max_group_size (its budget)."""


class Gateway:
    """Scores reward requests with the configured judges. Safe to share across requests."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.pools = {name: BackendPool(name, b) for name, b in config.backends.items()}
        self.judges: dict[str, Judge] = build_judges(config, self.pools)
        # Decoding, resizing and encoding of every request's media, on every core ([media]).
        self.media_pool = MediaPool(config.media.workers, config.media.max_pending)
        # [media.device]: judges' videos decoded and resized by a torch worker on the GPU (device_video.py)
        self.video_device = DeviceVideoDecoder(config.media.device) if config.media.device is not None else None
        self.metrics = Metrics()
        # Decoded pixels all requests scoring at once may hold (media/budget.py): the servers reserve a
        # request's share before it scores.
        self.media_budget = MediaBudget(config.media.process_pixels(),
                                        retry_after_s=config.server.admission.retry_after_s)
        self.metrics.watch_media_budget(self.media_budget)
        self.metrics.watch_queues({name: j.queue for name, j in self.judges.items() if j.queue is not None})
        # Colocated judges: one unit per head worker, one per backend (its judges sleep together).
        self.residency = build_residency(config, self.judges, self.pools, self.metrics)
        self._readiness: dict[str, tuple[bool, str | None]] = {}
        self._readiness_at = 0.0
        self._readiness_lock: asyncio.Lock | None = None

    @classmethod
    def from_config_file(cls, path: str | Path | None = None) -> "Gateway":
        return cls(load_config(path))

    def media_backlog(self) -> str | None:
        """Why new requests should wait (the media pool's queue is past its bound), else None."""
        pool = self.media_pool
        if not pool.overloaded:
            return None
        return (f"{pool.pending} media jobs queued or running on {pool.workers} media workers "
                f"(media.max_pending = {pool.max_pending})")

    def capacity(self) -> dict[str, int]:
        """What the configured judges can work on at once: per used backend its replicas x
        max_concurrency (once, however many judges share it), per head judge its max_batch_size.
        The admission bounds default to the sum (server.admission)."""
        out: dict[str, int] = {}
        for name, judge in self.judges.items():
            backend = judge.backend_name
            if backend is not None and backend in self.config.backends:
                b = self.config.backends[backend]
                out[f"backend:{backend}"] = len(b.base_urls) * b.max_concurrency
            elif judge.queue is not None:
                out[f"head:{name}"] = int(getattr(judge.cfg.options, "max_batch_size", 1))
        return out

    def backend_slots(self) -> dict[str, int]:
        """Per VLM backend a configured judge uses: its replicas x max_concurrency."""
        out: dict[str, int] = {}
        for judge in self.judges.values():
            backend = judge.backend_name
            if backend is not None and backend in self.config.backends:
                b = self.config.backends[backend]
                out[backend] = len(b.base_urls) * b.max_concurrency
        return out

    def backend_demand(self, request: RewardRequest) -> dict[str, int]:
        """Backend -> the calls scoring `request` sends it (each VLM judge's backend_calls: a call
        per sample, more with a shadow template or comparisons); {} for a request score() refuses at once (unknown judges, too many
        samples), so it holds no backend's room while it is refused."""
        if len(request.samples) > self.config.server.max_samples_per_request:
            return {}
        try:
            names = self.resolve_judges(request.judges)
        except UnknownJudgeError:
            return {}
        out: dict[str, int] = {}
        for name in names:
            judge = self.judges[name]
            backend = judge.backend_name
            if backend is not None:
                out[backend] = out.get(backend, 0) + judge.backend_calls(request.samples)
        return out

    def default_judges(self) -> list[str]:
        return [name for name, j in self.config.judges.items() if j.default]

    def resolve_judges(self, names: Sequence[str] | None) -> list[str]:
        if names is None:
            return self.default_judges()
        unknown = [n for n in names if n not in self.judges]
        if unknown:
            raise UnknownJudgeError(
                f"unknown judge(s) {', '.join(map(repr, unknown))}; configured: {', '.join(self.judges)}"
            )
        if len(set(names)) != len(names):
            raise UnknownJudgeError("a judge is named twice in `judges`")
        return list(names)

    async def score(self, request: RewardRequest, *, deadline: float | None = None,
                    when_busy: Literal["refuse", "wait"] = "wait") -> RewardResponse:
        """Score every sample with every requested judge; failures stay in their cell.

        `deadline` (time.monotonic()): backend retries of transient faults stop before it
        (backends.deadline_at). `when_busy`: a head judge whose queue has no room for the
        request is waited for ("wait": library callers, accepted work) or raises QueueFull
        ("refuse": the synchronous APIs answer 429 / 503 with Retry-After). When the
        request ends, however it ends, its decode/encode threads stop at their next frame and
        are waited for (media/scope.py), so what it decoded is released before this returns."""
        started = time.perf_counter()
        limit = self.config.server.max_samples_per_request
        if len(request.samples) > limit:
            raise RequestTooLargeError(
                f"{len(request.samples)} samples exceed server.max_samples_per_request = {limit}; split the request"
            )
        names = self.resolve_judges(request.judges)
        if not names:
            raise UnknownJudgeError("no judges to run: the request names none and no judge is a default")
        for name in names:  # refused before anything is scored: a request no retry can change
            if (reason := self.judges[name].refusal(request.samples)) is not None:
                raise GroupTooLargeError(reason)
        ctx = ScoreContext(media=MediaCache(self.media_pool, self.video_device), request_id=request.request_id or uuid.uuid4().hex,
                           samples=request.samples)
        demand = {name: (judge.queue, [judge.demand(s) for s in request.samples])
                  for name in names if (judge := self.judges[name]).queue is not None}
        held = await hold_queues(demand, wait=when_busy == "wait")
        scope = MediaScope()

        async def cell(sample_index: int, name: str) -> JudgeScore:
            try:
                score = await self.judges[name].score(request.samples[sample_index], ctx)
            except asyncio.CancelledError:  # the request was abandoned (client gone, shutdown)
                self.metrics.count(self.metrics.cancelled_scores, (name,))
                raise
            finally:
                held.give(name, sample_index)
            self._observe(score)
            return score

        tasks: list[list[asyncio.Future[JudgeScore]]] = []
        try:
            with media_scope(scope), deadline_at(deadline):  # inherited by every cell's task and thread
                for i in range(len(request.samples)):
                    tasks.append([asyncio.ensure_future(cell(i, name)) for name in names])
                    if (i + 1) % max(1, CELLS_PER_TURN // len(names)) == 0:
                        await asyncio.sleep(0)  # these cells take their first steps before more start
            await asyncio.gather(*(t for row in tasks for t in row))
        except BaseException:
            for row in tasks:
                for t in row:
                    t.cancel()
            raise
        finally:
            held.give_all()
            scope.stop()
            if not await scope.wait_idle(MEDIA_STOP_WAIT_S):
                log.warning("request %s: %d media threads still running %.0f s after it ended", ctx.request_id,
                            scope.busy, MEDIA_STOP_WAIT_S)
            self.metrics.observe_media(ctx.media.encodes_by_kind, ctx.media.hits_by_kind)

        weights = {name: self.judges[name].weight for name in names}
        results: list[SampleResult] = []
        for i, (sample, row) in enumerate(zip(request.samples, tasks)):
            scores = {name: t.result() for name, t in zip(names, row)}
            reward, valid, invalid = combine_sample(scores, weights, self.config.combine)
            results.append(SampleResult(index=i, group_id=sample.group_id, scores=scores,
                                        reward=reward, valid=valid, invalid_judges=invalid))
        transformed = group_transform([r.reward for r in results], [r.group_id for r in results],
                                      request.group_transform)
        for result, value in zip(results, transformed):
            result.group_reward = value
        self.metrics.count(self.metrics.samples, (), len(results))
        combine = self.config.combine
        return RewardResponse(
            id=ctx.request_id,
            judges=names,
            results=results,
            combine=CombineInfo(
                policy=combine.policy, on_invalid=combine.on_invalid,
                fill_value=combine.fill_value if combine.on_invalid == "fill" else None,
                weights=weights, group_transform=request.group_transform,
            ),
            timings=Timings(total_ms=(time.perf_counter() - started) * 1000.0),
        )

    def _observe(self, score: JudgeScore) -> None:
        m = self.metrics
        m.observe(m.judge_latency, (score.judge,), score.latency_ms / 1000.0)
        m.count(m.scores, (score.judge, "true" if score.valid else "false"))
        if not score.valid and score.error is not None:
            m.count(m.invalid_scores, (score.judge, score.error.code.value))
        # a comparative judge's group report rides on every member; counted once, with member 0
        if score.details.get("group_index") == 0 and isinstance(group := score.details.get("group"), dict):
            m.observe_group(score.judge, group)

    async def readiness(self, *, fresh: bool = False) -> dict[str, tuple[bool, str | None]]:
        """Judge name -> (ready, reason). Probes are cached for server.readiness_interval_s."""
        if self._readiness_lock is None:
            self._readiness_lock = asyncio.Lock()
        async with self._readiness_lock:
            age = time.monotonic() - self._readiness_at
            if fresh or not self._readiness or age > self.config.server.readiness_interval_s:
                # One probe per backend, shared by its judges.
                pools = list(self.pools.values())
                results = await asyncio.gather(*(p.probe() for p in pools))
                by_pool = {p.name: r for p, r in zip(pools, results)}
                ready: dict[str, tuple[bool, str | None]] = {}
                for name, judge in self.judges.items():
                    backend = judge.backend_name
                    if backend in by_pool:
                        ready[name] = by_pool[backend]
                    elif self.residency.skips_probe(name):
                        ready[name] = (True, None)  # asleep: a probe would start its worker
                    else:
                        ready[name] = await judge.probe()
                    ready[name] = self.residency.readiness(name, ready[name])
                self._readiness = ready
                self._readiness_at = time.monotonic()
            return dict(self._readiness)

    async def probe_judges(self, names: Sequence[str], *, wait: bool = False) -> dict[str, tuple[bool, str | None]]:
        """Readiness of the named judges only: nothing else is probed, and no other head worker
        starts. A VLM judge is ready when its backend answers; a head when its worker has loaded
        its model, which `wait` waits for (else a first probe starts the load and says so)."""
        unknown = [n for n in names if n not in self.judges]
        if unknown:
            raise UnknownJudgeError(f"unknown judge(s) {', '.join(map(repr, unknown))}; "
                                    f"configured: {', '.join(self.judges)}")
        pools = {b: self.pools[b] for n in names if (b := self.judges[n].backend_name) in self.pools}
        by_pool = dict(zip(pools, await asyncio.gather(*(p.probe() for p in pools.values()))))

        async def one(name: str) -> tuple[bool, str | None]:
            judge = self.judges[name]
            if judge.backend_name in by_pool:
                return self.residency.readiness(name, by_pool[judge.backend_name])
            if self.residency.skips_probe(name):
                return True, None
            return self.residency.readiness(name, await (judge.check() if wait else judge.probe()))

        return dict(zip(names, await asyncio.gather(*(one(n) for n in names))))

    async def unscorable(self, names: Sequence[str]) -> dict[str, str]:
        """Of the named judges, those that cannot score now, each with the reason (what a
        protocol's health answer says): a VLM judge whose backend does not answer or serve its
        model, a head whose model failed to load. A head still loading is not listed: requests
        for it wait for the load. Probed now (probe_judges)."""
        probed = await self.probe_judges(list(dict.fromkeys(names)))
        out = {}
        for name, (ok, reason) in probed.items():
            if ok:
                continue
            loading = self.judges[name].backend_name is None and (reason or "").startswith(LOADING_STATES)
            if not loading:
                out[name] = reason or "not ready"
        return out

    async def judge_infos(self, names: Sequence[str] | None = None, *, wait: bool = False) -> list[JudgeInfo]:
        """Every judge with its readiness (the cached probe of all of them), or only the named
        ones, probed now (see `probe_judges`)."""
        if names is None:
            ready = await self.readiness()
            infos = [j.info(*ready.get(name, (None, None))) for name, j in self.judges.items()]
        else:
            ready = await self.probe_judges(names, wait=wait)
            infos = [self.judges[name].info(*ready[name]) for name in names]
        for info in infos:
            info.residency = self.residency.info(info.name)
        return infos

    async def aclose(self) -> None:
        """Close every judge side by side (a head worker takes seconds to exit: its interpreter
        tears torch down), then the backend pools; a judge that fails to close does not keep the
        others open, and its error is raised once everything is closed."""
        await self.residency.aclose()  # its timers first: none may start a sleep or wake while closing
        results = await asyncio.gather(*(judge.aclose() for judge in self.judges.values()),
                                       return_exceptions=True)
        for pool in self.pools.values():
            await pool.aclose()
        if self.video_device is not None:
            await self.video_device.aclose()
        self.media_pool.shutdown()
        errors = [(name, r) for name, r in zip(self.judges, results) if isinstance(r, BaseException)]
        for name, err in errors[1:]:  # only the first is raised: the others are not lost
            log.error("judge %s failed to close: %r", name, err)
        if errors:
            raise errors[0][1]
