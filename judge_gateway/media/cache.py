"""`MediaCache`: one per gateway request, so each (medium, spec) is encoded once and shared by
every judge that asks for it, including concurrent ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from .encode import (
    EncodedImage,
    EncodedVideo,
    ImageEncoding,
    encode_image,
    encode_video,
)
from .image import ImageMedia
from .limits import MediaError
from .scope import working
from .sampling import VideoSampling
from .video import VideoMedia

T = TypeVar("T")


class MediaCache:
    """Per-request memo: each (medium, spec) is encoded once, shared by every judge.

    Keys are (sha256 of the medium, spec), so the same image sent twice in a request (an edit
    source shared by a GRPO group, say) is encoded once too. Concurrent callers of one key
    await the same task; the encode runs in a worker thread; a failure reaches every waiter as
    a `MediaError`. `hits` / `encodes` count reuse for tests and metrics.
    """

    def __init__(self) -> None:
        self._tasks: dict[tuple[Any, ...], asyncio.Task[Any]] = {}
        self._sha: dict[int, tuple[Any, str]] = {}  # id(medium) -> (medium kept alive, sha256)
        self.hits = 0
        self.encodes = 0
        # Per kind of encode ("image", "video", "first_frame"): the gateway's metrics read these.
        self.encodes_by_kind: dict[str, int] = {}
        self.hits_by_kind: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    async def image(self, img: ImageMedia, enc: ImageEncoding) -> EncodedImage:
        sha = await self._sha256(img)
        return await self._get(("image", sha, enc), lambda: encode_image(img, enc), repr(img))

    async def video(self, vid: VideoMedia, sampling: VideoSampling) -> EncodedVideo:
        sha = await self._sha256(vid)
        return await self._get(
            ("video", sha, sampling), lambda: encode_video(vid, sampling), repr(vid)
        )

    async def first_frame(self, vid: VideoMedia, enc: ImageEncoding) -> EncodedImage:
        """A video's first frame encoded as an image (a judge's image-slot fallback)."""
        sha = await self._sha256(vid)
        return await self._get(
            ("first_frame", sha, enc), lambda: encode_image(vid.first_frame(), enc), repr(vid)
        )

    async def _sha256(self, medium: ImageMedia | VideoMedia) -> str:
        hit = self._sha.get(id(medium))
        if hit is not None and hit[0] is medium:
            return hit[1]
        if medium._sha256 is not None:
            sha = medium._sha256
        else:
            # Hashing a large video takes tens of ms: not on the event loop.
            sha = await asyncio.to_thread(lambda: medium.sha256)
        self._sha[id(medium)] = (medium, sha)
        return sha

    async def _get(self, key: tuple[Any, ...], fn: Callable[[], T], what: str) -> T:
        task = self._tasks.get(key)
        kind = key[0]
        if task is None or task.cancelled():  # a cancelled encode (loop shutdown) is no answer
            self.encodes += 1
            self.encodes_by_kind[kind] = self.encodes_by_kind.get(kind, 0) + 1
            task = asyncio.get_running_loop().create_task(self._run(fn, what))
            # Retrieve the exception even if every waiter was cancelled (no asyncio warning).
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            self._tasks[key] = task
        else:
            self.hits += 1
            self.hits_by_kind[kind] = self.hits_by_kind.get(kind, 0) + 1
        # shield: one judge timing out must not cancel the encode the other judges wait for.
        return await asyncio.shield(task)

    @staticmethod
    async def _run(fn: Callable[[], T], what: str) -> T:
        def counted() -> T:
            with working():  # the request waits for this thread before its media budget is freed
                return fn()

        try:
            return await asyncio.to_thread(counted)
        except MediaError:
            raise
        except Exception as e:
            raise MediaError(f"encoding {what} failed: {type(e).__name__}: {e}") from e
