"""Opening an encoded video (mp4/mov, matroska/webm, avi) with PyAV under an allow-list, and
probing it without decoding it.

A video's bytes come from clients, and FFmpeg's probe would pick any of its demuxers for them,
some of which open files or sockets while they read the header (concat opens the files an
ffconcat script names, HLS its segments, SDP binds the UDP ports it lists). So:

- the container's format is read here from its magic bytes (ISO BMFF, EBML, RIFF AVI) and handed
  to FFmpeg, which then never probes; anything else is refused, naming what it looks like;
- no I/O beyond the in-memory buffer: `protocol_whitelist` names no protocol and
  `format_whitelist` only the accepted demuxers, so a nested open (an external reference inside
  an accepted container) fails instead of reaching a file or a socket;
- only the accepted codecs are decoded, by a decoder told the largest frame it may allocate
  (`max_pixels` = media.max_image_pixels), so a frame larger than the header said fails in the
  decoder before its buffer exists.

Probing reads the stream header, counts packets by demuxing (no decode) and decodes the first
frame to prove the stream decodes; truncation shows as fewer packets than the header lists.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import av

from .limits import (
    MediaError,
    _check_num_frames,
    _check_size,
    _check_video_pixels,
    current_limits,
)
from .wire import sniff_image_format

# Accepted containers: our name -> the FFmpeg demuxer opened for it.
ACCEPTED_CONTAINERS = {"mp4": "mov", "mov": "mov", "webm": "matroska", "matroska": "matroska", "avi": "avi"}
_DEMUXERS = "mov,matroska,avi"  # FFmpeg's format_whitelist: only these may ever be opened
# Protocol names FFmpeg may open beyond our buffer: none ("none" is no FFmpeg protocol's name).
_NO_PROTOCOLS = "none"
# Accepted video codecs (FFmpeg's canonical names): what generators and common tools write.
ACCEPTED_CODECS = frozenset({"h264", "hevc", "av1", "vp8", "vp9", "mpeg4", "mpeg2video", "mjpeg", "prores",
                             "ffv1"})
# First ISO BMFF boxes of an mp4 / QuickTime file (what FFmpeg's own mov probe looks for).
_BMFF_FIRST_BOXES = (b"ftyp", b"moov", b"mdat", b"free", b"skip", b"wide", b"pnot")


def _av_message(e: Exception) -> str:
    # FFmpegError's str() carries errno and "'<none>'" noise; its strerror is the useful part.
    msg = getattr(e, "strerror", None) or str(e)
    return f"{type(e).__name__}: {msg}"


def sniff_container(data: bytes) -> str | None:
    """'mp4' | 'mov' | 'webm' | 'matroska' | 'avi' from the magic bytes, or None."""
    if data[4:8] in _BMFF_FIRST_BOXES:
        return "mov" if data[8:10] == b"qt" else "mp4"
    if data[:4] == b"\x1a\x45\xdf\xa3":  # EBML: matroska, webm when its DocType says so
        return "webm" if b"webm" in data[:64] else "matroska"
    if data[:4] == b"RIFF" and data[8:12] == b"AVI ":
        return "avi"
    return None


def _looks_like_text(head: bytes) -> bool:
    return bool(head) and all(32 <= b < 127 or b in b"\t\r\n" for b in head)


def describe_format(data: bytes) -> str:
    """What refused video bytes look like, for the error message (never their content: a script
    names paths)."""
    head = data[:512]
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"ffconcat"):
        return "an ffconcat script (FFmpeg's concat demuxer opens the files it names)"
    if text.startswith(b"#EXTM3U") or b"#EXT-X-" in head:
        return "an HLS playlist (m3u8; it names segments to fetch)"
    if text.startswith(b"v=0") or (b"\nm=" in head and b"\nc=" in head):
        return "an SDP session description (it names network ports to listen on)"
    if b"<MPD" in head or b"urn:mpeg:dash" in head:
        return "a DASH manifest (it names segments to fetch)"
    image = sniff_image_format(data)
    if image is not None and image != "video":
        return f"a {image.upper()} image"
    if data[:3] == b"FLV":
        return "an FLV file"
    if data[:4] == b"OggS":
        return "an Ogg file"
    if data[:4] == b"RIFF":
        return f"a RIFF file of type {data[8:12]!r} (not AVI)"
    if data[:4] == b"\x00\x00\x01\xba":
        return "an MPEG program stream"
    if len(data) >= 376 and data[0] == 0x47 and data[188] == 0x47:
        return "an MPEG transport stream"
    if _looks_like_text(head[:64]):
        return "text"
    return f"unknown data (first bytes {data[:8].hex()})"


def _refuse_format(data: bytes) -> MediaError:
    return MediaError(
        f"video container refused: the data looks like {describe_format(data)}; accepted containers: "
        "mp4/mov, matroska/webm, avi (send images as images)"
    )


def open_container(data: bytes, container: str | None = None) -> Any:
    """An `av` input container over `data` under the allow-list (see the module docstring).
    `container`: the sniffed name when the caller already has it."""
    name = container or sniff_container(data)
    if name is None:
        raise _refuse_format(data)
    options = {"protocol_whitelist": _NO_PROTOCOLS, "format_whitelist": _DEMUXERS}
    try:
        return av.open(io.BytesIO(data), mode="r", format=ACCEPTED_CONTAINERS[name], container_options=options)
    except Exception as e:  # av.error.FFmpegError and friends
        raise MediaError(f"cannot read video container ({name}): {_av_message(e)}") from None


def video_stream(container: Any) -> Any:
    """The first video stream, its codec checked against ACCEPTED_CODECS and its decoder told the
    largest frame it may allocate (media.max_image_pixels)."""
    if not container.streams.video:
        raise MediaError("video container has no video stream")
    stream = container.streams.video[0]
    cc = stream.codec_context
    if cc is None:
        raise MediaError("the video stream's codec is unknown to FFmpeg (no decoder for it)")
    codec = cc.codec.canonical_name
    if codec not in ACCEPTED_CODECS:
        raise MediaError(f"video codec {codec!r} is not accepted; accepted: {', '.join(sorted(ACCEPTED_CODECS))}")
    # Read by the decoder when it opens (first decode): a frame over this fails before allocation.
    cc.options = {**cc.options, "max_pixels": str(current_limits().max_image_pixels)}
    return stream


@dataclass(frozen=True)
class _ContainerInfo:
    format: str  # short container name: mp4, mov, webm, matroska, avi
    codec: str
    pix_fmt: str | None
    width: int
    height: int
    fps: float
    num_frames: int


def _probe_container(data: bytes) -> _ContainerInfo:
    """Open a video container, read stream metadata, count packets (demux only, no decode) and
    decode the first frame to prove the stream is decodable. Truncation shows up as fewer
    packets than the header lists, or as a demux error part-way."""
    if not data:
        raise MediaError("video data is empty")
    name = sniff_container(data)
    if name is None:
        image = sniff_image_format(data)
        if image in ("png", "jpeg", "webp"):
            raise MediaError(f"video data is a still image ({image.upper()}); send it as an image or as video frames")
        raise _refuse_format(data)
    with open_container(data, name) as container:
        stream = video_stream(container)
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
            format=name,
            codec=cc.codec.canonical_name,
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


_CONTAINER_MIME = {
    "mp4": "video/mp4",
    "mov": "video/quicktime",
    "webm": "video/webm",
    "matroska": "video/x-matroska",
    "avi": "video/x-msvideo",
}
