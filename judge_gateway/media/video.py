"""`VideoMedia`: one validated video (a list of frames, a [T,H,W,3] array or an encoded
container), usable as a pydantic field type. Container pixels are decoded lazily with PyAV,
up to the last frame asked for, frame by frame (`VideoMedia.iter_frames`, the decode loop), and
never kept: whoever asked holds what it keeps.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np
from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from .container import (
    _CONTAINER_MIME,
    _av_message,
    _ContainerInfo,
    _probe_container,
    open_container,
    video_stream,
)
from .image import ImageMedia, _check_uint8
from .limits import (
    MediaError,
    _charge,
    _check_fps,
    _check_num_frames,
    _check_size,
    _check_video_pixels,
    current_limits,
)
from .scope import check_stop, working
from .video_schema import _video_json_schema
from .wire import (
    _array_from_json,
    _array_sha256,
    _array_to_json,
    _as_bytes,
    _data_url,
    _decode_string_medium,
    _media_core_schema,
)

DECODE_THREADS = 1  # FFmpeg decoder threads per container decode (see _decode_container)

# What the decode loop applies to each RGB uint8 [H, W, 3] frame as it arrives (iter_frames).
FrameTransform = Callable[[np.ndarray], np.ndarray]


class DecodedFrameTransform(Protocol):
    """A transform that may also take a container's decoded frame itself (a PyAV VideoFrame, its
    size and count already checked) instead of its RGB conversion: `from_decoded` returns what
    `__call__` would return for the RGB frame (within the fidelity its tests hold), or None to get
    the RGB frame after all (media/planes.py converts 4:2:0 planes at the target size)."""

    def __call__(self, rgb: np.ndarray) -> np.ndarray: ...

    def from_decoded(self, frame: Any) -> np.ndarray | None: ...

class VideoMedia:
    """One validated video: decoded frames, a [T,H,W,3] array or a container (mp4/mov,
    webm/mkv, avi).

    Container pixels are decoded lazily with PyAV, only up to the last requested frame, and
    are not kept: each sampling decodes what it needs (iter_frames).
    """

    def __init__(
        self,
        *,
        kind: str,
        fps: float,
        num_frames: int,
        width: int,
        height: int,
        frames: list[ImageMedia] | None = None,
        array: np.ndarray | None = None,
        data: bytes | None = None,
        container: _ContainerInfo | None = None,
    ) -> None:
        # Private: use validate()/from_* so every instance is checked.
        self._kind = kind
        self._fps = fps
        self._num_frames = num_frames
        self._width = width
        self._height = height
        self._frames = frames
        self._array = array
        self._bytes = data
        self._container = container
        self._sha256: str | None = None
        # Frames a decoder already sampled and resized (from_presampled): source index -> row of
        # _array, and who resized them (details.video.resampler).
        self._kept: dict[int, int] | None = None
        self.resampled_by: str | None = None
        self.decoded_by: str | None = None  # what decoded a presampled clip's frames (the device worker says)

    # ---- construction ------------------------------------------------------------------------

    @classmethod
    def from_frames(cls, frames: Iterable[Any], fps: float) -> VideoMedia:
        fps = _check_fps(fps)
        if isinstance(frames, np.ndarray):
            return cls.from_array(frames, fps)
        items: list[ImageMedia] = []
        max_frames = current_limits().max_video_frames
        for i, f in enumerate(frames):
            if len(items) >= max_frames:
                raise MediaError(f"video has more than {max_frames} frames (media.max_video_frames)")
            try:
                items.append(ImageMedia.validate(f))
            except MediaError as e:
                raise MediaError(f"video frame {i}: {e}") from None
        _check_num_frames(len(items), "video 'frames' list")
        w, h = items[0].width, items[0].height
        for i, im in enumerate(items):
            if (im.width, im.height) != (w, h):
                raise MediaError(f"video frame {i} is {im.width}x{im.height} but frame 0 is {w}x{h}: "
                                 "all frames must be the same size")
        _check_video_pixels(len(items), w, h, "video 'frames' list")
        return cls(kind="frames", fps=fps, num_frames=len(items), width=w, height=h, frames=items)

    @classmethod
    def from_array(cls, arr: np.ndarray, fps: float, *, copy: bool = True) -> VideoMedia:
        """A [T, H, W, 3] uint8 clip, snapshotted (callers reuse buffers); `copy=False` takes a
        C-contiguous buffer over for good (a decoder's fresh output: a 720p clip is 224 MB)."""
        fps = _check_fps(fps)
        if not isinstance(arr, np.ndarray):
            raise MediaError(f"video array must be a numpy array, got {type(arr).__name__}")
        _check_uint8(arr, "video")
        if arr.ndim != 4 or arr.shape[3] != 3:
            raise MediaError(f"video array must have shape [T, H, W, 3], got {list(arr.shape)}")
        _check_num_frames(arr.shape[0], "video array")
        _check_size(arr.shape[2], arr.shape[1], "video frame")
        _check_video_pixels(arr.shape[0], arr.shape[2], arr.shape[1], "video array")
        snap = np.array(arr, copy=True, order="C") if copy or not arr.flags.c_contiguous else arr
        snap.flags.writeable = False
        return cls(
            kind="array",
            fps=fps,
            num_frames=arr.shape[0],
            width=arr.shape[2],
            height=arr.shape[1],
            array=snap,
        )

    @classmethod
    def from_presampled(cls, frames: np.ndarray, fps: float, *, source_frames: int, source_width: int,
                        source_height: int, indices: Sequence[int], resampled_by: str) -> VideoMedia:
        """A clip a decoder sampled and resized for a judge (the latent worker, on its device):
        `frames[k]` is source frame `indices[k]`. It reports the source's frame count, size and
        rate, so the judge's sampling finds the same indices and size (encode_video only encodes);
        another frame is a MediaError. The buffer is taken over, not copied."""
        video = cls.from_array(frames, fps, copy=False)
        if len(indices) != frames.shape[0]:
            raise MediaError(f"{frames.shape[0]} presampled frames for {len(indices)} indices")
        if any(not 0 <= int(i) < source_frames for i in indices):
            raise MediaError(f"presampled frame indices outside a {source_frames}-frame source")
        _check_size(source_width, source_height, "video frame")
        video._num_frames, video._width, video._height = source_frames, source_width, source_height
        video._kept = {int(i): k for k, i in enumerate(indices)}
        video.resampled_by = resampled_by
        return video

    @classmethod
    def from_mp4(
        cls, data: bytes | bytearray | memoryview | str, fps: float | None = None
    ) -> VideoMedia:
        """An encoded video: mp4/mov, matroska/webm or avi (container.ACCEPTED_CONTAINERS;
        anything else is refused before FFmpeg sees it). `fps`, when given, overrides the
        container's rate."""
        if isinstance(data, str):
            raw, info = _decode_string_medium(data, "video", _probe_container)
        else:
            raw = _as_bytes(data)
            info = _probe_container(raw)
        _check_num_frames(info.num_frames, "video")
        _check_size(info.width, info.height, "video frame")
        _check_video_pixels(info.num_frames, info.width, info.height, "video")
        _charge(info.num_frames * info.width * info.height,
                f"video of {info.num_frames} frames at {info.width}x{info.height}")
        if fps is None:
            if info.fps <= 0:
                raise MediaError("video container has no frame rate; give 'fps'")
            rate = _check_fps(info.fps, "container frame rate")
        else:
            rate = _check_fps(fps)
        return cls(
            kind="container",
            fps=rate,
            num_frames=info.num_frames,
            width=info.width,
            height=info.height,
            data=raw,
            container=info,
        )

    @classmethod
    def validate(cls, value: Any) -> VideoMedia:
        """Accept every supported input form; raise `MediaError` (a ValueError) otherwise."""
        if isinstance(value, VideoMedia):
            return value
        if isinstance(value, (bytes, bytearray, memoryview, str)):
            return cls.from_mp4(value)
        if isinstance(value, np.ndarray):
            raise MediaError("a bare video array has no frame rate: pass {'array': arr, 'fps': ...} or use "
                             "VideoMedia.from_array(arr, fps)")
        if not isinstance(value, dict):
            raise MediaError(f"unsupported video input of type {type(value).__name__}: expected an object "
                             "with one of 'frames', 'mp4', 'array' and 'fps'")
        allowed = {"frames", "mp4", "array", "fps"}
        extra = set(value) - allowed
        if extra:
            raise MediaError(f"video object has unknown keys {sorted(extra)}; allowed: {sorted(allowed)}")
        sources = [k for k in ("frames", "mp4", "array") if k in value]
        if len(sources) != 1:
            raise MediaError("video object needs exactly one of 'frames', 'mp4', 'array'"
                             + (f", got {sources}" if sources else ""))
        src = sources[0]
        fps = value.get("fps")
        if src == "mp4":
            mp4 = value["mp4"]
            if not isinstance(mp4, (bytes, bytearray, memoryview, str)):
                raise MediaError(f"video 'mp4' must be base64 or bytes, got {type(mp4).__name__}")
            return cls.from_mp4(mp4, fps)
        if fps is None:
            raise MediaError(f"video given as '{src}' needs 'fps'")
        if src == "frames":
            frames = value["frames"]
            if not isinstance(frames, (list, tuple, np.ndarray)):
                raise MediaError(f"video 'frames' must be a list, got {type(frames).__name__}")
            return cls.from_frames(frames, fps)
        arr = value["array"]
        if isinstance(arr, dict):
            arr = _array_from_json(arr, "video")
        return cls.from_array(arr, fps)

    # ---- pydantic ----------------------------------------------------------------------------

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return _media_core_schema(cls)

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return _video_json_schema()

    # ---- facts -------------------------------------------------------------------------------

    @property
    def num_frames(self) -> int:
        return self._num_frames

    @property
    def fps(self) -> float:
        return self._fps

    @property
    def width(self) -> int:
        return self._width

    @property
    def height(self) -> int:
        return self._height

    @property
    def duration_s(self) -> float:
        return self._num_frames / self._fps

    @property
    def format(self) -> str:
        """'frames' | 'array' | the container name ('mp4', 'webm', 'matroska', 'mov', ...)."""
        return self._container.format if self._container else self._kind

    @property
    def codec(self) -> str | None:
        """The container's video codec (e.g. 'h264'), None for frames/array input."""
        return self._container.codec if self._container else None

    @property
    def sha256(self) -> str:
        """Hash of content and frame rate (the rate changes what an encoding looks like)."""
        if self._sha256 is None:
            h = hashlib.sha256(f"video:{self._kind}:{self._fps!r}:".encode())
            if self._bytes is not None:
                h.update(self._bytes)
            elif self._array is not None:
                h.update(_array_sha256("video", self._array).encode())
            else:
                assert self._frames is not None
                for f in self._frames:
                    h.update(f.sha256.encode())
            self._sha256 = h.hexdigest()
        return self._sha256

    def source_bytes(self) -> bytes | None:
        """The container bytes when the input was an encoded video, else None."""
        return self._bytes

    # ---- pixels ------------------------------------------------------------------------------

    def iter_frames(
        self, indices: Sequence[int], transform: FrameTransform | None = None
    ) -> Iterator[tuple[int, np.ndarray]]:
        """The decode loop: each distinct source frame of `indices` once, in source order, as
        (index, frame), the frame an RGB uint8 [H, W, 3] array or what `transform` makes of it.

        Frames are handed out as they are decoded and nothing is kept here: memory holds the
        frame being decoded plus what the caller keeps of those handed out. `transform` runs on
        each frame as it arrives (resize it to the size a judge sees, say), so the full-size frame
        is dropped at once. A container is decoded up to the last index only, and every frame
        decoded is checked as it comes (media.limits' budgets hold for what is decoded, not only
        for what the header declared): a frame whose size differs from the validated one (a
        stream that switches size mid-way), or one frame more than the container listed, stops
        the decode with a MediaError; the decoder refuses frames over media.max_image_pixels
        before allocating them. Between frames it stops when its request has ended
        (`MediaCancelled`, media/scope.py).
        """
        idx = self._checked(sorted({int(i) for i in indices}))
        if not idx:
            return
        with working():
            yield from self._source_frames(idx, transform)

    def _checked(self, idx: list[int]) -> list[int]:
        for i in idx:
            if not 0 <= i < self._num_frames:
                raise MediaError(f"frame index {i} out of range for a {self._num_frames}-frame video")
        return idx

    def _source_frames(self, idx: list[int], transform: FrameTransform | None) -> Iterator[tuple[int, np.ndarray]]:
        if self._bytes is not None:
            yield from self._decode_container(idx, transform)
            return
        for i in idx:
            check_stop()
            if self._array is not None:
                frame = self._array[self._rows([i])[0]]
            else:
                assert self._frames is not None
                frame = self._frames[i].to_array()
            yield i, frame if transform is None else transform(frame)

    def frames_array(
        self, indices: Sequence[int] | None = None, transform: FrameTransform | None = None
    ) -> np.ndarray:
        """uint8 [n, ...] for the given source frame indices, in that order (repeats allowed; all
        frames when None): RGB [n, H, W, 3], or `transform`'s output per frame (iter_frames)."""
        idx = list(range(self._num_frames)) if indices is None else [int(i) for i in indices]
        if not idx:
            return np.zeros((0, self._height, self._width, 3), dtype=np.uint8)
        if transform is None and self._array is not None:
            return self._array[self._rows(self._checked(idx))]
        slots: dict[int, list[int]] = {}
        for pos, i in enumerate(idx):
            slots.setdefault(i, []).append(pos)
        out: np.ndarray | None = None
        for i, frame in self.iter_frames(idx, transform):
            if out is None:
                out = np.empty((len(idx), *frame.shape), dtype=frame.dtype)
            elif frame.shape != out.shape[1:]:
                raise MediaError(f"frame {i} is {frame.shape} but the first sampled frame is {out.shape[1:]}")
            for pos in slots[i]:
                out[pos] = frame
        assert out is not None
        return out

    def _rows(self, indices: Sequence[int]) -> list[int]:
        """Rows of _array holding these source frames (the same numbers unless presampled)."""
        if self._kept is None:
            return list(indices)
        missing = [i for i in indices if i not in self._kept]
        if missing:
            raise MediaError(f"frames {missing[:5]} were not kept: this clip was sampled and resized by "
                             f"{self.resampled_by} for another sampling (frames {sorted(self._kept)[:5]}...)")
        return [self._kept[i] for i in indices]

    @property
    def presampled_size(self) -> tuple[int, int] | None:
        """(width, height) of a presampled clip's kept frames, else None."""
        return None if self._kept is None or self._array is None else (self._array.shape[2], self._array.shape[1])

    def first_frame(self) -> ImageMedia:
        """Frame 0 as an image: the frame's own bytes for a frame list, else decoded pixels."""
        if self._frames is not None:
            return self._frames[0]
        return ImageMedia.from_array(self.frames_array([0])[0])

    def _decode_container(self, idx: list[int], transform: FrameTransform | None) -> Iterator[tuple[int, np.ndarray]]:
        assert self._bytes is not None
        wanted, last = set(idx), idx[-1]
        size = (self._width, self._height)
        from_decoded = getattr(transform, "from_decoded", None)
        n = -1
        converting = False  # an error while a kept frame is converted is not the stream's fault
        try:
            with open_container(self._bytes, self._container.format if self._container else None) as container:
                stream = video_stream(container)
                # One decoder thread: the media pool runs one job per core, and FFmpeg's frame threads
                # on top of it cost ~20% more CPU for the same frames (bench/RESULTS.md).
                stream.thread_count = DECODE_THREADS
                frames = container.decode(stream)
                while True:
                    check_stop()
                    try:
                        frame = next(frames)
                    except StopIteration:
                        break
                    n += 1
                    if (frame.width, frame.height) != size:
                        raise MediaError(
                            f"video frame {n} is {frame.width}x{frame.height} but the video was validated as "
                            f"{size[0]}x{size[1]}: a video that changes size mid-stream is refused"
                        )
                    if n >= self._num_frames:
                        raise MediaError(f"video decodes to more frames than the {self._num_frames} it listed")
                    if n in wanted:
                        converting = True
                        out = from_decoded(frame) if from_decoded is not None else None
                        if out is None:
                            out = frame.to_ndarray(format="rgb24")  # libswscale, with the frame's matrix
                            if transform is not None:
                                out = transform(out)
                        converting = False
                        del frame
                        yield n, out
                    if n >= last:
                        break
        except MediaError:
            raise
        except Exception as e:  # av.error.FFmpegError: corrupt data, or a frame over max_pixels
            if converting:
                raise MediaError(f"cannot convert video frame {n} to the judge's size: {type(e).__name__}: {e}") from e
            raise MediaError(
                f"cannot decode video frame {n + 1} ({_av_message(e)}): corrupt data, or a frame larger "
                "than media.max_image_pixels"
            ) from None
        if n < last:
            raise MediaError(f"video decoded to {n + 1} frames but its header says {self._num_frames}; "
                             f"frame {last} is missing")

    def to_json(self) -> dict[str, Any]:
        if self._bytes is not None:
            mime = _CONTAINER_MIME.get(self.format, "application/octet-stream")
            return {"mp4": _data_url(mime, self._bytes), "fps": self._fps}
        if self._array is not None:
            return {"array": _array_to_json(self._array), "fps": self._fps}
        assert self._frames is not None
        return {"frames": [f.to_json() for f in self._frames], "fps": self._fps}

    def __repr__(self) -> str:
        return (
            f"VideoMedia({self.format} {self._num_frames}x{self._width}x{self._height} "
            f"@ {self._fps:g} fps)"
        )
