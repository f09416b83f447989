"""workers/framing.py: the one frame format of every worker pipe (heads and the latent decoder).
A frame is `!IQ` (32-bit header length, 64-bit payload length), a JSON header, the payload."""

from __future__ import annotations

import asyncio
import io
import re
import struct
import tracemalloc

import pytest

from judge_gateway.workers import framing
from judge_gateway.workers.framing import (
    MAX_HEADER_BYTES,
    MAX_PAYLOAD_BYTES,
    PREFIX,
    ProtocolError,
    decode_prefix,
    encode_frame,
    encode_head,
    read_frame,
    read_frame_async,
    write_frame,
)

FIVE_GIB = 5 * 1024 ** 3


def _stream_reader(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


class _Trickle(io.RawIOBase):
    """A stream that hands out at most `step` bytes per read, as a pipe may."""

    def __init__(self, data: bytes, step: int) -> None:
        self.data, self.pos, self.step = data, 0, step

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = min(len(b), self.step, len(self.data) - self.pos)
        b[:n] = self.data[self.pos: self.pos + n]
        self.pos += n
        return n


def test_the_prefix_is_a_32_bit_header_length_and_a_64_bit_payload_length():
    assert PREFIX.size == 12
    head = encode_head({"op": "x"}, FIVE_GIB)
    assert head[:12] == struct.pack("!IQ", len(b'{"op":"x"}'), FIVE_GIB)
    assert head[12:] == b'{"op":"x"}'
    with pytest.raises(ProtocolError, match="does not fit the frame prefix"):
        encode_head({"op": "x"}, 1 << 64)


async def test_a_frame_reads_back_whole_from_a_blocking_and_an_asyncio_stream():
    payload = bytes(range(256)) * 1000
    data = encode_frame({"op": "decode", "id": 3, "shape": [1, 2]}, payload) + encode_frame({"op": "ping", "id": 4})
    stream = io.BytesIO(data)
    assert read_frame(stream) == ({"op": "decode", "id": 3, "shape": [1, 2]}, payload)
    assert read_frame(stream) == ({"op": "ping", "id": 4}, b"")
    assert read_frame(stream) is None  # a clean end between frames
    reader = _stream_reader(data)
    assert await read_frame_async(reader) == ({"op": "decode", "id": 3, "shape": [1, 2]}, payload)
    assert await read_frame_async(reader) == ({"op": "ping", "id": 4}, b"")
    assert await read_frame_async(reader) is None


def test_write_frame_writes_what_read_frame_reads():
    out = io.BytesIO()
    write_frame(out, {"ok": True, "id": 9}, memoryview(b"abc"))
    assert read_frame(io.BytesIO(out.getvalue())) == ({"ok": True, "id": 9}, b"abc")


@pytest.mark.parametrize("cut, where", [(5, "prefix (5 of 12 B)"), (12 + 4, "header (4 of 8 B)"),
                                        (12 + 8 + 3, "payload (3 of 10 B)")])
async def test_a_short_frame_says_where_the_stream_ended(cut, where):
    data = encode_frame({"a": 10}, b"0123456789")[:cut]
    assert len(encode_frame({"a": 10})) == 12 + 8
    with pytest.raises(ProtocolError, match=re.escape(f"stream ended inside a frame {where}")):
        read_frame(io.BytesIO(data))
    with pytest.raises(ProtocolError, match=re.escape(f"stream ended inside a frame {where}")):
        await read_frame_async(_stream_reader(data))


async def test_an_oversized_frame_is_refused_from_its_prefix_before_reading_on():
    too_big = struct.pack("!IQ", 2, MAX_PAYLOAD_BYTES + 1) + b"{}" + b"x" * 100
    stream = io.BytesIO(too_big)
    with pytest.raises(ProtocolError, match=f"frame too large: payload {MAX_PAYLOAD_BYTES + 1} B "
                                            rf"\(at most {MAX_PAYLOAD_BYTES}\)"):
        read_frame(stream)
    assert stream.tell() == 12  # nothing past the prefix was read
    with pytest.raises(ProtocolError, match="frame too large: payload 11 B"):
        await read_frame_async(_stream_reader(encode_frame({}, b"x" * 11)), max_payload=10)
    with pytest.raises(ProtocolError, match=f"frame too large: header {MAX_HEADER_BYTES + 1} B"):
        decode_prefix(struct.pack("!IQ", MAX_HEADER_BYTES + 1, 0))
    with pytest.raises(ProtocolError, match="frame prefix is 8 B, not 12"):
        decode_prefix(b"\0" * 8)


async def test_a_length_over_4_gib_is_accepted_from_the_prefix_without_allocating_it():
    assert decode_prefix(struct.pack("!IQ", 2, FIVE_GIB), max_payload=8 * 1024 ** 3) == (2, FIVE_GIB)
    # A peer that declares 5 GiB and sends 100 bytes: refused when the stream ends, and the
    # reader never allocated the declared size.
    data = struct.pack("!IQ", 2, FIVE_GIB) + b"{}" + b"x" * 100
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError, match=f"stream ended inside a frame payload [(]100 of {FIVE_GIB} B[)]"):
            read_frame(io.BytesIO(data), max_payload=8 * 1024 ** 3)
        with pytest.raises(ProtocolError, match=f"stream ended inside a frame payload [(]100 of {FIVE_GIB} B[)]"):
            await read_frame_async(_stream_reader(data), max_payload=8 * 1024 ** 3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024, peak


def test_a_payload_over_one_chunk_is_read_whole_from_short_reads(monkeypatch):
    monkeypatch.setattr(framing, "READ_CHUNK_BYTES", 1000)
    payload = bytes((i * 7) % 251 for i in range(10_000))
    stream = io.BufferedReader(_Trickle(encode_frame({"op": "score"}, payload), step=700), buffer_size=64)
    header, got = read_frame(stream)
    assert header == {"op": "score"} and bytes(got) == payload and len(got) == 10_000
    cut = io.BufferedReader(_Trickle(encode_frame({"op": "score"}, payload)[:-1], step=700), buffer_size=64)
    with pytest.raises(ProtocolError, match="stream ended inside a frame payload [(]9999 of 10000 B[)]"):
        read_frame(cut)


def test_a_payload_over_one_chunk_comes_back_as_bytes(monkeypatch):
    # bytes, not a bytearray: io.BytesIO shares bytes but copies a bytearray, and the latent
    # worker wraps every payload in one (a multi-GiB torch payload was copied twice more).
    monkeypatch.setattr(framing, "READ_CHUNK_BYTES", 1000)
    payload = bytes(range(256)) * 40
    header, got = read_frame(io.BytesIO(encode_frame({"op": "decode"}, payload)))
    assert header == {"op": "decode"} and type(got) is bytes and got == payload


@pytest.mark.parametrize("raw, why", [(b"[1, 2]", "not a JSON object"), (b"{nope", "not JSON"),
                                      (b"\xff\xfe", "not JSON")])
def test_a_header_must_be_a_json_object(raw, why):
    with pytest.raises(ProtocolError, match=why):
        read_frame(io.BytesIO(struct.pack("!IQ", len(raw), 0) + raw))
