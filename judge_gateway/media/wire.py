"""The wire forms of a medium, read and written: data URLs and base64 (standard or urlsafe),
URLs and file paths refused with a reason, image formats sniffed from magic bytes, the JSON
object of a uint8 array, and the JSON Schema / pydantic pieces that describe these forms.
"""

from __future__ import annotations

import binascii
import hashlib
import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
from pydantic_core import core_schema

from .body import DataURL
from .limits import MediaError
from .native import pybase64

T = TypeVar("T")


_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_JPEG_MAGIC = b"\xff\xd8\xff"
_DATA_URL_RE = re.compile(
    r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^;,]*)*?);base64,", re.IGNORECASE
)
_URL_RE = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
_PATH_RE = re.compile(
    r"(^(\.{0,2}/|~/|[a-z]:\\))|(\.(png|jpe?g|webp|gif|bmp|tiff?|mp4|webm|mkv|mov|avi)$)",
    re.IGNORECASE,
)
_B64_STD = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")
_B64_URLSAFE = re.compile(r"^[A-Za-z0-9_-]*={0,2}$")
_WS = re.compile(r"\s+")


def _preview(s: str, n: int = 40) -> str:
    return repr(s if len(s) <= n else s[:n] + "...")


def _reject_reference(s: str, what: str) -> None:
    """Refuse URLs: the service never fetches anything on a client's behalf (paths: see
    `_looks_like_path`, checked only once a string fails to decode, since base64 may start
    with '/')."""
    if _URL_RE.match(s):
        raise MediaError(
            f"{what} given as a URL ({_preview(s)}); the service does not fetch URLs or open "
            "files: send the bytes (base64 or a data: URL)"
        )


def _looks_like_path(s: str) -> bool:
    return len(s) < 4096 and bool(_PATH_RE.search(s.strip()))


def b64decode_any(s: str) -> bytes:
    """Decode standard or urlsafe base64, padded or not, ignoring whitespace."""
    try:
        # The form every client sends (standard alphabet, padded, one line), checked and decoded
        # in one SIMD pass: ~40x the regular expressions below, which cost ~18 ms per MB.
        data = pybase64().b64decode(s, validate=True)
        if data:
            return data
    except (binascii.Error, ValueError):
        pass  # anything else: the careful path says what is wrong, or decodes the other forms
    s = _WS.sub("", s)
    if not s:
        raise MediaError("empty base64 string")
    if _B64_STD.match(s):
        alt = None
    elif _B64_URLSAFE.match(s):
        alt = b"-_"
    else:
        raise MediaError("not valid base64: characters outside the base64 alphabets")
    s = s.rstrip("=")
    if len(s) % 4 == 1:
        raise MediaError("not valid base64: impossible length (truncated?)")
    s += "=" * (-len(s) % 4)
    try:
        return pybase64().b64decode(s, altchars=alt, validate=True)
    except (binascii.Error, ValueError) as e:
        raise MediaError(f"not valid base64: {e}") from None


def parse_data_url(s: str) -> tuple[str | None, bytes]:
    """`data:<mime>;base64,<payload>` -> (mime, bytes). Only base64 data URLs are accepted."""
    m = _DATA_URL_RE.match(s)
    if m is None:
        head = s[: s.find(",") + 1] if "," in s[:200] else s[:40]
        raise MediaError(f"malformed data URL {head!r}: expected 'data:<mime>;base64,<payload>'")
    mime = m.group("mime").lower() if m.group("mime") else None
    try:
        return mime, b64decode_any(s[m.end() :])
    except MediaError as e:
        raise MediaError(f"data URL payload: {e}") from None


def _string_to_bytes(s: str, what: str) -> bytes:
    """A media string is a data URL or bare base64; anything else gets a message saying so."""
    s = s.strip()
    if not s:
        raise MediaError(f"{what} is an empty string")
    _reject_reference(s, what)
    if s[:5].lower() == "data:":
        return parse_data_url(s)[1]
    try:
        return b64decode_any(s)
    except MediaError as e:
        if _looks_like_path(s):
            raise _path_error(s, what) from None
        raise MediaError(f"{what} string is neither a data: URL nor base64 ({e})") from None


def _path_error(s: str, what: str) -> MediaError:
    return MediaError(
        f"{what} looks like a file path ({_preview(s)}); the service does not open files: "
        "send the bytes (base64 or a data: URL)"
    )


def _decode_string_medium(s: str, what: str, probe: Callable[[bytes], T]) -> tuple[bytes, T]:
    """Decode a media string and probe it. A path like '/data/cat' is valid base64 too, so a
    probe failure on a path-like string is reported as a path, not as a corrupt file."""
    data = _string_to_bytes(s, what)
    try:
        return data, probe(data)
    except MediaError:
        if _looks_like_path(s):
            raise _path_error(s.strip(), what) from None
        raise


def _as_bytes(value: bytes | bytearray | memoryview) -> bytes:
    return value if isinstance(value, bytes) else bytes(value)


def sniff_image_format(data: bytes) -> str | None:
    """'png' | 'jpeg' | 'webp' from magic bytes, or a name for formats we refuse, or None."""
    if data.startswith(_PNG_MAGIC):
        return "png"
    if data.startswith(_JPEG_MAGIC):
        return "jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if data[:2] == b"BM":
        return "bmp"
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    if data[4:8] == b"ftyp" or data[:4] == b"\x1a\x45\xdf\xa3":
        return "video"
    return None


def _array_from_json(obj: dict[str, Any], what: str) -> np.ndarray:
    """The JSON form of an array: {"data": base64 of the raw bytes, "shape", "dtype": "uint8"}."""
    extra = set(obj) - {"data", "shape", "dtype"}
    if extra:
        raise MediaError(
            f"{what} array object has unknown keys {sorted(extra)}; expected data, shape, dtype"
        )
    if "data" not in obj or "shape" not in obj:
        raise MediaError(f"{what} array object needs 'data' (base64 of raw bytes) and 'shape'")
    dtype = obj.get("dtype", "uint8")
    if dtype != "uint8":
        raise MediaError(f"{what} array dtype must be 'uint8', got {dtype!r}")
    shape = obj["shape"]
    if (
        not isinstance(shape, (list, tuple))
        or not shape
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
    ):
        raise MediaError(f"{what} array shape must be a list of non-negative ints, got {shape!r}")
    raw = obj["data"]
    if isinstance(raw, str):
        data = b64decode_any(raw) if raw.strip() else b""
    elif isinstance(raw, (bytes, bytearray, memoryview)):
        data = _as_bytes(raw)
    else:
        raise MediaError(f"{what} array 'data' must be a base64 string, got {type(raw).__name__}")
    expected = math.prod(shape)
    if len(data) != expected:
        raise MediaError(
            f"{what} array data has {len(data)} bytes but shape {list(shape)} needs {expected}"
        )
    return np.frombuffer(data, dtype=np.uint8).reshape(shape)


def _array_sha256(tag: str, arr: np.ndarray) -> str:
    h = hashlib.sha256(f"{tag}:{list(arr.shape)}:".encode())
    h.update(memoryview(np.ascontiguousarray(arr)).cast("B"))
    return h.hexdigest()


def _array_to_json(arr: np.ndarray) -> dict[str, Any]:
    return {
        "data": pybase64().b64encode_as_string(np.ascontiguousarray(arr)),
        "shape": list(arr.shape),
        "dtype": "uint8",
    }


def _data_url(mime: str, data: bytes) -> DataURL:
    return DataURL(f"data:{mime};base64,{pybase64().b64encode_as_string(data)}")


def _array_json_schema(shape_doc: str, min_dims: int, max_dims: int) -> dict[str, Any]:
    return {
        "type": "object",
        "title": "uint8 array",
        "description": f"Raw uint8 array, row-major (C order), shape {shape_doc}.",
        "properties": {
            "data": {
                "type": "string",
                "contentEncoding": "base64",
                "description": "base64 of the raw bytes",
            },
            "shape": {
                "type": "array",
                "items": {"type": "integer", "minimum": 0},
                "minItems": min_dims,
                "maxItems": max_dims,
            },
            "dtype": {"type": "string", "enum": ["uint8"], "default": "uint8"},
        },
        "required": ["data", "shape"],
        "additionalProperties": False,
    }


def _media_core_schema(cls: Any) -> core_schema.CoreSchema:
    """Validate with `cls.validate` (cheap sniffing), serialise to JSON with `to_json`."""
    return core_schema.no_info_before_validator_function(
        cls.validate,
        core_schema.is_instance_schema(cls),
        serialization=core_schema.plain_serializer_function_ser_schema(
            lambda v: v.to_json(), when_used="json"
        ),
        ref=f"{cls.__module__}.{cls.__qualname__}",  # one $defs entry in JSON Schema
    )
