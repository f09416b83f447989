"""The lock file `templates.lock`: the sha256 of every released template file, read and
written atomically (registry.py holds its path and checks the files against it)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

from .template import TemplateError


def _read_lock(path: Path) -> dict[str, str]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TemplateError(f"template lock {path} is missing") from None
    return _parse_lock(str(path), data)


_LOCK_CACHE: dict[tuple[str, bytes], dict[str, str]] = {}


def _parse_lock(name: str, data: bytes) -> dict[str, str]:
    key = (name, data)
    if key not in _LOCK_CACHE:
        try:
            raw = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TemplateError(f"template lock {name} is not valid JSON: {exc}") from None
        if not isinstance(raw, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v)
            for k, v in raw.items()
        ):
            raise TemplateError(
                f"template lock {name} must be a JSON object 'family@version' -> sha256 hex"
            )
        _LOCK_CACHE.clear()  # only the current lock is worth keeping
        _LOCK_CACHE[key] = raw
    return dict(_LOCK_CACHE[key])


def _write_lock(path: Path, lock: Mapping[str, str]) -> None:
    text = json.dumps(dict(sorted(lock.items())), indent=2) + "\n"
    # Write then rename, so a crash never leaves a half-written lock.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".templates.lock.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
