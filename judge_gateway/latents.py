"""The gateway side of the torch worker (latent_worker.py): one supervised subprocess.

Calls are serialised (the worker does one thing at a time; decoding is compute-bound anyway).
A worker that dies or times out is killed and restarted on the next call; the call that saw it
die fails with `TorchWorkerError`, never a silent result.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from .protocol_config import LatentDecoderConfig

WORKER_SCRIPT = Path(__file__).resolve().parent / "latent_worker.py"


class TorchWorkerError(RuntimeError):
    """The worker could not do what was asked; the message says why."""


class TorchWorker:
    def __init__(self, cfg: LatentDecoderConfig) -> None:
        if not cfg.python:
            raise TorchWorkerError("cosmos_rl.latents.python is not configured")
        self.cfg = cfg
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()

    @property
    def can_decode(self) -> bool:
        return bool(self.cfg.checkpoint)

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
                raise TorchWorkerError(reply.get("error", "unknown worker error"))
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
        """float32 [B,C,T,H,W] -> uint8 pixels [B,3,T',H',W']."""
        if not self.cfg.checkpoint:
            raise TorchWorkerError("no latent decoder configured (cosmos_rl.latents.checkpoint)")
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(latents, dtype=np.float32), allow_pickle=False)
        header = {"op": "decode", "checkpoint": self.cfg.checkpoint, "subfolder": self.cfg.subfolder,
                  "device": self.cfg.device, "dtype": self.cfg.dtype, "batch_size": self.cfg.batch_size,
                  "denormalize": self.cfg.denormalize}
        _, out = await self._call(header, buf.getvalue(), self.cfg.start_timeout_s + self.cfg.timeout_s)
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
