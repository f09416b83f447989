"""Small inputs that declare huge decoded sizes, built in-test (no files in the repo)."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

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
