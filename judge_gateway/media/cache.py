"""`MediaCache`: one per gateway request, so each (medium, spec) is encoded once and shared by
every judge that asks for it, including concurrent ones.

Media are told apart by content: a cheap fingerprint (form, size, frame rate and 64 KiB sampled
across the content) sorts them into buckets, and within a bucket that holds more than one medium
each is told apart by a sha256 of all its bytes, computed once per medium (on the media pool when
it is over 64 KiB, so the event loop never hashes a large medium). A medium alone in its bucket
is never hashed: distinct media, the common case, cost the fingerprint only (sha256 costs ~0.8 ms
per MB here; a 720p clip is 224 MB). The work is linear in the request's bytes whatever the
media: a set crafted to share one fingerprint costs one hash each, where confirming each match
byte by byte against every earlier candidate on the event loop was quadratic (2,048 colliding
images held every other request of the gateway for 42 s).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
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
# Media larger than this are hashed on the pool, not on the event loop (~0.05 ms of sha256).
_DIGEST_INLINE_BYTES = 64 << 10
# An image this small is encoded on the event loop: its encode takes tens of microseconds, less
# than handing it to a pool thread and back (the hand-off cost ~0.1 ms of CPU a call here) ...
INLINE_IMAGE_BYTES = 64 << 10
# ... while the work done inline in one turn of the event loop stays under this; beyond it, the
# rest of that turn's work goes to the pool. A request's cells all start in one turn: 4,096 small
# images encoded inline held every other request (and /healthz) for ~5 s.
INLINE_BUDGET_S = 0.002


class _InlineBudget:
    """Time spent on inline media work in the event loop's current turn (reset by a callback the
    first inline work of a turn schedules, which runs at the start of the next one)."""

    def __init__(self) -> None:
        self.spent = 0.0
        self._reset_pending = False

    def allows(self) -> bool:
        if not self._reset_pending:
            self._reset_pending = True
            asyncio.get_running_loop().call_soon(self._reset)
        return self.spent < INLINE_BUDGET_S

    def charge(self, seconds: float) -> None:
        self.spent += seconds

    def _reset(self) -> None:
        self.spent = 0.0
        self._reset_pending = False


_inline = _InlineBudget()  # media work runs on one event loop per process (the server's)


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
    """A cheap bucket key: equal content gives an equal fingerprint; media that share one are told
    apart by `content_digest`."""
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


def content_digest(medium: Medium) -> bytes:
    """sha256 of every byte of the medium's content (with the shape of an array, and a video's
    frames in order). Two media with the same fingerprint and the same digest are the same
    medium in the same form; hashlib releases the GIL, so pool threads hash in parallel."""
    h = hashlib.sha256()
    if isinstance(medium, ImageMedia):
        src = medium.source_bytes()
        if src is not None:
            h.update(src)
        else:
            arr = medium.to_array()
            h.update(repr(arr.shape).encode())
            h.update(_bytes_view(arr))
        return h.digest()
    if medium._bytes is not None:
        h.update(medium._bytes)
    elif medium._array is not None:
        h.update(repr(medium._array.shape).encode())
        h.update(_bytes_view(medium._array))
    else:
        assert medium._frames is not None
        for frame in medium._frames:
            h.update(content_digest(frame))
    return h.digest()


def _nbytes(medium: Medium) -> int:
    if isinstance(medium, ImageMedia):
        src = medium.source_bytes()
        return len(src) if src is not None else medium.width * medium.height * 3
    return medium.num_frames * medium.width * medium.height * 3


def _content_bytes(medium: Medium) -> int:
    """The bytes `content_digest` reads."""
    if isinstance(medium, ImageMedia):
        return _nbytes(medium)
    if medium._bytes is not None:
        return len(medium._bytes)
    return _nbytes(medium)


T = TypeVar("T")


class _Bucket:
    """The media of one request that share a fingerprint: the first alone (`first`, not hashed)
    until a second one arrives; then every one by its digest."""

    __slots__ = ("first", "by_digest")

    def __init__(self, first: tuple[Medium, int]) -> None:
        self.first: tuple[Medium, int] | None = first
        self.by_digest: dict[bytes, int] = {}


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
        self._buckets: dict[tuple[Any, ...], _Bucket] = {}
        self._contents = 0
        self._identify: asyncio.Lock | None = None  # one new medium identified at a time
        self.digested_bytes = 0  # bytes hashed so far: at most each medium's once (tests read it)
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

    async def content_id(self, medium: Medium) -> int:
        """A number equal for media of equal content within this request (a group's shared source
        image, say), found as the encodes find theirs."""
        return await self._content_id(medium)

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
        bucket = self._buckets.get(fp)
        if bucket is None:  # alone in its bucket: a new content, hashed only if another one joins
            content_id = self._new_content_id()
            self._buckets[fp] = _Bucket(first=(medium, content_id))
        else:
            if bucket.first is not None:  # a second medium in the bucket: the first gets its digest now
                first, first_id = bucket.first
                bucket.first = None
                bucket.by_digest[await self._digest(first)] = first_id
            digest = await self._digest(medium)
            content_id = bucket.by_digest.get(digest)
            if content_id is None:
                content_id = bucket.by_digest[digest] = self._new_content_id()
        self._ids[id(medium)] = (medium, content_id, fp)
        return content_id

    def _new_content_id(self) -> int:
        self._contents += 1
        return self._contents - 1

    async def _digest(self, medium: Medium) -> bytes:
        size = _content_bytes(medium)
        self.digested_bytes += size
        if size <= _DIGEST_INLINE_BYTES and _inline.allows():
            started = time.perf_counter()
            try:
                return content_digest(medium)
            finally:
                _inline.charge(time.perf_counter() - started)
        return await self.pool.run(lambda: content_digest(medium))

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
            if inline and _inline.allows():
                started = time.perf_counter()
                try:
                    return counted()
                finally:
                    _inline.charge(time.perf_counter() - started)
            return await self.pool.run(counted)
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
