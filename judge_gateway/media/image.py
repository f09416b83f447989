"""`ImageMedia`: one validated image (PNG, JPEG, WebP bytes or uint8 pixels), usable as a
pydantic field type. Validation reads headers only (PNG chunk CRCs, no inflate); pixels are
decoded lazily, once, when a judge asks for them.
"""

from __future__ import annotations

import hashlib
import io
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError
from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from .limits import MAX_IMAGE_PIXELS, MediaError, _charge, _check_size
from .native import cv2
from .wire import (
    _array_from_json,
    _array_json_schema,
    _array_sha256,
    _array_to_json,
    _as_bytes,
    _data_url,
    _decode_string_medium,
    _media_core_schema,
    sniff_image_format,
)

# Pillow plugins an image may be read with (magic bytes pick the format first; this keeps every
# other plugin, e.g. EPS, which runs Ghostscript, away from request bytes).
ACCEPTED_IMAGE_FORMATS = ("PNG", "JPEG", "WEBP")


def _probe_encoded_image(data: bytes) -> tuple[str, int, int]:
    """Format and size from the header; PNG chunk CRCs are checked (no inflate), JPEG must end."""
    if not data:
        raise MediaError("image data is empty")
    fmt = sniff_image_format(data)
    if fmt == "video":
        raise MediaError("image data is a video container (mp4/webm/mkv); send it as a video")
    if fmt in ("gif", "bmp", "tiff"):
        raise MediaError(f"unsupported image format {fmt!r}: send PNG, JPEG or WebP")
    if fmt is None:
        raise MediaError(
            f"unknown image format (first bytes {data[:8].hex()}): expected PNG, JPEG or WebP"
        )
    try:
        # lazy: reads the header, decodes nothing; only the accepted formats' plugins may read it
        with Image.open(io.BytesIO(data), formats=ACCEPTED_IMAGE_FORMATS) as im:
            w, h = im.size
            _check_size(w, h, f"{fmt.upper()} image")
            if fmt == "png":
                # verify() walks the chunks and checks CRCs without inflating the pixels:
                # it catches truncated and corrupted uploads for a few ms.
                im.verify()
    except Image.DecompressionBombError as e:
        raise MediaError(f"image too large: {e}") from None
    except MediaError:
        raise
    except UnidentifiedImageError:
        raise MediaError(f"corrupt or truncated {fmt.upper()} data: header unreadable") from None
    except Exception as e:  # PIL raises many types (SyntaxError, OSError, struct.error...)
        raise MediaError(f"corrupt or truncated {fmt.upper()} data: {e}") from None
    if fmt == "jpeg" and b"\xff\xd9" not in data[-4096:]:
        raise MediaError("truncated JPEG data: no end-of-image marker")
    _check_size(w, h, f"{fmt.upper()} image")
    return fmt, w, h


def _check_uint8(arr: np.ndarray, what: str) -> None:
    if arr.dtype != np.uint8:
        raise MediaError(
            f"{what} array must be uint8 (0-255), got dtype {arr.dtype}; "
            "convert with (x * 255).round().clip(0, 255).astype(np.uint8) if it is float in [0, 1]"
        )


def _image_array_to_rgb(arr: np.ndarray, what: str = "image") -> np.ndarray:
    """uint8 [H,W], [H,W,1], [H,W,3] or [H,W,4] -> a read-only, contiguous uint8 [H,W,3] copy."""
    _check_uint8(arr, what)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3 or arr.shape[2] not in (1, 3, 4):
        raise MediaError(
            f"{what} array must have shape [H, W, 3] (or [H, W] / [H, W, 4]), got {list(arr.shape)}"
        )
    _check_size(arr.shape[1], arr.shape[0], f"{what} array")
    if arr.shape[2] == 1:
        out = np.repeat(arr, 3, axis=2)
    elif arr.shape[2] == 4:
        out = np.ascontiguousarray(arr[:, :, :3])  # alpha dropped, as PIL's convert("RGB") does
    else:
        out = np.array(arr, copy=True, order="C")  # a snapshot: callers may reuse their buffer
    out.flags.writeable = False
    return out


_IMAGE_FORMS_DOC = (
    "An image, in one of these forms: base64 (standard or urlsafe, padding optional) of PNG, "
    "JPEG or WebP bytes; a data URL 'data:image/png;base64,...'; or the JSON form of a uint8 "
    'array {"data": base64 of the raw bytes, "shape": [H, W, 3], "dtype": "uint8"} '
    f"(also [H, W] gray or [H, W, 4] RGBA). At most {MAX_IMAGE_PIXELS} pixels by default "
    "(media.max_image_pixels). "
    "URLs and file paths are refused: send the bytes."
)


def _image_json_schema() -> dict[str, Any]:
    return {
        "title": "Image",
        "description": _IMAGE_FORMS_DOC,
        "anyOf": [
            {
                "type": "string",
                "title": "data URL",
                "pattern": r"^data:image/[\w.+-]+;base64,",
                "description": "data:image/png|jpeg|webp;base64,<payload>",
            },
            {
                "type": "string",
                "title": "base64",
                "contentEncoding": "base64",
                "contentMediaType": "image/*",
                "description": "base64 of PNG, JPEG or WebP bytes (standard or urlsafe)",
            },
            _array_json_schema("[H, W, 3] (or [H, W] / [H, W, 4])", 2, 3),
        ],
    }


class ImageMedia:
    """One validated image. Build with `ImageMedia.validate(x)` or a pydantic field.

    Holds either encoded bytes (PNG/JPEG/WebP, decoded lazily) or an RGB uint8 array snapshot.
    """

    __slots__ = ("__weakref__", "_array", "_bytes", "_format", "_height", "_sha256", "_width")

    def __init__(
        self,
        *,
        format: str,
        width: int,
        height: int,
        data: bytes | None = None,
        array: np.ndarray | None = None,
    ) -> None:
        # Private: use validate()/from_* so every instance is checked.
        self._format = format
        self._bytes = data
        self._array = array
        self._width = width
        self._height = height
        self._sha256: str | None = None

    # ---- construction ------------------------------------------------------------------------

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> ImageMedia:
        data = _as_bytes(data)
        fmt, w, h = _probe_encoded_image(data)
        _charge(w * h, f"{fmt.upper()} image {w}x{h}")
        return cls(format=fmt, width=w, height=h, data=data)

    @classmethod
    def from_array(cls, arr: np.ndarray) -> ImageMedia:
        rgb = _image_array_to_rgb(arr)
        return cls(format="array", width=rgb.shape[1], height=rgb.shape[0], array=rgb)

    @classmethod
    def from_pil(cls, img: Image.Image) -> ImageMedia:
        # Snapshot as RGB now: PIL images are mutable and often lazily loaded from files.
        try:
            rgb = np.asarray(img.convert("RGB"))
        except Exception as e:
            raise MediaError(f"cannot convert PIL image (mode {img.mode}) to RGB: {e}") from None
        out = _image_array_to_rgb(rgb, "PIL image")
        return cls(format="pil", width=out.shape[1], height=out.shape[0], array=out)

    @classmethod
    def from_string(cls, s: str) -> ImageMedia:
        """A data URL or base64 (standard or urlsafe, padding optional)."""
        return _decode_string_medium(s, "image", cls.from_bytes)[1]

    @classmethod
    def validate(cls, value: Any) -> ImageMedia:
        """Accept every supported input form; raise `MediaError` (a ValueError) otherwise."""
        if isinstance(value, ImageMedia):
            return value
        if isinstance(value, (bytes, bytearray, memoryview)):
            return cls.from_bytes(value)
        if isinstance(value, str):
            return cls.from_string(value)
        if isinstance(value, np.ndarray):
            return cls.from_array(value)
        if isinstance(value, Image.Image):
            return cls.from_pil(value)
        if isinstance(value, dict):
            return cls.from_array(_array_from_json(value, "image"))
        raise MediaError(
            f"unsupported image input of type {type(value).__name__}: expected PNG/JPEG/WebP "
            "bytes, a base64 string, a data: URL, a uint8 array, a PIL image or "
            "{data, shape, dtype}"
        )

    # ---- pydantic ----------------------------------------------------------------------------

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return _media_core_schema(cls)

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return _image_json_schema()

    # ---- facts -------------------------------------------------------------------------------

    @property
    def width(self) -> int:
        return self._width

    @property
    def height(self) -> int:
        return self._height

    @property
    def format(self) -> str:
        """'png' | 'jpeg' | 'webp' for encoded input, 'array' or 'pil' for pixels."""
        return self._format

    @property
    def sha256(self) -> str:
        """Hash of the source bytes (encoded input) or of shape + pixels (arrays); a cache key."""
        if self._sha256 is None:
            if self._bytes is not None:
                self._sha256 = hashlib.sha256(self._bytes).hexdigest()
            else:
                assert self._array is not None
                self._sha256 = _array_sha256("rgb8", self._array)
        return self._sha256

    def source_bytes(self) -> bytes | None:
        """The encoded bytes when the input was an encoded image, else None."""
        return self._bytes

    # ---- pixels ------------------------------------------------------------------------------

    @property
    def decoded(self) -> bool:
        """True when `to_array()` returns at once (no decode left to do)."""
        return self._array is not None

    def to_array(self) -> np.ndarray:
        """RGB uint8 [H, W, 3], read-only; decoded once and kept."""
        if self._array is None:
            self._array = self._decode()
        return self._array

    def to_pil(self) -> Image.Image:
        """A fresh RGB PIL image (callers may mutate it)."""
        return Image.fromarray(np.array(self.to_array()))

    def _decode(self) -> np.ndarray:
        assert self._bytes is not None
        try:
            with Image.open(io.BytesIO(self._bytes), formats=ACCEPTED_IMAGE_FORMATS) as im:
                if im.mode in ("RGB", "L"):
                    # OpenCV's decoders (libjpeg-turbo, libpng, libwebp) give the same pixels
                    # for these modes at ~60% of PIL's CPU; EXIF orientation is ignored, as PIL
                    # does. Palettes, alpha, CMYK and 16-bit gray keep PIL's conversion.
                    cv = cv2()
                    arr = cv.imdecode(np.frombuffer(self._bytes, np.uint8),
                                      cv.IMREAD_COLOR_RGB | cv.IMREAD_IGNORE_ORIENTATION)
                    if arr is None:
                        raise ValueError("OpenCV could not decode it")
                else:
                    im.load()
                    arr = np.asarray(im.convert("RGB"))
        except Exception as e:
            raise MediaError(f"cannot decode {self._format.upper()} image: {e}") from None
        if arr.shape[:2] != (self._height, self._width):
            raise MediaError(
                f"decoded image is {arr.shape[1]}x{arr.shape[0]} but its header said "
                f"{self._width}x{self._height}"
            )
        arr.flags.writeable = False
        return arr

    def to_json(self) -> str | dict[str, Any]:
        """The JSON form: a data URL for encoded input, the array object otherwise."""
        if self._bytes is not None:
            return _data_url(f"image/{self._format}", self._bytes)
        return _array_to_json(self.to_array())

    def __repr__(self) -> str:
        return f"ImageMedia({self._format} {self._width}x{self._height})"
