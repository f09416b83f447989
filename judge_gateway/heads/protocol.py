"""The gateway <-> head worker messages, carried in workers/framing.py's frames; no pickle.

Arrays travel as raw bytes, described in the header by `shape` and `dtype` (only uint8 images are
accepted), so nothing a client sent is ever unpickled.

A score frame carries one or more jobs (a request's images go out together):
  {"op": "score", "dtype": "uint8", "via": "shm" | "pipe",
   "jobs": [{"id", "prompt", "shape": [n, H, W, 3], "offset"}, ...]}
With `via = "shm"` the pixels lie in the worker's shared-memory arena at `offset` (shm.py) and the
frame has no payload; with `via = "pipe"` they follow in the payload, `offset` into it. The
single-job form {"op": "score", "id", "prompt", "shape", "dtype"} + payload is accepted too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..workers.framing import ProtocolError

if TYPE_CHECKING:
    from .shm import ArenaView


def images_header(frames: np.ndarray) -> dict[str, Any]:
    """Header fields describing a uint8 [n, H, W, 3] stack of frames."""
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames must be uint8 [n, H, W, 3], got {frames.dtype} {frames.shape}")
    return {"shape": list(frames.shape), "dtype": "uint8"}


def _checked_shape(shape: Any, dtype: Any) -> tuple[int, int, int, int]:
    if dtype != "uint8" or not isinstance(shape, list) or len(shape) != 4:
        raise ProtocolError(f"bad image description: dtype={dtype!r} shape={shape!r}")
    if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape) or shape[3] != 3:
        raise ProtocolError(f"bad image shape {shape!r}")
    return shape[0], shape[1], shape[2], shape[3]


def images_from_payload(header: dict[str, Any], payload: bytes) -> np.ndarray:
    """The uint8 [n, H, W, 3] frames a header describes, checked against the payload size."""
    n, h, w, c = _checked_shape(header.get("shape"), header.get("dtype"))
    if n * h * w * c != len(payload):
        raise ProtocolError(f"payload is {len(payload)} B, shape {[n, h, w, c]} needs {n * h * w * c} B")
    return np.frombuffer(payload, dtype=np.uint8).reshape(n, h, w, c)


@dataclass
class ScoreJob:
    """One job of a score frame: a request's frames for one prompt, with its reply id."""

    msg_id: int
    prompt: str
    frames: np.ndarray  # uint8 [n, H, W, 3], a view of the payload or of the arena


def jobs_header(jobs: list[tuple[int, str, tuple[int, ...]]], via: str) -> tuple[dict[str, Any], int]:
    """The header of a score frame whose jobs' pixels are packed back to back from offset 0 of
    their region (`via`: "shm" or "pipe"), and the region's size in bytes."""
    described, offset = [], 0
    for msg_id, prompt, shape in jobs:
        described.append({"id": msg_id, "prompt": prompt, "shape": list(shape), "offset": offset})
        offset += int(np.prod(shape))
    return {"op": "score", "dtype": "uint8", "via": via, "jobs": described}, offset


def jobs_from_frame(header: dict[str, Any], payload: bytes, arena: ArenaView | None,
                    base: int = 0) -> tuple[list[ScoreJob], list[tuple[Any, str]]]:
    """The jobs of a score frame, and (id, reason) for each job that is malformed. Raises
    ProtocolError when the frame as a whole cannot be read. `base`: the region's start in the
    arena (the frame's `region` field)."""
    if "jobs" not in header:  # the single-job form
        prompt = header.get("prompt", "")
        try:
            if not isinstance(prompt, str):
                raise ProtocolError("prompt must be a string")
            return [ScoreJob(header.get("id"), prompt, images_from_payload(header, payload))], []
        except ProtocolError as exc:
            return [], [(header.get("id"), str(exc))]
    jobs, via = header.get("jobs"), header.get("via")
    if not isinstance(jobs, list) or via not in ("shm", "pipe"):
        raise ProtocolError(f"bad score frame: via={via!r}, jobs is {type(jobs).__name__}")
    good: list[ScoreJob] = []
    bad: list[tuple[Any, str]] = []
    for job in jobs:
        msg_id = job.get("id") if isinstance(job, dict) else None
        try:
            if not isinstance(job, dict) or not isinstance(msg_id, int):
                raise ProtocolError("a job needs an integer id")
            if via == "shm" and arena is None:
                raise ProtocolError("a shared-memory frame, but this worker has no arena")
            prompt, offset = job.get("prompt", ""), job.get("offset")
            if not isinstance(prompt, str):
                raise ProtocolError("prompt must be a string")
            shape = _checked_shape(job.get("shape"), header.get("dtype"))
            if not isinstance(offset, int) or offset < 0:
                raise ProtocolError(f"bad offset {offset!r}")
            size = int(np.prod(shape))
            if via == "pipe":
                if offset + size > len(payload):
                    raise ProtocolError(f"job [{offset}, {offset + size}) is outside the {len(payload)} B payload")
                frames = np.frombuffer(payload, dtype=np.uint8, count=size, offset=offset).reshape(shape)
            else:
                assert arena is not None
                try:
                    frames = arena.array(base + offset, shape)
                except ValueError as exc:
                    raise ProtocolError(str(exc)) from None
            good.append(ScoreJob(msg_id, prompt, frames))
        except ProtocolError as exc:
            bad.append((msg_id, str(exc)))
    return good, bad
