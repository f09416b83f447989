"""The one wire framing between the gateway and its worker processes, both ways.

A frame is a 12-byte prefix `!IQ` (header length: 32 bits, payload length: 64 bits), a UTF-8
JSON object (the header), then the payload bytes. Nothing is pickled. The payload length is 64
bits because a latent decoder's reply (uint8 pixels, about 12x its float32 latents) can pass
4 GiB; each reader passes its own `max_payload`, and a length above it is refused from the prefix
alone, before anything is allocated.

Stdlib only, importing nothing from judge_gateway: a worker under an interpreter that cannot
import the package (latent_worker.py) loads this file by its path.
"""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any, BinaryIO

PREFIX = struct.Struct("!IQ")
MAX_HEADER_BYTES = 16 * 1024 * 1024
# A reader's default payload limit: the heads' frames (a pipe frame holds at most 64 MiB, one
# image stack a little more); readers that take larger payloads pass their own.
MAX_PAYLOAD_BYTES = 4 * 1024 * 1024 * 1024
# The latent decoder's limit, both ways (latents.py, latent_worker.py). Requests carry a cosmos-rl
# body's latents or torch-saved tensor (bounded by the gateway's body limit); replies carry
# decoded uint8 pixels, about 12x the float32 latents they came from (Wan2.1: 3 x 4 x 8 x 8 values
# per 16 latent values), past 4 GiB for large batches. It only refuses a corrupt length.
MAX_LATENT_PAYLOAD_BYTES = 256 * 1024 * 1024 * 1024
# Payloads are read at most this much at a time and joined at the end: a peer that declares a
# huge frame and stalls costs one chunk, not the declared size.
READ_CHUNK_BYTES = 64 * 1024 * 1024


class ProtocolError(RuntimeError):
    """A malformed frame: the stream cannot be trusted any more."""


def _header_bytes(header: dict[str, Any]) -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    if len(head) > MAX_HEADER_BYTES:
        raise ProtocolError(f"frame header is {len(head)} B (at most {MAX_HEADER_BYTES})")
    return head


def encode_head(header: dict[str, Any], payload_len: int) -> bytes:
    """A frame's prefix and header only; the caller writes `payload_len` payload bytes after it
    (so a large payload is never concatenated into one more copy)."""
    if payload_len < 0 or payload_len >= 1 << 64:
        raise ProtocolError(f"payload length {payload_len} does not fit the frame prefix")
    head = _header_bytes(header)
    return PREFIX.pack(len(head), payload_len) + head


def encode_frame(header: dict[str, Any], payload: bytes | bytearray | memoryview = b"") -> bytes:
    return encode_head(header, len(payload)) + bytes(payload)


def decode_prefix(prefix: bytes, max_payload: int = MAX_PAYLOAD_BYTES) -> tuple[int, int]:
    """(header length, payload length) of a frame, refused when either is over its limit."""
    if len(prefix) != PREFIX.size:
        raise ProtocolError(f"frame prefix is {len(prefix)} B, not {PREFIX.size}")
    head_len, payload_len = PREFIX.unpack(prefix)
    if head_len > MAX_HEADER_BYTES:
        raise ProtocolError(f"frame too large: header {head_len} B (at most {MAX_HEADER_BYTES})")
    if payload_len > max_payload:
        raise ProtocolError(f"frame too large: payload {payload_len} B (at most {max_payload})")
    return head_len, payload_len


def decode_header(raw: bytes) -> dict[str, Any]:
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"frame header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ProtocolError("frame header is not a JSON object")
    return header


def _read_exact(stream: BinaryIO, n: int) -> tuple[bytes | None, int]:
    """(n bytes, n) from a blocking stream, or (None, bytes got) when it ended first. Read a chunk
    at a time, so memory grows with what arrived, not with what a prefix declared; the pieces are
    joined once into `bytes` (a bytearray would be copied again by every io.BytesIO wrapping it)."""
    pieces: list[bytes] = []
    got = 0
    while got < n:
        piece = stream.read(min(n - got, READ_CHUNK_BYTES))
        if not piece:
            return None, got
        pieces.append(piece)
        got += len(piece)
    return (pieces[0] if len(pieces) == 1 else b"".join(pieces)), n  # one read: no copy


def read_frame(stream: BinaryIO, max_payload: int = MAX_PAYLOAD_BYTES) -> tuple[dict[str, Any], bytes] | None:
    """One frame from a blocking binary stream; None when the stream ends between frames. Raises
    ProtocolError on a malformed or oversized frame, or one the stream ends inside."""
    prefix, got = _read_exact(stream, PREFIX.size)
    if prefix is None:
        if got:
            raise ProtocolError(f"stream ended inside a frame prefix ({got} of {PREFIX.size} B)")
        return None
    head_len, payload_len = decode_prefix(prefix, max_payload)
    head, got = _read_exact(stream, head_len) if head_len else (b"", 0)
    if head is None:
        raise ProtocolError(f"stream ended inside a frame header ({got} of {head_len} B)")
    payload, got = _read_exact(stream, payload_len) if payload_len else (b"", 0)
    if payload is None:
        raise ProtocolError(f"stream ended inside a frame payload ({got} of {payload_len} B)")
    return decode_header(head), payload


def write_frame(stream: BinaryIO, header: dict[str, Any], payload: bytes | bytearray | memoryview = b"") -> None:
    """One frame to a blocking binary stream, flushed (the payload is written without a copy)."""
    stream.write(encode_head(header, len(payload)))
    if len(payload):
        stream.write(payload)
    stream.flush()


async def read_frame_async(stream: asyncio.StreamReader,
                           max_payload: int = MAX_PAYLOAD_BYTES) -> tuple[dict[str, Any], bytes] | None:
    """One frame from an asyncio stream; None when it ends (the worker exited). Raises
    ProtocolError on a malformed or oversized frame."""
    try:
        prefix = await stream.readexactly(PREFIX.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise ProtocolError(f"stream ended inside a frame prefix ({len(exc.partial)} of {PREFIX.size} B)") from None
        return None
    head_len, payload_len = decode_prefix(prefix, max_payload)
    try:
        header = decode_header(await stream.readexactly(head_len))
    except asyncio.IncompleteReadError as exc:
        raise ProtocolError(f"stream ended inside a frame header ({len(exc.partial)} of {head_len} B)") from None
    try:
        payload = await stream.readexactly(payload_len) if payload_len else b""
    except asyncio.IncompleteReadError as exc:
        raise ProtocolError(f"stream ended inside a frame payload ({len(exc.partial)} of {payload_len} B)") from None
    return header, payload
