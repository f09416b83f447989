"""One accepted cosmos-rl request scored: its latents decoded (inside the process-wide media
budget), its samples built, every judge's cells scored until the deadline (rescore.py), and one
result envelope per reward (envelope.py, where invalid samples are filled) in a DoneEntry."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ...config import CosmosRLConfig
from ...gateway import Gateway
from ...latents import LatentDecoderSupervisor
from ...schema import JudgeScore, SampleInput
from .entry import DoneEntry
from .envelope import result_envelope
from .payload import PayloadChecks, Prepared, latents_plan
from .rescore import score_until_deadline
from .tensors import decoded_video_shape

# What the watch is handed: the samples and each judge's cells over them.
Scored = tuple[list[SampleInput], dict[str, list[JudgeScore]]]


class RequestScorer:
    def __init__(self, gateway: Gateway, cfg: CosmosRLConfig, payloads: PayloadChecks,
                 worker: LatentDecoderSupervisor | None) -> None:
        self.gateway = gateway
        self.cfg = cfg
        self.payloads = payloads
        self.worker = worker

    async def score(self, uid: str, p: Prepared, deadline: float | None = None,
                    keep: Callable[[Scored], None] | None = None) -> DoneEntry:
        """The request's DoneEntry by `deadline` (monotonic). Latents decode to pixels here: their
        share of the decoded-media budget is waited for (accepted work is never refused; the
        caller's deadline bounds the wait). `keep` gets the samples and their cells."""
        b, t, h, w = decoded_video_shape(p.latents.shape) if p.latents is not None else (0, 0, 0, 0)
        async with self.gateway.media_budget.reserve(b * (1 if p.medium == "image" else t) * h * w, wait_s=None):
            return await self._decode_and_score(uid, p, deadline, keep)

    async def _decode_and_score(self, uid: str, p: Prepared, deadline: float | None,
                                keep: Callable[[Scored], None] | None) -> DoneEntry:
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
        prompts = p.meta.prompts if p.meta.prompts is not None else [""] * p.batch
        results = {name: result_envelope(name, reward, self.cfg.fill_of(reward), cells[reward.judge], prompts,
                                         p.info, duration, decoded_s, p.notes.get(name), p.ignored)
                   for name, reward in p.rewards.items()}
        return DoneEntry(results, p.skipped, time.time())
