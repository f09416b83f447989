"""The native libraries media work runs on, imported at first use: OpenCV (set to one thread per
call: the media pool runs calls side by side, one per core, and OpenCV's own thread pool would
oversubscribe the cores) and pybase64 (SIMD base64). A head worker's interpreter imports this
package for its wire protocol and never touches media, so it needs neither.
"""

from __future__ import annotations

import base64
import binascii
import functools
import logging
from types import ModuleType, SimpleNamespace
from typing import Any

log = logging.getLogger(__name__)


@functools.cache
def cv2() -> ModuleType:
    import cv2 as module

    module.setNumThreads(1)
    return module


@functools.cache
def pybase64() -> Any:
    """pybase64, a declared dependency; in an environment installed before it was one, the
    standard library's base64 under the same names (the same bytes, ~7x slower to encode and
    ~40x to check and decode), with a warning."""
    try:
        import pybase64 as module

        return module
    except ImportError:
        log.warning("pybase64 is not installed (a dependency of judge-gateway: pip install pybase64); "
                    "base64 runs on the standard library, several times slower")

    def b64decode(s: str | bytes, altchars: bytes | None = None, validate: bool = False) -> bytes:
        return base64.b64decode(s, altchars=altchars, validate=validate)

    def b64encode_as_string(data: Any) -> str:
        return base64.b64encode(data).decode("ascii")

    return SimpleNamespace(b64decode=b64decode, b64encode_as_string=b64encode_as_string, error=binascii.Error)
