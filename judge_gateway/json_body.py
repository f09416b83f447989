"""One safe way to parse a request's JSON: every malformed body is a `JSONBodyError` (a 4xx).

The stdlib parser raises RecursionError on deep nesting, ValueError on integers past Python's
4,300-digit limit, UnicodeDecodeError on invalid UTF-8, and accepts lone surrogates such as
"\\ud800" that later fail deep inside validation. pydantic-core's parser (the one FastAPI
models use) refuses all of these with a position, so every route parses through it.

Parsed JSON is larger than its text: 64 MB of `[{},{},...]` became 1.6 GB of Python dicts
(25x), 64 MB of `[0.5,0.5,...]` 0.7 GB (11x). `check_json_counts` bounds both, by counting
brackets and commas in the raw bytes (strings included: a legitimate body is far below either
bound, since media travel as base64) before anything is parsed.
"""

from __future__ import annotations

from typing import Any

import pydantic_core

from .exceptions import InvalidInput

# pydantic-core's fixed nesting limit (its recursion guard), stated here so errors and docs can name it.
MAX_JSON_DEPTH = 200
MAX_INT_DIGITS = 4300
MAX_JSON_CONTAINERS = 1_000_000  # '{' + '[' in a body: ~100 MB of Python objects at most
MAX_JSON_SEPARATORS = 4_000_000  # ',' in a body: ~130 MB of Python floats at most

JSON_RULES = (f"JSON must be UTF-8, nest at most {MAX_JSON_DEPTH} levels, hold integers of at most "
              f"{MAX_INT_DIGITS} digits and no lone UTF-16 surrogates")


class JSONBodyError(InvalidInput):
    """The bytes are not acceptable JSON; the message says why and where (`reason`: the parser's
    words with the rules, for callers that phrase their own message)."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"{what} is not JSON: {reason}")
        self.reason = reason


def check_json_counts(data: bytes | str, what: str = "body") -> None:
    """Refuse a body whose parse would blow up in memory (see the module docstring)."""
    brace, bracket, comma = (b"{", b"[", b",") if isinstance(data, bytes) else ("{", "[", ",")
    containers = data.count(brace) + data.count(bracket)
    if containers > MAX_JSON_CONTAINERS:
        raise JSONBodyError(what, f"it holds {containers} '{{' and '[' (at most {MAX_JSON_CONTAINERS} objects "
                                  "and arrays per body); split the request")
    separators = data.count(comma)
    if separators > MAX_JSON_SEPARATORS:
        raise JSONBodyError(what, f"it holds {separators} ',' (at most {MAX_JSON_SEPARATORS} values per body); "
                                  "split the request")


def parse_json(data: bytes | str, what: str = "body") -> Any:
    """Parse strict JSON (no NaN/Infinity, no trailing data) or raise `JSONBodyError`."""
    check_json_counts(data, what)
    try:
        return pydantic_core.from_json(data, allow_inf_nan=False)
    except ValueError as err:
        raise JSONBodyError(what, f"{err} ({JSON_RULES})") from None
