"""What a browser can play, playable previews of what it cannot, and posters.

Chromium (and so the browser tests, and most users) plays H.264 (8-bit 4:2:0), VP8, VP9 and AV1
in an MP4 or WebM file. Generators also write MPEG-4 Part 2, HEVC, ProRes, FFV1, MJPEG, GIF, or
H.264 in an AVI / MKV / MOV: a `<video>` of those spins forever. Such a clip gets a preview,
transcoded on demand with PyAV to H.264 in MP4 (VP9 in WebM where this PyAV has no libx264):
at most PREVIEW_MAX_FRAMES frames, at most PREVIEW_MAX_SIDE pixels a side, made once per file
(a lock per file, at most PREVIEW_WORKERS at a time) and kept in a folder private to this
process. Every clip gets a poster (its first frame as a JPEG), so a grid of videos shows their
pictures without loading a single clip.
"""

from __future__ import annotations

import atexit
import hashlib
import io
import shutil
import tempfile
import threading
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import av

from ..exceptions import InvalidInput

PLAYABLE_CODECS = frozenset({"h264", "vp8", "vp9", "av1"})
PLAYABLE_SUFFIXES = frozenset({".mp4", ".m4v", ".webm"})
# H.264 that browsers decode: 8-bit 4:2:0 (High 10 / 4:2:2 / 4:4:4 profiles are not).
PLAYABLE_H264_PIXELS = frozenset({"yuv420p", "yuvj420p", "nv12"})
PREVIEW_MAX_FRAMES = 600
PREVIEW_MAX_SIDE = 640
PREVIEW_WORKERS = 2
POSTER_MAX_SIDE = 480
# Bumped when previews are made differently, so a cache never serves an old kind.
PREVIEW_VERSION = 1


@dataclass(frozen=True)
class Clip:
    """A video file as the browser sees it."""

    codec: str
    container: str
    pix_fmt: str | None
    playable: bool
    error: str | None = None  # the file could not be opened as a video


def _file_key(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return str(path.resolve()), st.st_size, st.st_mtime_ns


@lru_cache(maxsize=4096)
def _probe(key: tuple[str, int, int]) -> Clip:
    path = key[0]
    try:
        with av.open(path) as container:
            if not container.streams.video:
                return Clip("", container.format.name, None, False, "no video stream")
            ctx = container.streams.video[0].codec_context
            codec, pix = ctx.name, ctx.pix_fmt
            fmt = container.format.name
    except (av.FFmpegError, OSError, ValueError) as exc:
        return Clip("", "", None, False, f"cannot open it as a video: {exc}")
    playable = (codec in PLAYABLE_CODECS and Path(path).suffix.lower() in PLAYABLE_SUFFIXES
                and (codec != "h264" or pix in PLAYABLE_H264_PIXELS))
    return Clip(codec, fmt, pix, playable)


def probe(path: Path) -> Clip:
    """The clip's codec and whether a browser plays the file as it is (cached per file version)."""
    try:
        key = _file_key(path)
    except OSError as exc:
        return Clip("", "", None, False, f"cannot read it: {exc}")
    return _probe(key)


def _preview_codec() -> tuple[str, str, str]:
    """(encoder, container format, suffix) this PyAV can write."""
    for encoder, fmt, suffix in (("libx264", "mp4", ".mp4"), ("libvpx-vp9", "webm", ".webm"),
                                 ("libvpx", "webm", ".webm")):
        try:
            av.codec.Codec(encoder, "w")
        except (av.FFmpegError, ValueError):
            continue
        return encoder, fmt, suffix
    raise PreviewError("this PyAV build has no H.264 or VP8/VP9 encoder for previews")


class PreviewError(InvalidInput):
    """No preview could be made of a clip; the message says why."""


def _size(width: int, height: int, max_side: int) -> tuple[int, int]:
    scale = min(1.0, max_side / max(width, height))
    # Even sides: 4:2:0 chroma needs them.
    return max(2, int(width * scale) // 2 * 2), max(2, int(height * scale) // 2 * 2)


def _transcode(src: Path, dst: Path) -> int:
    """Write a playable preview of `src` to `dst`; returns the frames written."""
    encoder, fmt, _ = _preview_codec()
    written = 0
    with av.open(str(src)) as inp, av.open(str(dst), "w", format=fmt,
                                           options={"movflags": "+faststart"} if fmt == "mp4" else {}) as out:
        vin = inp.streams.video[0]
        vin.thread_type = "AUTO"
        rate = vin.average_rate or vin.guessed_rate or Fraction(25)
        if not 1 <= rate <= 240:
            rate = Fraction(25)
        # Frames are stamped 0, 1, 2, ... in 1/rate (the stream's own time base changes once the
        # muxer writes its header, so it is not used for them).
        tick = Fraction(rate.denominator, rate.numerator)
        stream = out.add_stream(encoder, rate=rate)
        stream.pix_fmt = "yuv420p"
        stream.time_base = tick
        if encoder == "libx264":
            stream.options = {"preset": "veryfast", "crf": "23"}
        else:
            stream.options = {"deadline": "realtime", "cpu-used": "8", "crf": "32", "b": "0"}
        for frame in inp.decode(vin):
            if written == 0:
                stream.width, stream.height = _size(frame.width, frame.height, PREVIEW_MAX_SIDE)
            if written >= PREVIEW_MAX_FRAMES:
                break
            image = frame.reformat(width=stream.width, height=stream.height, format="yuv420p")
            image.pts, image.time_base = written, tick
            for packet in stream.encode(image):
                out.mux(packet)
            written += 1
        for packet in stream.encode():
            out.mux(packet)
    return written


class Previews:
    """Previews and posters of one browser process, made on demand and kept until it exits."""

    def __init__(self) -> None:
        self._dir: Path | None = None
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._workers = threading.BoundedSemaphore(PREVIEW_WORKERS)

    def _folder(self) -> Path:
        with self._guard:
            if self._dir is None:
                self._dir = Path(tempfile.mkdtemp(prefix="judge-gateway-previews-"))
                atexit.register(shutil.rmtree, self._dir, True)
            return self._dir

    def preview(self, src: Path) -> Path:
        """A playable file of `src`'s picture: made the first time, then served from the cache."""
        clip = probe(src)
        if clip.error:
            raise PreviewError(f"{src.name}: {clip.error}")
        name = hashlib.sha256(repr((_file_key(src), PREVIEW_VERSION)).encode()).hexdigest()[:32]
        dst = self._folder() / (name + _preview_codec()[2])
        with self._guard:
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:
            if dst.exists():
                return dst
            tmp = dst.with_name(f".{dst.name}.part")
            with self._workers:
                try:
                    frames = _transcode(src, tmp)
                except (av.FFmpegError, OSError, ValueError) as exc:
                    tmp.unlink(missing_ok=True)
                    raise PreviewError(f"{src.name}: cannot transcode it ({exc})") from None
            if frames == 0:
                tmp.unlink(missing_ok=True)
                raise PreviewError(f"{src.name}: no frame could be decoded")
            tmp.replace(dst)
            return dst

    @staticmethod
    def media_type(path: Path) -> str:
        return "video/webm" if path.suffix == ".webm" else "video/mp4"


@lru_cache(maxsize=1024)
def _poster(key: tuple[str, int, int]) -> bytes:
    try:
        with av.open(key[0]) as container:
            stream = container.streams.video[0]
            frame = next(container.decode(stream), None)
            if frame is None:
                raise PreviewError(f"{Path(key[0]).name}: no frame could be decoded")
            image = frame.to_image()
    except (av.FFmpegError, OSError, ValueError, IndexError) as exc:
        raise PreviewError(f"{Path(key[0]).name}: cannot decode a frame ({exc})") from None
    image.thumbnail((POSTER_MAX_SIDE, POSTER_MAX_SIDE))
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="JPEG", quality=85)
    return buf.getvalue()


def poster(src: Path) -> bytes:
    """The clip's first frame as a JPEG (at most POSTER_MAX_SIDE pixels a side)."""
    try:
        key = _file_key(src)
    except OSError as exc:
        raise PreviewError(f"{src.name}: cannot read it ({exc})") from None
    return _poster(key)
