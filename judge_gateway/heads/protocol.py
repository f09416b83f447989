"""The gateway <-> head worker wire format: length-prefixed frames, no pickle.

A frame is `!II` (header length, payload length), a UTF-8 JSON header, then the payload bytes.
Arrays travel as raw bytes in the payload, described in the header by `shape` and `dtype`
(only uint8 images are accepted), so nothing a client sent is ever unpickled.
"""

from __future__ import annotations

import json
import struct
from typing import Any, BinaryIO

import numpy as np

PREFIX = struct.Struct("!II")
MAX_HEADER_BYTES = 16 * 1024 * 1024
MAX_PAYLOAD_BYTES = 4 * 1024 * 1024 * 1024


class ProtocolError(RuntimeError):
    """A malformed frame: the stream cannot be trusted any more."""


def encode_frame(header: dict[str, Any], payload: bytes | memoryview = b"") -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    return PREFIX.pack(len(head), len(payload)) + head + bytes(payload)


def decode_prefix(prefix: bytes) -> tuple[int, int]:
    head_len, payload_len = PREFIX.unpack(prefix)
    if head_len > MAX_HEADER_BYTES or payload_len > MAX_PAYLOAD_BYTES:
        raise ProtocolError(f"frame too large: header {head_len} B, payload {payload_len} B")
    return head_len, payload_len


def decode_header(raw: bytes) -> dict[str, Any]:
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"frame header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ProtocolError("frame header is not a JSON object")
    return header


def _read_exact(stream: BinaryIO, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = stream.read(n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(stream: BinaryIO) -> tuple[dict[str, Any], bytes] | None:
    """One frame from a blocking binary stream; None at a clean end of stream."""
    prefix = _read_exact(stream, PREFIX.size)
    if prefix is None:
        return None
    head_len, payload_len = decode_prefix(prefix)
    head = _read_exact(stream, head_len)
    payload = _read_exact(stream, payload_len) if payload_len else b""
    if head is None or payload is None:
        raise ProtocolError("stream ended inside a frame")
    return decode_header(head), payload


def images_header(frames: np.ndarray) -> dict[str, Any]:
    """Header fields describing a uint8 [n, H, W, 3] stack of frames."""
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames must be uint8 [n, H, W, 3], got {frames.dtype} {frames.shape}")
    return {"shape": list(frames.shape), "dtype": "uint8"}


def images_from_payload(header: dict[str, Any], payload: bytes) -> np.ndarray:
    """The uint8 [n, H, W, 3] frames a header describes, checked against the payload size."""
    shape = header.get("shape")
    if header.get("dtype") != "uint8" or not isinstance(shape, list) or len(shape) != 4:
        raise ProtocolError(f"bad image description: dtype={header.get('dtype')!r} shape={shape!r}")
    if not all(isinstance(d, int) and d > 0 for d in shape) or shape[3] != 3:
        raise ProtocolError(f"bad image shape {shape!r}")
    n, h, w, c = shape
    if n * h * w * c != len(payload):
        raise ProtocolError(f"payload is {len(payload)} B, shape {shape} needs {n * h * w * c} B")
    return np.frombuffer(payload, dtype=np.uint8).reshape(n, h, w, c)
