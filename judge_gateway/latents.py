"""The gateway side of the torch worker (latent_worker.py): one subprocess, supervised by
workers/supervisor.py and spoken to in workers/framing.py's frames.

Calls are serialised (the worker does one thing at a time; decoding is compute-bound anyway).
The worker starts at the first call. A worker that dies is restarted (with a back-off); one that
times out is killed and restarted; the call that saw either fails with `LatentDecoderError`, never
a silent result. Replies are matched to calls by id, so a call whose caller left (cancelled) is
finished by the worker and its reply dropped; the worker is not killed for it.

Latents go to the decoder configured for their channel count (16: Wan2.1, 48: Wan2.2), as the
original does. A decoder that failed to load is remembered for `retry_failed_load_s`, so the
adapter can refuse its latents at enqueue with the reason instead of accepting doomed requests.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .config import WAN_NAMES, LatentDecoderConfig
from .workers.framing import MAX_LATENT_PAYLOAD_BYTES
from .workers.supervisor import Launch, WorkerError, WorkerSupervisor

WORKER_SCRIPT = Path(__file__).resolve().parent / "latent_worker.py"
RESTART_BACKOFF_S = 0.5


class LatentDecoderError(WorkerError):
    """The worker could not do what was asked; the message says why (`stage` "load": the model)."""


class LatentDecoderSupervisor(WorkerSupervisor):
    error_type = LatentDecoderError
    crash_why = "died with the call in flight; it restarts"

    def __init__(self, cfg: LatentDecoderConfig) -> None:
        if not cfg.python:
            raise LatentDecoderError("cosmos_rl.latents.python is not configured")
        super().__init__("torch worker", startup_timeout_s=cfg.start_timeout_s, restart_backoff_s=RESTART_BACKOFF_S,
                         retry_failed_load_s=cfg.retry_failed_load_s, max_payload=MAX_LATENT_PAYLOAD_BYTES)
        self.cfg = cfg
        self._lock = asyncio.Lock()
        self._waiting: dict[tuple[Any, ...], list[_Waiting]] = {}  # alike decode calls waiting to batch
        self._load_failures: dict[str, tuple[float, str]] = {}  # decoder -> (when, why)
        # cosmos-rl's load_mean_std of the Wan2.1 decoder; POST /api/reward/latent_attr sets it.
        self.load_mean_std = bool(cfg.wan2_1 and cfg.wan2_1.load_mean_std)

    @property
    def can_decode(self) -> bool:
        return bool(self.decoders)

    @property
    def decoders(self) -> dict[int, str]:
        """Latent channels -> decoder name, for the configured decoders."""
        return {c: name for c, (name, _) in self.cfg.decoders().items()}

    def load_failure(self, channels: int) -> str | None:
        """Why the decoder of these latents failed to load, while that is recent enough to refuse."""
        name = self.decoders.get(channels)
        failed = self._load_failures.get(name) if name else None
        if failed is None or time.monotonic() - failed[0] >= self.cfg.retry_failed_load_s:
            return None
        return failed[1]

    def launch(self) -> Launch:
        assert self.cfg.python is not None
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        # WARNING, so it shows by default (the CLI logs WARNING and up unless --verbose): VAE
        # load messages, library warnings and tracebacks went straight to the gateway's stderr
        # before the shared supervisor piped them, and should stay visible.
        return Launch([self.cfg.python, str(WORKER_SCRIPT)], env, stderr_level=logging.WARNING)

    async def _call(self, header: dict[str, Any], payload: bytes, timeout: float) -> tuple[dict[str, Any], bytes]:
        async with self._lock:
            return await self._call_locked(header, payload, timeout)

    async def _call_locked(self, header: dict[str, Any], payload: bytes,
                           timeout: float) -> tuple[dict[str, Any], bytes]:
        await self.wait_ready()  # starts the worker at the first call, or waits out a restart
        reply, out = await self.request(header, payload, timeout=timeout)
        if not reply.get("ok"):
            raise LatentDecoderError(reply.get("error", "unknown worker error"), stage=reply.get("stage"))
        return reply, out

    async def ping(self) -> str:
        reply, _ = await self._call({"op": "ping"}, b"", self.cfg.start_timeout_s)
        return str(reply.get("torch"))

    async def load_torch(self, data: bytes) -> tuple[np.ndarray, str]:
        """A torch.save'd tensor as numpy (bf16 -> float32) and its torch dtype name."""
        reply, out = await self._call({"op": "load_torch"}, data, self.cfg.start_timeout_s)
        return np.load(io.BytesIO(out), allow_pickle=False), str(reply["dtype"])

    async def decode(self, latents: np.ndarray, frames: list[list[int]] | None = None,
                     size: tuple[int, int] | None = None) -> np.ndarray:
        """float32 [B,C,T,H,W] -> uint8 pixels [B,3,T',H',W'], by the decoder of C channels; with
        `frames` (source indices per sample, as many for each) and `size` (width, height), only
        those frames at that size, [B,3,n,h,w]: sampled and resized on the decoder's device
        (latent_worker.sample_and_resize), so a 224 MB 720p clip crosses the pipe as ~21 MB.

        Calls that wait while the worker is busy are decoded together when they are alike (same
        decoder, latent shape, frames kept and size) and hold at most `batch_size` samples between
        them: the device then decodes full batches across cosmos-rl requests of a sample or two."""
        header = self._decode_header(latents, frames, size)
        if latents.shape[0] >= self.cfg.batch_size or not self._lock.locked():
            return await self._decode_now(header, [latents], [frames])
        key = (header["decoder"], json.dumps(header["mean_std"]), latents.shape[1:],
               len(frames[0]) if frames else None, tuple(size) if size else None)
        item = _Waiting(latents, frames, asyncio.get_running_loop().create_future())
        group = self._waiting.setdefault(key, [])
        group.append(item)
        if len(group) == 1:  # the first of its kind starts the batch; the rest join it while it waits
            flush = asyncio.ensure_future(self._flush(key))
            flush.add_done_callback(lambda t: t.cancelled() or t.exception())
        return await item.result

    def _decode_header(self, latents: np.ndarray, frames: list[list[int]] | None,
                       size: tuple[int, int] | None) -> dict[str, Any]:
        channels = int(latents.shape[1])
        if channels not in self.decoders:
            raise LatentDecoderError(f"no decoder for {channels}-channel latents is configured (cosmos_rl.latents)")
        name, vae = self.cfg.decoders()[channels]
        mean_std = None
        if name == "wan2_1" and self.load_mean_std:
            if not (vae.images_mean_std and vae.video_mean_std):
                raise LatentDecoderError("load_mean_std is on but cosmos_rl.latents.wan2_1 has no "
                                       "images_mean_std / video_mean_std")
            mean_std = {"images": vae.images_mean_std, "video": vae.video_mean_std}
        return {"op": "decode", "decoder": name, "channels": channels, "checkpoint": vae.checkpoint,
                "subfolder": vae.subfolder, "device": self.cfg.device, "dtype": self.cfg.dtype,
                "batch_size": self.cfg.batch_size, "denormalize": self.cfg.denormalize, "mean_std": mean_std,
                "to_uint8": self.cfg.to_uint8, "frames": frames, "size": list(size) if size else None}

    async def _decode_now(self, header: dict[str, Any], parts: list[np.ndarray],
                          frames: list[list[list[int]] | None], locked: bool = False) -> np.ndarray:
        """One worker call for these latents (concatenated along the batch)."""
        latents = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
        header = {**header, "frames": [f for fs in frames for f in fs] if frames[0] is not None else None}
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(latents, dtype=np.float32), allow_pickle=False)
        name = header["decoder"]
        call = self._call_locked if locked else self._call
        try:
            _, out = await call(header, buf.getvalue(), self.cfg.start_timeout_s + self.cfg.timeout_s)
        except LatentDecoderError as err:
            if err.stage == "load":
                self._load_failures[name] = (time.monotonic(), f"{WAN_NAMES[name]} decoder {header['checkpoint']!r}: {err}")
            raise
        self._load_failures.pop(name, None)
        return np.load(io.BytesIO(out), allow_pickle=False)

    async def _flush(self, key: tuple[Any, ...]) -> None:
        """Decode the calls gathered under `key` once the worker is free, `batch_size` samples at
        most per worker call; each caller gets its own rows (or the call's error)."""
        async with self._lock:
            group = self._waiting.pop(key, [])
            batch: list[_Waiting] = []
            for item in group:
                if item.result.done():  # its caller left
                    continue
                if batch and sum(b.latents.shape[0] for b in batch) + item.latents.shape[0] > self.cfg.batch_size:
                    self._waiting.setdefault(key, []).append(item)  # the next batch
                    continue
                batch.append(item)
            if key in self._waiting:
                later = asyncio.ensure_future(self._flush(key))
                later.add_done_callback(lambda t: t.cancelled() or t.exception())
            if not batch:
                return
            header = self._decode_header(batch[0].latents, batch[0].frames, None)
            header["size"] = list(key[4]) if key[4] else None
            try:
                pixels = await self._decode_now(header, [b.latents for b in batch], [b.frames for b in batch],
                                                locked=True)
            except BaseException as err:
                failure = err if isinstance(err, Exception) else LatentDecoderError("the latent decoder stopped")
                for b in batch:
                    if not b.result.done():
                        b.result.set_exception(failure)
                raise
        start = 0
        for b in batch:
            rows = b.latents.shape[0]
            if not b.result.done():
                b.result.set_result(pixels[start: start + rows])
            start += rows


@dataclass
class _Waiting:
    """A decode call waiting to be batched with others like it."""

    latents: np.ndarray
    frames: list[list[int]] | None
    result: asyncio.Future[np.ndarray]
