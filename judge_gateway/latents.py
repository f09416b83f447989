"""The gateway side of the torch worker (latent_worker.py): one supervised subprocess.

Calls are serialised (the worker does one thing at a time; decoding is compute-bound anyway).
A worker that dies or times out is killed and restarted on the next call; the call that saw it
die fails with `TorchWorkerError`, never a silent result.

Latents go to the decoder configured for their channel count (16: Wan2.1, 48: Wan2.2), as the
original does. A decoder that failed to load is remembered for `retry_failed_load_s`, so the
adapter can refuse its latents at enqueue with the reason instead of accepting doomed requests.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import struct
import time
from pathlib import Path
from typing import Any

import numpy as np

from .config import WAN_NAMES, LatentDecoderConfig

WORKER_SCRIPT = Path(__file__).resolve().parent / "latent_worker.py"


class TorchWorkerError(RuntimeError):
    """The worker could not do what was asked; the message says why (`stage` "load": the model)."""

    def __init__(self, message: str, *, stage: str | None = None) -> None:
        super().__init__(message)
        self.stage = stage


class TorchWorker:
    def __init__(self, cfg: LatentDecoderConfig) -> None:
        if not cfg.python:
            raise TorchWorkerError("cosmos_rl.latents.python is not configured")
        self.cfg = cfg
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
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

    async def _start(self) -> asyncio.subprocess.Process:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            proc = await asyncio.create_subprocess_exec(
                self.cfg.python, str(WORKER_SCRIPT), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=None, env=env, limit=1 << 20,
            )
        except OSError as err:
            raise TorchWorkerError(f"cannot start the torch worker {self.cfg.python!r}: {err}") from None
        return proc

    async def _call(self, header: dict[str, Any], payload: bytes, timeout: float) -> tuple[dict[str, Any], bytes]:
        async with self._lock:
            if self._proc is None or self._proc.returncode is not None:
                self._proc = await self._start()
            proc = self._proc
            assert proc.stdin is not None and proc.stdout is not None
            h = json.dumps(header).encode()
            try:
                async with asyncio.timeout(timeout):
                    proc.stdin.write(struct.pack(">I", len(h)) + h + struct.pack(">Q", len(payload)))
                    proc.stdin.write(payload)
                    await proc.stdin.drain()
                    (hlen,) = struct.unpack(">I", await proc.stdout.readexactly(4))
                    reply = json.loads(await proc.stdout.readexactly(hlen))
                    (plen,) = struct.unpack(">Q", await proc.stdout.readexactly(8))
                    out = await proc.stdout.readexactly(plen) if plen else b""
            except TimeoutError:
                await self._kill()
                raise TorchWorkerError(f"torch worker gave no answer within {timeout:.0f}s (restarted)") from None
            except asyncio.CancelledError:
                # Cancelled mid-exchange (its client left): the next call would read this reply.
                if proc.returncode is None:
                    proc.kill()
                self._proc = None
                raise
            except (asyncio.IncompleteReadError, BrokenPipeError, ConnectionResetError) as err:
                await self._kill()
                raise TorchWorkerError(f"torch worker died ({type(err).__name__}); it restarts on the next call") from None
            if not reply.get("ok"):
                raise TorchWorkerError(reply.get("error", "unknown worker error"), stage=reply.get("stage"))
            return reply, out

    async def _kill(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.kill()
            await self._proc.wait()
        self._proc = None

    async def ping(self) -> str:
        reply, _ = await self._call({"op": "ping"}, b"", self.cfg.start_timeout_s)
        return str(reply.get("torch"))

    async def load_torch(self, data: bytes) -> tuple[np.ndarray, str]:
        """A torch.save'd tensor as numpy (bf16 -> float32) and its torch dtype name."""
        reply, out = await self._call({"op": "load_torch"}, data, self.cfg.start_timeout_s)
        return np.load(io.BytesIO(out), allow_pickle=False), str(reply["dtype"])

    async def decode(self, latents: np.ndarray) -> np.ndarray:
        """float32 [B,C,T,H,W] -> uint8 pixels [B,3,T',H',W'], by the decoder of C channels."""
        channels = int(latents.shape[1])
        if channels not in self.decoders:
            raise TorchWorkerError(f"no decoder for {channels}-channel latents is configured (cosmos_rl.latents)")
        name, vae = self.cfg.decoders()[channels]
        mean_std = None
        if name == "wan2_1" and self.load_mean_std:
            if not (vae.images_mean_std and vae.video_mean_std):
                raise TorchWorkerError("load_mean_std is on but cosmos_rl.latents.wan2_1 has no "
                                       "images_mean_std / video_mean_std")
            mean_std = {"images": vae.images_mean_std, "video": vae.video_mean_std}
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(latents, dtype=np.float32), allow_pickle=False)
        header = {"op": "decode", "decoder": name, "channels": channels, "checkpoint": vae.checkpoint,
                  "subfolder": vae.subfolder, "device": self.cfg.device, "dtype": self.cfg.dtype,
                  "batch_size": self.cfg.batch_size, "denormalize": self.cfg.denormalize, "mean_std": mean_std,
                  "to_uint8": self.cfg.to_uint8}
        try:
            _, out = await self._call(header, buf.getvalue(), self.cfg.start_timeout_s + self.cfg.timeout_s)
        except TorchWorkerError as err:
            if err.stage == "load":
                self._load_failures[name] = (time.monotonic(), f"{WAN_NAMES[name]} decoder {vae.checkpoint!r}: {err}")
            raise
        self._load_failures.pop(name, None)
        return np.load(io.BytesIO(out), allow_pickle=False)

    async def aclose(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()  # EOF: the worker exits on its own
            try:
                await asyncio.wait_for(self._proc.wait(), 5)
            except TimeoutError:
                await self._kill()
        self._proc = None
