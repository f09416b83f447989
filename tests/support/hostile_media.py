"""Small hostile media, built in-test (no files in the repo): inputs that declare huge decoded sizes,
or grow mid-stream, demuxer scripts that name files and ports, a codec FFmpeg does not know."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from fractions import Fraction

import av
import numpy as np


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_declaring(width: int, height: int) -> bytes:
    """A valid RGB PNG of width x height black pixels: rows of zeros deflate ~1000:1, so an
    8000x8000 image (192 MB decoded) is ~190 KB."""
    row = b"\x00" * (1 + 3 * width)  # filter byte + pixels
    z = zlib.compressobj(9)
    idat = b"".join(z.compress(row) for _ in range(height)) + z.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def mp4_of_black_frames(frames: int, width: int, height: int, fps: int = 30) -> bytes:
    """An h264 mp4 of identical black frames: P-frames of nothing, so 160 x 1080p is ~20 KB."""
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"preset": "ultrafast", "crf": "51"}
        frame = av.VideoFrame.from_ndarray(np.zeros((height, width, 3), np.uint8), format="rgb24")
        for _ in range(frames):
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def torch_zip_with_deflated_pickle(inflated_bytes: int) -> bytes:
    """A zip laid out like torch.save's, whose archive/data.pkl deflates `inflated_bytes` of zeros
    into ~1/1000 of that."""
    chunk = b"\x00" * (1 << 20)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("archive/data.pkl", "w", force_zip64=True) as f:
            for _ in range(inflated_bytes // len(chunk)):
                f.write(chunk)
        zf.writestr("archive/version", "3\n")
    return buf.getvalue()


# ---- demuxer scripts: bytes that FFmpeg's probe would read as instructions to open files or sockets


def ffconcat_script(relative_path: str) -> bytes:
    """An ffconcat script: FFmpeg's concat demuxer opens the file it names (relative to the cwd)."""
    return f"ffconcat version 1.0\nfile {relative_path}\n".encode()


def hls_playlist(relative_path: str) -> bytes:
    """An HLS playlist naming one segment: FFmpeg's hls demuxer opens it."""
    return (f"#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\n{relative_path}\n"
            "#EXT-X-ENDLIST\n").encode()


def sdp_description(port: int) -> bytes:
    """An SDP description of an RTP stream on `port`: FFmpeg's sdp demuxer binds it (and port + 1)
    on 0.0.0.0 and waits for packets."""
    return (f"v=0\no=- 0 0 IN IP4 127.0.0.1\ns=x\nc=IN IP4 0.0.0.0\nt=0 0\nm=video {port} RTP/AVP 96\n"
            "a=rtpmap:96 H264/90000\n").encode()


def _h264_annexb(width: int, height: int, frames: int) -> list[bytes]:
    """Packets of an h264 stream of black frames with its SPS/PPS in-band (Annex B)."""
    cc = av.CodecContext.create("libx264", "w")
    cc.width, cc.height, cc.pix_fmt = width, height, "yuv420p"
    cc.time_base = Fraction(1, 30)
    cc.options = {"preset": "ultrafast", "crf": "51", "x264-params": "repeat-headers=1:keyint=100000"}
    black = av.VideoFrame.from_ndarray(np.zeros((height, width, 3), np.uint8), format="rgb24")
    packets: list[bytes] = []
    for i in range(frames):
        black.pts = i
        packets += [bytes(p) for p in cc.encode(black)]
    packets += [bytes(p) for p in cc.encode(None)]
    return packets


def mkv_switching_size(small: tuple[int, int] = (32, 32), big: tuple[int, int] = (3840, 2160),
                       small_frames: int = 4, big_frames: int = 60) -> bytes:
    """A matroska file whose stream header (and first frames) say `small` and which switches to
    `big` mid-stream (an in-band SPS): ~30 KB that decodes to big_frames x big of RGB. The big part
    is one keyframe and one empty P-frame repeated, so building it costs two big encodes."""
    head = _h264_annexb(*small, small_frames)
    key, empty = _h264_annexb(*big, 2)[:2]
    stream_bytes = b"".join(head) + key + empty * (big_frames - 1)
    src = av.open(io.BytesIO(stream_bytes), format="h264")
    buf = io.BytesIO()
    with src, av.open(buf, "w", format="matroska") as dst:
        out = dst.add_stream_from_template(src.streams.video[0])
        for i, packet in enumerate(p for p in src.demux(src.streams.video[0]) if p.size):
            packet.stream = out
            packet.pts = packet.dts = i
            packet.time_base = Fraction(1, 30)
            dst.mux(packet)
    return buf.getvalue()


def unknown_codec_webm() -> bytes:
    """A webm whose track names a codec FFmpeg does not know (V_ZZZ): a stream with no decoder."""
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="webm") as out:
        stream = out.add_stream("libvpx", rate=8)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        frame = av.VideoFrame.from_ndarray(np.zeros((32, 32, 3), np.uint8), format="rgb24")
        for i in range(2):
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    data = buf.getvalue()
    at = data.index(b"V_VP8")
    return data[:at] + b"V_ZZZ" + data[at + 5:]
