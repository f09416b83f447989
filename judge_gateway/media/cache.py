"""`MediaCache`: one per gateway request, so each (medium, spec) is encoded once and shared by
every judge that asks for it, including concurrent ones.

Media are told apart by content, cheaply: a fingerprint (form, size, frame rate and 64 KiB
sampled across the content) finds the candidates, and a byte comparison confirms a match, so the
same image sent twice in a request is encoded once without hashing every byte of every medium
(sha256 costs ~0.8 ms per MB here; a 720p clip is 224 MB).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import zlib
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import numpy as np

from .encode import (
    EncodedImage,
    EncodedVideo,
    ImageEncoding,
    encode_image,
    encode_video,
)
from .image import ImageMedia
from .limits import MediaError
from .pool import MediaPool, default_pool
from .sampling import VideoSampling, _frame_size, sample_frame_indices
from .scope import MediaCancelled, working
from .video import VideoMedia

Medium = ImageMedia | VideoMedia
log = logging.getLogger(__name__)
_FALLBACK_LOG_EVERY_S = 10.0
_fallback_logged = 0.0


class DevicePresampler(Protocol):
    """Decodes an encoded video's frames `indices` at `size` (width, height) off the gateway's CPU
    (device_video.DeviceVideoDecoder: a torch worker on the GPU), as a presampled clip."""

    async def presample(self, video: VideoMedia, indices: list[int], size: tuple[int, int]) -> VideoMedia: ...

_SAMPLE_CHUNKS = 16
_CHUNK = 4096
# Arrays larger than this are compared on the pool, not on the event loop.
_COMPARE_INLINE_BYTES = 1 << 20
# An image this small is encoded on the event loop: its encode takes tens of microseconds, less
# than handing it to a pool thread and back (the hand-off cost ~0.1 ms of CPU a call here).
INLINE_IMAGE_BYTES = 64 << 10


def _sampled_crc(buf: memoryview) -> int:
    """crc32 of up to 64 KiB of `buf`: all of it when small, else 16 chunks spread evenly."""
    n = len(buf)
    if n <= _SAMPLE_CHUNKS * _CHUNK:
        return zlib.crc32(buf)
    crc = 0
    step = (n - _CHUNK) // (_SAMPLE_CHUNKS - 1)
    for i in range(_SAMPLE_CHUNKS):
        start = i * step
        crc = zlib.crc32(buf[start: start + _CHUNK], crc)
    return crc


def _bytes_view(arr: np.ndarray) -> memoryview:
    return memoryview(np.ascontiguousarray(arr)).cast("B")


def fingerprint(medium: Medium) -> tuple[Any, ...]:
    """A cheap content key: equal content gives an equal fingerprint; a match is confirmed with
    `same_content`."""
    if isinstance(medium, ImageMedia):
        src = medium.source_bytes()
        if src is not None:
            return ("image", "bytes", len(src), _sampled_crc(memoryview(src)))
        arr = medium.to_array()
        return ("image", "array", arr.shape, _sampled_crc(_bytes_view(arr)))
    parts: tuple[Any, ...] = ("video", medium._kind, repr(medium.fps), medium.num_frames,
                              medium.width, medium.height)
    if medium._bytes is not None:
        return (*parts, len(medium._bytes), _sampled_crc(memoryview(medium._bytes)))
    if medium._array is not None:
        return (*parts, _sampled_crc(_bytes_view(medium._array)))
    assert medium._frames is not None
    return (*parts, tuple(fingerprint(f) for f in medium._frames))


def _arrays_equal(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        return False
    fa, fb = _bytes_view(a), _bytes_view(b)
    step = 1 << 20
    return all(np.array_equal(np.frombuffer(fa[i: i + step], np.uint8), np.frombuffer(fb[i: i + step], np.uint8))
               for i in range(0, len(fa), step))


def same_content(a: Medium, b: Medium) -> bool:
    """The same medium in the same form (bytes, array or frame list, and for videos the rate)."""
    if a is b:
        return True
    if isinstance(a, ImageMedia) and isinstance(b, ImageMedia):
        if a.source_bytes() is not None or b.source_bytes() is not None:
            return a.source_bytes() == b.source_bytes()
        return _arrays_equal(a.to_array(), b.to_array())
    if isinstance(a, VideoMedia) and isinstance(b, VideoMedia):
        if (a._kind, a.fps, a.num_frames) != (b._kind, b.fps, b.num_frames):
            return False
        if a._bytes is not None or b._bytes is not None:
            return a._bytes == b._bytes
        if a._array is not None and b._array is not None:
            return _arrays_equal(a._array, b._array)
        if a._frames is not None and b._frames is not None:
            return all(same_content(x, y) for x, y in zip(a._frames, b._frames))
    return False


def _nbytes(medium: Medium) -> int:
    if isinstance(medium, ImageMedia):
        src = medium.source_bytes()
        return len(src) if src is not None else medium.width * medium.height * 3
    return medium.num_frames * medium.width * medium.height * 3

T = TypeVar("T")


class MediaCache:
    """Per-request memo: each (medium, spec) is encoded once, shared by every judge.

    Keys are (the medium's content, spec), so the same image sent twice in a request (an edit
    source shared by a GRPO group, say) is encoded once too. Concurrent callers of one key
    await the same task; the encode runs on the media pool (media/pool.py); a failure reaches
    every waiter as a `MediaError`. `hits` / `encodes` count reuse for tests and metrics.
    """

    def __init__(self, pool: MediaPool | None = None, device: DevicePresampler | None = None) -> None:
        self.pool = pool or default_pool()
        self.device = device  # [media.device]: encoded videos a judge resizes are decoded there
        self._tasks: dict[tuple[Any, ...], asyncio.Task[Any]] = {}
        # id(medium) -> (medium kept alive, its content id in this request, its fingerprint)
        self._ids: dict[int, tuple[Medium, int, tuple[Any, ...]]] = {}
        self._by_fingerprint: dict[tuple[Any, ...], list[tuple[Medium, int]]] = {}
        self._contents = 0
        self._identify: asyncio.Lock | None = None  # one new medium identified at a time
        self.hits = 0
        self.encodes = 0
        # Per kind of encode ("image", "video", "first_frame"): the gateway's metrics read these.
        self.encodes_by_kind: dict[str, int] = {}
        self.hits_by_kind: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    async def image(self, img: ImageMedia, enc: ImageEncoding) -> EncodedImage:
        key = await self._content_id(img)
        return await self._get(("image", key, enc), lambda: encode_image(img, enc), repr(img),
                               inline=_nbytes(img) <= INLINE_IMAGE_BYTES)

    async def video(self, vid: VideoMedia, sampling: VideoSampling) -> EncodedVideo:
        key = await self._content_id(vid)
        if self.device is not None and vid.source_bytes() is not None:
            return await self._get(("video", key, sampling), lambda: encode_video(vid, sampling), repr(vid),
                                   run=lambda: self._on_device(vid, sampling))
        return await self._get(
            ("video", key, sampling), lambda: encode_video(vid, sampling), repr(vid)
        )

    async def _on_device(self, vid: VideoMedia, sampling: VideoSampling) -> EncodedVideo:
        """An encoded video the judge resizes: its frames decoded and resized by the device worker,
        then encoded here; whatever the worker cannot do is done here (`fallback` says why)."""
        idx, _ = sample_frame_indices(vid.num_frames, vid.fps, sampling)
        w, h, resized = _frame_size(vid.width, vid.height, len(idx), sampling)
        local = self._run(lambda: encode_video(vid, sampling), repr(vid), False)
        if not resized:  # kept at its size (or passed through): nothing for the device to save
            return await local
        assert self.device is not None
        try:
            clip = await self.device.presample(vid, idx, (w, h))
        except (asyncio.CancelledError, MediaCancelled):
            local.close()
            raise
        except Exception as err:  # the worker failed, crashed or timed out: the gateway's own path
            _log_fallback(err)
            return dataclasses.replace(await local, fallback=f"{type(err).__name__}: {err}")
        local.close()
        enc = await self._run(lambda: encode_video(clip, sampling), repr(vid), False)
        return dataclasses.replace(enc, decoded_by=clip.decoded_by)

    async def first_frame(self, vid: VideoMedia, enc: ImageEncoding) -> EncodedImage:
        """A video's first frame encoded as an image (a judge's image-slot fallback)."""
        key = await self._content_id(vid)
        return await self._get(
            ("first_frame", key, enc), lambda: encode_image(vid.first_frame(), enc), repr(vid)
        )

    def affinity(self, medium: Medium) -> int | None:
        """A number equal for equal content (its fingerprint's hash), for routing every judge of a
        medium to one replica; None for a medium this cache has not seen."""
        known = self._ids.get(id(medium))
        return hash(known[2]) if known is not None and known[0] is medium else None

    async def _content_id(self, medium: Medium) -> int:
        known = self._ids.get(id(medium))
        if known is not None and known[0] is medium:
            return known[1]
        if self._identify is None:
            self._identify = asyncio.Lock()
        async with self._identify:  # a comparison may wait on the pool: one caller decides
            known = self._ids.get(id(medium))
            if known is not None and known[0] is medium:
                return known[1]
            return await self._identify_new(medium)

    async def _identify_new(self, medium: Medium) -> int:
        fp = fingerprint(medium)
        content_id = None
        for other, other_id in self._by_fingerprint.get(fp, []):
            if _nbytes(medium) <= _COMPARE_INLINE_BYTES:
                same = same_content(medium, other)
            else:
                same = await self.pool.run(lambda other=other: same_content(medium, other))
            if same:
                content_id = other_id
                break
        if content_id is None:
            content_id = self._contents
            self._contents += 1
            self._by_fingerprint.setdefault(fp, []).append((medium, content_id))
        self._ids[id(medium)] = (medium, content_id, fp)
        return content_id

    async def _get(self, key: tuple[Any, ...], fn: Callable[[], T], what: str, inline: bool = False,
                   run: Callable[[], Any] | None = None) -> T:
        """The task of `key`, started at its first caller: `fn` on the pool (inline: here), or the
        coroutine `run` makes."""
        task = self._tasks.get(key)
        kind = key[0]
        if task is None or task.cancelled():  # a cancelled encode (loop shutdown) is no answer
            self.encodes += 1
            self.encodes_by_kind[kind] = self.encodes_by_kind.get(kind, 0) + 1
            task = asyncio.get_running_loop().create_task(run() if run is not None else self._run(fn, what, inline))
            # Retrieve the exception even if every waiter was cancelled (no asyncio warning).
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            self._tasks[key] = task
        else:
            self.hits += 1
            self.hits_by_kind[kind] = self.hits_by_kind.get(kind, 0) + 1
        # shield: one judge timing out must not cancel the encode the other judges wait for.
        return await asyncio.shield(task)

    async def _run(self, fn: Callable[[], T], what: str, inline: bool) -> T:
        def counted() -> T:
            with working():  # the request waits for this thread before its media budget is freed
                return fn()

        try:
            return counted() if inline else await self.pool.run(counted)
        except MediaError:
            raise
        except Exception as e:
            raise MediaError(f"encoding {what} failed: {type(e).__name__}: {e}") from e


def _log_fallback(err: Exception) -> None:
    """The device worker's failure, for the operator (at most every 10 s: an outage fails every video)."""
    global _fallback_logged
    now = time.monotonic()
    if now - _fallback_logged >= _FALLBACK_LOG_EVERY_S:
        _fallback_logged = now
        log.warning("device video path failed, videos are decoded on the gateway: %s: %s", type(err).__name__, err)
