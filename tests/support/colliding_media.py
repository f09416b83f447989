"""Images crafted to share the media cache's cheap fingerprint (length and crc32), each one a
valid, different PNG file: what a client sends to make a cache that confirms matches byte by byte
do quadratic work (judge_gateway/media/cache.py).

Every image is the same small PNG with a private ancillary chunk (`prVt`, which decoders skip
once its chunk CRC checks) holding a counter, and 4 bytes after IEND (which decoders never read).
crc32 is affine over GF(2) in the file's bits, so the 4 bytes that give the whole file any chosen
crc32 are the solution of a 32 x 32 linear system whose matrix is the same for every counter.
(Bytes inside a chunk cannot do it: the chunk's own CRC after them cancels their effect.)
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image

CHUNK = b"prVt"


def _base_png(size: int = 8) -> tuple[bytes, bytes]:
    """(everything before IEND, the IEND chunk) of a small PNG."""
    rng = np.random.default_rng(7)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(buf, format="PNG")
    data = buf.getvalue()
    return data[:-12], data[-12:]


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _solve(columns: list[int], target: int) -> int:
    """x with XOR of columns[i] for the set bits i of x == target (Gaussian elimination over GF(2))."""
    rows = [(col, 1 << i) for i, col in enumerate(columns)]  # (value, which bits of x make it)
    basis: dict[int, tuple[int, int]] = {}  # leading bit -> (value, combination)
    for value, combo in rows:
        for bit in range(31, -1, -1):
            if not value >> bit & 1:
                continue
            if bit in basis:
                value ^= basis[bit][0]
                combo ^= basis[bit][1]
            else:
                basis[bit] = (value, combo)
                break
    x = 0
    for bit in range(31, -1, -1):
        if target >> bit & 1:
            if bit not in basis:
                raise ValueError("the forging bytes do not span crc32's range")
            target ^= basis[bit][0]
            x ^= basis[bit][1]
    return x


def colliding_pngs(n: int, target_crc: int = 0x5EED5EED) -> list[bytes]:
    """`n` different PNG files of one length and one crc32 (every one decodes to the same pixels)."""
    head, iend = _base_png()

    def build(counter: int, forge: int) -> bytes:
        return head + _chunk(CHUNK, struct.pack(">I", counter)) + iend + struct.pack(">I", forge)

    zero = zlib.crc32(build(0, 0))
    columns = [zlib.crc32(build(0, 1 << i)) ^ zero for i in range(32)]  # the linear part, any counter
    out = []
    for counter in range(n):
        offset = zlib.crc32(build(counter, 0))
        out.append(build(counter, _solve(columns, target_crc ^ offset)))
    return out
