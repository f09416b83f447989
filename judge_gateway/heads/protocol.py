"""The gateway <-> head worker messages, carried in workers/framing.py's frames; no pickle.

Arrays travel as raw bytes, described in the header by `shape` and `dtype` (only uint8 images are
accepted), so nothing a client sent is ever unpickled.

A score frame carries one or more jobs (a request's images go out together):
  {"op": "score", "dtype": "uint8", "via": "shm" | "pipe",
   "jobs": [{"id", "prompt", "shape": [n, H, W, 3], "offset"}, ...]}
With `via = "shm"` the pixels lie in the worker's shared-memory arena at `offset` (shm.py) and the
frame has no payload; with `via = "pipe"` they follow in the payload, `offset` into it. The
single-job form {"op": "score", "id", "prompt", "shape", "dtype"} + payload is accepted too.

A brought head (heads/custom) takes whole samples: its jobs are
  {"id", "offset", "items": [{"prompt", "medium", "fps", "metadata", "group_id",
                              "arrays": [{"role", "shape"}, ...]}, ...]}
each item's arrays (its frames first, then its condition images and videos, all uint8
[n, H, W, 3]) packed back to back from `offset`; the reply has one output per item.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
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


ROLES = ("frames", "condition_image", "condition_video")


@dataclass
class HeadItem:
    """One sample for a brought head: its frames (an image is one frame) and what comes with them.
    On the worker side the arrays are views of the payload or of the arena."""

    prompt: str
    medium: str  # "image" | "video"
    frames: np.ndarray  # uint8 [n, H, W, 3]
    fps: float | None = None  # a video: the rate of the sampled frames
    metadata: dict[str, Any] = field(default_factory=dict)
    group_id: str | None = None
    condition_images: list[np.ndarray] = field(default_factory=list)  # uint8 [1, H, W, 3] each
    condition_videos: list[np.ndarray] = field(default_factory=list)  # uint8 [T, H, W, 3] each

    def arrays(self) -> list[np.ndarray]:
        """Its arrays in wire order."""
        return [self.frames, *self.condition_images, *self.condition_videos]

    def describe(self) -> dict[str, Any]:
        roles = ["frames"] + ["condition_image"] * len(self.condition_images) + \
            ["condition_video"] * len(self.condition_videos)
        return {"prompt": self.prompt, "medium": self.medium, "fps": self.fps, "metadata": self.metadata,
                "group_id": self.group_id,
                "arrays": [{"role": r, **images_header(a)} for r, a in zip(roles, self.arrays())]}


@dataclass(frozen=True)
class ItemsJob:
    """A brought head's job: its items' arrays packed back to back."""

    msg_id: int
    items: list[dict[str, Any]]  # HeadItem.describe() of each
    nbytes: int

    @classmethod
    def of(cls, msg_id: int, items: Sequence[HeadItem]) -> "ItemsJob":
        return cls(msg_id, [i.describe() for i in items], sum(a.nbytes for i in items for a in i.arrays()))


@dataclass
class ScoreJob:
    """One job of a score frame: a request's frames for one prompt (or a brought head's items),
    with its reply id."""

    msg_id: int
    prompt: str
    frames: np.ndarray  # uint8 [n, H, W, 3], a view of the payload or of the arena
    items: list[HeadItem] | None = None


def jobs_header(jobs: Sequence[tuple[int, str, tuple[int, ...]] | ItemsJob], via: str) -> tuple[dict[str, Any], int]:
    """The header of a score frame whose jobs' pixels are packed back to back from offset 0 of
    their region (`via`: "shm" or "pipe"), and the region's size in bytes. A job is
    (id, prompt, frames' shape), or an ItemsJob."""
    described, offset = [], 0
    for job in jobs:
        if isinstance(job, ItemsJob):
            described.append({"id": job.msg_id, "items": job.items, "offset": offset})
            offset += job.nbytes
            continue
        msg_id, prompt, shape = job
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
            offset = job.get("offset")
            if not isinstance(offset, int) or offset < 0:
                raise ProtocolError(f"bad offset {offset!r}")
            region = _Region(via, payload, arena, base, offset)
            if "items" in job:
                items = [_item(desc, region, header.get("dtype")) for desc in _items_list(job["items"])]
                good.append(ScoreJob(msg_id, "", items[0].frames, items))
                continue
            prompt = job.get("prompt", "")
            if not isinstance(prompt, str):
                raise ProtocolError("prompt must be a string")
            good.append(ScoreJob(msg_id, prompt, region.take(_checked_shape(job.get("shape"), header.get("dtype")))))
        except ProtocolError as exc:
            bad.append((msg_id, str(exc)))
    return good, bad


class _Region:
    """A job's pixels: arrays taken one after the other from its offset in the payload or arena."""

    def __init__(self, via: str, payload: bytes, arena: ArenaView | None, base: int, offset: int) -> None:
        self.via, self.payload, self.arena, self.base, self.offset = via, payload, arena, base, offset

    def take(self, shape: tuple[int, int, int, int]) -> np.ndarray:
        size, offset = int(np.prod(shape)), self.offset
        if self.via == "pipe":
            if offset + size > len(self.payload):
                raise ProtocolError(f"job [{offset}, {offset + size}) is outside the {len(self.payload)} B payload")
            frames = np.frombuffer(self.payload, dtype=np.uint8, count=size, offset=offset).reshape(shape)
        else:
            assert self.arena is not None
            try:
                frames = self.arena.array(self.base + offset, shape)
            except ValueError as exc:
                raise ProtocolError(str(exc)) from None
        self.offset += size
        return frames


def _items_list(items: Any) -> list[dict[str, Any]]:
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        raise ProtocolError("`items` must be a non-empty list of objects")
    return items


def _item(desc: dict[str, Any], region: _Region, dtype: Any) -> HeadItem:
    prompt, medium, fps = desc.get("prompt", ""), desc.get("medium"), desc.get("fps")
    metadata, group_id, arrays = desc.get("metadata") or {}, desc.get("group_id"), desc.get("arrays")
    if not isinstance(prompt, str) or medium not in ("image", "video") or not isinstance(metadata, dict):
        raise ProtocolError(f"bad item: prompt {type(prompt).__name__}, medium {medium!r}, "
                            f"metadata {type(metadata).__name__}")
    if fps is not None and not (isinstance(fps, (int, float)) and not isinstance(fps, bool) and fps > 0):
        raise ProtocolError(f"bad item fps {fps!r}")
    if group_id is not None and not isinstance(group_id, str):
        raise ProtocolError(f"bad item group_id {group_id!r}")
    if not isinstance(arrays, list) or not arrays or not all(isinstance(a, dict) for a in arrays):
        raise ProtocolError("an item needs its arrays")
    roles = [a.get("role") for a in arrays]
    if roles[0] != "frames" or "frames" in roles[1:] or not set(roles) <= set(ROLES):
        raise ProtocolError(f"bad item array roles {roles!r}")
    taken = [region.take(_checked_shape(a.get("shape"), dtype)) for a in arrays]
    if medium == "image" and taken[0].shape[0] != 1:
        raise ProtocolError(f"an image item has {taken[0].shape[0]} frames")
    return HeadItem(prompt, medium, taken[0], fps, metadata, group_id,
                    [t for r, t in zip(roles, taken) if r == "condition_image"],
                    [t for r, t in zip(roles, taken) if r == "condition_video"])
