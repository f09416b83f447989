"""The watch: shadow judges over a sampled share of live training traffic, off the critical path.

`offer` is what a route calls once its response is sent (cosmos-rl: once the result is stored):
it draws the sampled samples and puts them on a bounded queue, never awaiting anything, so the
trainer never waits for it. Workers (watch.max_concurrency of them) take batches from the queue
and score them with the shadow judges through the same Gateway, each batch only while the shadow
judges' VLM backends have watch.backend_headroom of their slots free; what waits too long, or
does not fit the queue (watch.queue_size samples, watch.queue_bytes of media), is shed and
counted. Scored samples join their run's window (windows.py); a sealed window's statistics and
alarms (monitor.py) go to the metrics, the log, the run's record (record.py) and GET /v1/watch.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import runs
from ..config import WatchConfig
from ..gateway import Gateway
from ..schema import JudgeScore, RewardRequest, SampleInput
from .metrics import watch_metrics
from .report import QueueReport, WatchReport
from .tags import RunTags
from .thumbs import thumbnail
from .watched_run import Sampled, WatchedRun
from .windows import LateSample, StepJump, Window

log = logging.getLogger(__name__)

TICK_S = 0.5  # how often time closes windows
HEADROOM_POLL_S = 0.05
SHUTDOWN_GRACE_S = 10.0  # what shadow requests in flight get to finish when the gateway stops


def held_bytes(sample: SampleInput) -> int:
    """Memory a queued sample holds, at most: encoded bytes and decoded pixels (a container video's
    decoded frames are dropped when it is queued, so it holds its bytes)."""
    total = 0
    for image in [sample.image, *sample.condition_images]:
        if image is not None:
            total += len(image.source_bytes() or b"") + image.width * image.height * 3
    for video in [sample.video, *sample.condition_videos]:
        if video is not None:
            data = video.source_bytes()
            total += len(data) if data is not None else video.num_frames * video.width * video.height * 3
    return total


@dataclass
class _Item:
    """One sampled sample on its way through the shadows."""

    run: WatchedRun
    window: Window
    tags: RunTags
    api: str
    request_id: str
    position: int  # the sample's index in its request
    sample: SampleInput
    scores: dict[str, JudgeScore]  # the request's scores of the training judges (and any shadow it ran)
    shadows: tuple[str, ...]  # shadow judges still to run
    queued_at: float
    size: int


class Watch:
    def __init__(self, gateway: Gateway, cfg: WatchConfig | None = None, folder: Path | None = None) -> None:
        self.gateway = gateway
        self.cfg = cfg if cfg is not None else gateway.config.watch
        self.folder = (folder or Path(self.cfg.folder)).resolve()
        self.metrics = watch_metrics(gateway.metrics.registry)
        self._rng = random.Random(self.cfg.seed)
        self._shadow_judges = set(self.cfg.shadow_judges)
        self._queue: deque[_Item] = deque()
        self._queued_bytes = 0
        self._wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        self._runs: dict[str, WatchedRun] = {}
        self._config_sha256 = runs.config_sha256(gateway.config.model_dump(mode="json"))
        self._counts: Counter[str] = Counter()
        self._shed: Counter[str] = Counter()
        self._in_flight = 0
        self._sealing: set[asyncio.Future] = set()  # seals running in worker threads
        self._closed = False

    @property
    def enabled(self) -> bool:
        return self.cfg.enabled

    # ---- intake: called by the routes, never awaits --------------------------------------------

    def offer(self, api: str, samples: Sequence[SampleInput], scores: Sequence[Mapping[str, JudgeScore]],
              tags: RunTags, request_id: str) -> None:
        """Sample a scored request's samples for the shadows (after its response is sent)."""
        if not self.enabled or self._closed:
            return
        self._start()
        now = time.time()
        for position, (sample, cells) in enumerate(zip(samples, scores)):
            watched = [t for t in cells if t in self.cfg.shadows]
            if not watched:
                continue
            self._counts["offered"] += 1
            self.metrics.samples.labels("offered").inc()
            if self._rng.random() >= self.cfg.sample_rate:
                continue
            self._counts["sampled"] += 1
            self.metrics.samples.labels("sampled").inc()
            run = self._run(tags.run, now)
            if run is None:
                self._count_shed("too_many_runs")
                continue
            for train in watched:
                run.monitor.watch_pair(train, self.cfg.shadows[train])
            resyncs = run.windows.resyncs
            try:
                window = run.windows.assign(tags.step, now, request_id)
            except LateSample:
                self._count_shed("late_window")
                continue
            except StepJump:
                self._count_shed("step_jump")
                continue
            if run.windows.resyncs != resyncs:
                log.warning("watch run %r: %d requests in a row came with steps near %s, outside the run's windows; "
                            "its windows now follow them (the trainer resumed or restarted?)", run.name,
                            self.cfg.resync_requests, tags.step)
            if window.number == 0 and run.windows.mode == "time" and not run.said_windowing:
                run.said_windowing = True
                log.warning("watch run %r: the trainer sends no step, so windows close after watch.window_samples = "
                            "%d sampled samples or watch.window_s = %g s (send `step`, or the "
                            "X-Judge-Gateway-Step header, for windows per training step)", run.name,
                            self.cfg.window_samples, self.cfg.window_s)
            shadows = tuple(dict.fromkeys(s for t in watched for s in self.cfg.shadows[t] if s not in cells))
            kept = {j: s for j, s in cells.items() if j in watched or j in self._shadow_judges}
            if sample.video is not None:
                sample.video.clear_decoded()  # the training request is done with its frames
            size = held_bytes(sample)
            if len(self._queue) >= self.cfg.queue_size or self._queued_bytes + size > self.cfg.queue_bytes:
                run.windows.drop(window)
                self._count_shed("queue_full")
                continue
            self._queue.append(_Item(run, window, tags, api, request_id, position, sample, kept, shadows, now, size))
            self._queued_bytes += size
        self.metrics.queue_depth.set(len(self._queue))
        assert self._wake is not None
        self._wake.set()

    def offer_cells(self, api: str, samples: Sequence[SampleInput], cells: Mapping[str, Sequence[JudgeScore]],
                    tags: RunTags, request_id: str) -> None:
        """`offer` for scores kept per judge (judge -> one score per sample), as cosmos-rl keeps them."""
        self.offer(api, samples, [{j: scores[i] for j, scores in cells.items()} for i in range(len(samples))],
                   tags, request_id)

    def _run(self, name: str, now: float) -> WatchedRun | None:
        run = self._runs.get(name)
        if run is None:
            if len(self._runs) >= self.cfg.max_runs and not self._evict():
                return None
            run = self._runs[name] = WatchedRun(name, self.cfg, self.folder, self._config_sha256,
                                                self.gateway.residency.timeline)
        run.last_seen = now
        return run

    def _evict(self) -> bool:
        """Forget the longest idle run with nothing open (its record stays on disk)."""
        idle = [r for r in self._runs.values() if not r.windows.open and not r.lock.locked()]
        if not idle:
            return False
        gone = min(idle, key=lambda r: r.last_seen)
        del self._runs[gone.name]
        self.metrics.forget(gone.name)
        gone.close()
        return True

    def _count_shed(self, reason: str, n: int = 1) -> None:
        self._shed[reason] += n
        self.metrics.shed.labels(reason).inc(n)

    # ---- the workers -------------------------------------------------------------------------

    def _start(self) -> None:
        if self._tasks:
            return
        self._wake = asyncio.Event()
        self._tasks = [asyncio.create_task(self._work(), name=f"watch-worker-{i}")
                       for i in range(self.cfg.max_concurrency)]
        self._tasks.append(asyncio.create_task(self._tick(), name="watch-tick"))

    async def start(self) -> None:
        if self.enabled:
            self._start()

    def _take(self) -> list[_Item]:
        """A batch of queued items that share their shadow judges; items past max_wait_s are shed."""
        now = time.time()
        batch: list[_Item] = []
        while self._queue and len(batch) < self.cfg.batch_size:
            item = self._queue[0]
            if now - item.queued_at > self.cfg.max_wait_s:
                self._queue.popleft()
                self._release(item)
                item.run.windows.drop(item.window)
                self._count_shed("waited_too_long")
                continue
            if batch and item.shadows != batch[0].shadows:
                break
            batch.append(self._queue.popleft())
            self._release(item)
        self.metrics.queue_depth.set(len(self._queue))
        return batch

    def _release(self, item: _Item) -> None:
        self._queued_bytes -= item.size

    def _busy(self, shadows: tuple[str, ...]) -> bool:
        """True while a shadow judge's VLM backend has less than backend_headroom of its slots free."""
        for name in shadows:
            pool = self.gateway.pools.get(self.gateway.judges[name].backend_name or "")
            if pool is None:
                continue
            capacity = sum(r.max_concurrency for r in pool.replicas)
            free = capacity - sum(r.outstanding for r in pool.replicas)
            if free < self.cfg.backend_headroom * capacity or free <= 0:
                return True
        return False

    async def _work(self) -> None:
        assert self._wake is not None
        while not self._closed:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            shadows = self._queue[0].shadows
            while shadows and self._busy(shadows) and self._queue and not self._closed \
                    and time.time() - self._queue[0].queued_at <= self.cfg.max_wait_s:
                await asyncio.sleep(HEADROOM_POLL_S)
            if self._closed:
                return
            batch = self._take()
            if not batch:
                continue
            self._in_flight += len(batch)
            self.metrics.in_flight.set(self._in_flight)
            try:
                await self._score(batch)
            except asyncio.CancelledError:
                for item in batch:
                    item.run.windows.drop(item.window)
                self._count_shed("shutdown", len(batch))
                raise
            except Exception:  # a bug must not stop the watch or leave a window pending for ever
                log.exception("watch: scoring %d samples with shadows %s failed", len(batch), ", ".join(shadows))
                for item in batch:
                    item.run.windows.drop(item.window)
                self._count_shed("shadow_error", len(batch))
            finally:
                self._in_flight -= len(batch)
                self.metrics.in_flight.set(self._in_flight)
            for run in {id(item.run): item.run for item in batch}.values():
                await self._seal_ready(run)

    async def _score(self, batch: list[_Item]) -> None:
        shadows = batch[0].shadows
        results: list[dict[str, JudgeScore]] = [{} for _ in batch]
        if shadows:
            response = await self.gateway.score(RewardRequest(
                samples=[item.sample for item in batch], judges=list(shadows),
                request_id=f"watch-{uuid.uuid4().hex[:12]}"))
            results = [r.scores for r in response.results]
        entries = [item.run.entry(Sampled(item.api, item.request_id, item.position, item.tags.step, item.window,
                                          item.queued_at), item.sample.prompt, item.sample.group_id,
                                  {**item.scores, **scored})
                   for item, scored in zip(batch, results)]
        wanted = [(item, entry) for item, entry in zip(batch, entries) if item.run.wants_thumbnail(item.window, entry)]
        if wanted:
            made = await asyncio.to_thread(lambda: [thumbnail(item.sample, self.cfg.thumbnail_px,
                                                              self.cfg.video_frames) for item, _ in wanted])
            for (item, entry), thumb in zip(wanted, made):
                item.run.keep_thumbnail(item.window, entry, thumb)
        for item, entry in zip(batch, entries):
            item.run.add(item.window, entry)
        self._counts["scored"] += len(batch)  # counted once they are in their windows
        self.metrics.samples.labels("scored").inc(len(batch))

    # ---- windows: sealing, the record, the report --------------------------------------------

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            now = time.time()
            for run in list(self._runs.values()):
                run.windows.tick(now)
                await self._seal_ready(run)

    async def _seal_ready(self, run: WatchedRun) -> None:
        async with run.lock:
            windows = run.windows.sealable()
            if not windows:
                return
            # Shielded: a worker cancelled now (shutdown) must not lose windows already taken; aclose
            # waits for the thread to finish before it seals what is left.
            sealing = asyncio.ensure_future(asyncio.to_thread(run.seal, windows, self.metrics))
            self._sealing.add(sealing)
            sealing.add_done_callback(self._sealing.discard)
            await asyncio.shield(sealing)

    def thumbnail(self, run: str, index: int) -> Path | None:
        """The thumbnail file of a recorded sample of a run in memory, if it has one."""
        r = self._runs.get(run)
        return r.thumbnail_file(index) if r is not None else None

    def report(self, run: str | None = None, windows: int = 50) -> WatchReport:
        """GET /v1/watch: each run as of its last seal (with its live counts), and the queue."""
        if not self.enabled:
            return WatchReport(enabled=False)
        reports = [r.current(windows) for r in self._runs.values() if run is None or r.name == run]
        queue = QueueReport(capacity=self.cfg.queue_size, depth=len(self._queue), in_flight=self._in_flight,
                            offered=self._counts["offered"], sampled=self._counts["sampled"],
                            scored=self._counts["scored"], shed=dict(self._shed))
        return WatchReport(enabled=True, sample_rate=self.cfg.sample_rate, shadows=self.cfg.shadows, queue=queue,
                           runs=reports)

    async def aclose(self) -> None:
        """Stop: shadow requests in flight get SHUTDOWN_GRACE_S to finish, queued (and then still
        unfinished) samples are shed (counted), every open window is sealed with what it has, and
        the records are written."""
        self._closed = True
        if self._wake is not None:
            self._wake.set()  # idle workers wake up and leave
        workers, others = self._tasks[:-1], self._tasks[-1:]
        for task in others:
            task.cancel()
        if workers:
            _, late = await asyncio.wait(workers, timeout=SHUTDOWN_GRACE_S)
            for task in late:
                task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await asyncio.gather(*self._sealing, return_exceptions=True)
        dropped = len(self._queue)
        while self._queue:
            item = self._queue.popleft()
            self._release(item)
            item.run.windows.drop(item.window)
        if dropped:
            self._count_shed("shutdown", dropped)
        for run in self._runs.values():
            run.windows.close_all()
            await self._seal_ready(run)
            run.close()
