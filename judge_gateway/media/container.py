"""Probing an encoded video (mp4, webm, mkv, mov: whatever PyAV demuxes) without decoding it:
stream facts from the header, packets counted by demuxing, one frame decoded to prove the
stream decodes. Truncation shows as fewer packets than the header lists or a demux error.
`_stream_frames` decodes the frames an encode needs, one at a time.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import av
import numpy as np

from .limits import MediaError, _check_num_frames, _check_size, _check_video_pixels
from .wire import sniff_image_format


def _av_message(e: Exception) -> str:
    # FFmpegError's str() carries errno and "'<none>'" noise; its strerror is the useful part.
    msg = getattr(e, "strerror", None) or str(e)
    return f"{type(e).__name__}: {msg}"


@dataclass(frozen=True)
class _ContainerInfo:
    format: str  # short container name: mp4, webm, matroska, mov, ...
    codec: str
    pix_fmt: str | None
    width: int
    height: int
    fps: float
    num_frames: int


def _short_container_name(fmt_name: str, data: bytes) -> str:
    # PyAV reports demuxer families ("mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm").
    if "mp4" in fmt_name:
        return "mov" if data[8:10] == b"qt" else "mp4"
    if "matroska" in fmt_name:
        return "webm" if b"webm" in data[:64] else "matroska"
    return fmt_name.split(",")[0]


def _probe_container(data: bytes) -> _ContainerInfo:
    """Open a video container, read stream metadata, count packets (demux only, no decode) and
    decode the first frame to prove the stream is decodable. Truncation shows up as fewer
    packets than the header lists, or as a demux error part-way."""
    if not data:
        raise MediaError("video data is empty")
    if sniff_image_format(data) in ("png", "jpeg", "webp", "gif", "bmp", "tiff"):
        raise MediaError("video data is a still image; send it as an image or as video frames")
    try:
        container = av.open(io.BytesIO(data), mode="r")
    except Exception as e:  # av.error.FFmpegError and friends
        raise MediaError(f"cannot read video container: {_av_message(e)}") from None
    with container:
        if not container.streams.video:
            raise MediaError("video container has no video stream")
        stream = container.streams.video[0]
        declared = stream.frames if stream.frames and stream.frames > 0 else None
        cc = stream.codec_context
        if cc.width and cc.height:  # the stream header's size: refuse before decoding a frame
            _check_size(cc.width, cc.height, "video frame")
            if declared is not None:
                _check_num_frames(declared, "video")
                _check_video_pixels(declared, cc.width, cc.height, "video")
        first, counted = _first_frame_and_packet_count(container, stream, declared)
        if declared is not None and counted < declared:
            raise MediaError(
                f"truncated video: its header lists {declared} frames, the data holds {counted}"
            )
        if first is None:
            raise MediaError("video stream has no decodable frame")
        rate = stream.average_rate or stream.guessed_rate or stream.base_rate
        return _ContainerInfo(
            format=_short_container_name(container.format.name, data),
            codec=cc.name,
            pix_fmt=cc.pix_fmt,
            width=first.width,
            height=first.height,
            fps=float(rate) if rate else 0.0,
            num_frames=declared if declared is not None else counted,
        )


def _first_frame_and_packet_count(
    container: Any, stream: Any, declared: int | None
) -> tuple[Any, int]:
    first = None
    counted = 0
    try:
        for packet in container.demux(stream):
            if packet.size == 0:
                continue  # flush packet
            counted += 1
            if first is None:
                for frame in packet.decode():
                    first = frame
                    break
        if first is None:
            for frame in stream.codec_context.decode(None):  # drain the decoder
                first = frame
                break
    except Exception as e:
        where = f"after {counted} of {declared} frames" if declared else f"after {counted} frames"
        raise MediaError(
            f"corrupt or truncated video: unreadable {where} ({_av_message(e)})"
        ) from None
    return first, counted


def _stream_frames(data: bytes, idx: list[int], width: int, height: int, declared: int) -> Iterator[np.ndarray]:
    """RGB frames at `idx` (non-decreasing source indices), decoding up to the last one and
    converting only those, each handed over as it comes: the clip is never held whole (a 720p
    clip's 80 frames are 221 MB of RGB)."""
    if not idx:
        return
    k, n = 0, -1
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"  # FFmpeg's frame threads: decode on every core
            for n, frame in enumerate(container.decode(stream)):
                if n != idx[k]:
                    continue
                rgb = frame.to_ndarray(format="rgb24")
                if rgb.shape[:2] != (height, width):
                    raise MediaError(f"decoded frames are {rgb.shape[1]}x{rgb.shape[0]}, header said {width}x{height}")
                while k < len(idx) and idx[k] == n:
                    yield rgb
                    k += 1
                if k == len(idx):
                    return
    except MediaError:
        raise
    except Exception as e:
        raise MediaError(f"cannot decode video: {_av_message(e)}") from None
    raise MediaError(f"video decoded to {n + 1} frames but its header says {declared}; frame {idx[k]} is missing")


_CONTAINER_MIME = {
    "mp4": "video/mp4",
    "mov": "video/quicktime",
    "webm": "video/webm",
    "matroska": "video/x-matroska",
}
