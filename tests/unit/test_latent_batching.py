"""The latent decoder batches alike decode calls that wait while the worker is busy (at most
cosmos_rl.latents.batch_size samples per worker call), and each caller gets its own rows."""

from __future__ import annotations

import asyncio
import io
import sys

import numpy as np

from judge_gateway.config import LatentDecoderConfig
from judge_gateway.latents import LatentDecoderSupervisor


def worker_with_fake_calls(batch_size: int) -> tuple[LatentDecoderSupervisor, list[dict]]:
    """A LatentDecoderSupervisor whose wire call is replaced: each decoded sample is filled with its latents'
    first value, so a caller can tell its rows from another's."""
    worker = LatentDecoderSupervisor(LatentDecoderConfig.model_validate(
        {"python": sys.executable, "batch_size": batch_size, "wan2_1": {"checkpoint": "/vae/wan21"}}))
    calls: list[dict] = []

    async def call(header, payload, timeout):
        lat = np.load(io.BytesIO(payload))
        calls.append({"batch": lat.shape[0], "frames": header["frames"], "size": header["size"]})
        await asyncio.sleep(0.05)  # the VAE at work
        out = np.stack([np.full((3, 2, 8, 8), int(v), np.uint8) for v in lat[:, 0, 0, 0, 0]])
        buf = io.BytesIO()
        np.save(buf, out)
        return {"ok": True}, buf.getvalue()

    worker._call_locked = call  # type: ignore[method-assign]
    return worker, calls


def latents(value: int) -> np.ndarray:
    return np.full((1, 16, 2, 1, 1), value, np.float32)


async def test_calls_that_wait_together_are_decoded_together() -> None:
    worker, calls = worker_with_fake_calls(batch_size=2)
    keep = [[0, 1]]
    results = await asyncio.gather(*(worker.decode(latents(v), frames=keep, size=(8, 8)) for v in (1, 2, 3, 4, 5)))
    # the first finds the worker free and goes alone; the four that waited go two by two
    assert [c["batch"] for c in calls] == [1, 2, 2]
    assert calls[1]["frames"] == [[0, 1], [0, 1]] and calls[1]["size"] == [8, 8]
    assert [int(r[0, 0, 0, 0, 0]) for r in results] == [1, 2, 3, 4, 5] and all(r.shape[0] == 1 for r in results)


async def test_unlike_calls_and_a_caller_that_left_are_not_merged() -> None:
    worker, calls = worker_with_fake_calls(batch_size=4)
    first = asyncio.ensure_future(worker.decode(latents(1)))
    await asyncio.sleep(0.01)  # the worker is busy now
    a = asyncio.ensure_future(worker.decode(latents(2), frames=[[0]]))
    b = asyncio.ensure_future(worker.decode(latents(3)))  # another plan: its own call
    gone = asyncio.ensure_future(worker.decode(latents(4), frames=[[0]]))
    await asyncio.sleep(0)
    gone.cancel()
    got = await asyncio.gather(first, a, b)
    assert sorted(c["batch"] for c in calls) == [1, 1, 1]  # nothing merged, the cancelled one not sent
    assert [int(r[0, 0, 0, 0, 0]) for r in got] == [1, 2, 3]
