"""Reading JSONL inputs line by line, with errors that say `file:line: reason`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def iter_objects(path: Path, error: type[Exception] = ValueError,
                 known_keys: set[str] | None = None) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(line number, "file:line", object) for every non-blank line; `error` names bad lines."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise error(f"{path}: cannot read ({err})") from None
    yield from iter_objects_in(text, str(path), error, known_keys)


def iter_objects_in(text: str, name: str, error: type[Exception] = ValueError,
                    known_keys: set[str] | None = None) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """iter_objects over text already read (a caller that hashes the bytes); `name` leads each
    line's "name:line"."""
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name}:{n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise error(f"{where}: not JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(obj, dict):
            raise error(f"{where}: each line must be a JSON object")
        if known_keys is not None:
            unknown = set(obj) - known_keys
            if unknown:
                raise error(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(known_keys)}")
        yield n, where, obj
