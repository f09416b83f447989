"""Versioned aggregation profiles: the tuned weights, N/A policy and tie threshold, with where
they came from (judge, template, model, data hash) and how well they did on held-out folds.

A profile is a JSON file `<dir>/<name>@<version>.json`. Versions are never overwritten: a new
tuning run writes the next version. A rubric judge references one with
`options.aggregation_profile = "<path>/<name>@<version>.json"` (optionally pinned with
`options.aggregation_profile_sha256`); the judge's score `details` name it and its hash.
It sits low (beside config), not in `tuning/`: tuning writes profiles, the config loader and the
rubric judge read them, and loading a config must not touch the offline tuning package.
This module needs no numpy.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .exceptions import ConfigurationError

FORMAT = "judge-gateway/aggregation-profile"
FORMAT_VERSION = 1
PROFILE_KINDS = ("rubric_aspects", "judge_weights")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_FILE_RE = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)@(?P<version>[0-9]+)\.json")


class AggregationProfileError(ConfigurationError):
    """A profile that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class AggregationProfile:
    name: str
    version: int
    kind: str
    weights: dict[str, float]
    na_policy: str
    na_value: float | None
    tie_threshold: float
    created_from: dict[str, Any]
    path: Path
    sha256: str
    body: dict[str, Any]

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    def details(self) -> dict[str, Any]:
        """What a score's `details` carry to name the aggregation exactly."""
        return {"name": self.name, "version": self.version, "sha256": self.sha256, "path": str(self.path)}


def next_version(directory: Path, name: str) -> int:
    versions = [int(m.group("version")) for p in directory.glob(f"{name}@*.json")
                if (m := _FILE_RE.fullmatch(p.name)) and m.group("name") == name]
    return max(versions, default=0) + 1


def write_aggregation_profile(directory: str | Path, name: str, body: dict[str, Any]) -> Path:
    """Write `body` as the next version of `name` in `directory`; never overwrites."""
    if not _NAME_RE.fullmatch(name):
        raise AggregationProfileError(f"profile name {name!r} must match {_NAME_RE.pattern}")
    directory = Path(directory)
    version = next_version(directory, name) if directory.is_dir() else 1
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "name": name, "version": version, **body}
    # Serialised before anything is created: a body JSON cannot hold (NaN, inf) leaves no folder.
    try:
        text = json.dumps(doc, indent=2, allow_nan=False) + "\n"
    except ValueError as exc:
        raise AggregationProfileError(f"profile {name}: not JSON-compliant ({exc}); nothing written") from None
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}@{version}.json"
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.link(tmp, path)  # fails if the version appeared meanwhile: never overwrite a release
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


_CACHE: dict[tuple[str, str], AggregationProfile] = {}


def load_aggregation_profile(path: str | Path, *, sha256: str | None = None) -> AggregationProfile:
    """Read and validate a profile file; `sha256` pins its exact bytes."""
    p = Path(path)
    m = _FILE_RE.fullmatch(p.name)
    if m is None:
        raise AggregationProfileError(f"aggregation profile {p}: the file must be named <name>@<version>.json")
    try:
        data = p.read_bytes()
    except OSError as err:
        raise AggregationProfileError(f"aggregation profile {p}: cannot read ({err.strerror})") from None
    digest = hashlib.sha256(data).hexdigest()
    if sha256 is not None and sha256 != digest:
        raise AggregationProfileError(f"aggregation profile {p}: sha256 is {digest}, but the config pins {sha256}")
    key = (str(p.resolve()), digest)
    if key in _CACHE:
        return _CACHE[key]

    def fail(field: str, msg: str) -> AggregationProfileError:
        return AggregationProfileError(f"aggregation profile {p}: {field}: {msg}")

    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise AggregationProfileError(f"aggregation profile {p}: not valid JSON ({err})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise fail("format", f"expected {FORMAT!r}")
    if doc.get("format_version") != FORMAT_VERSION:
        raise fail("format_version", f"expected {FORMAT_VERSION}, got {doc.get('format_version')!r}")
    if doc.get("name") != m.group("name") or doc.get("version") != int(m.group("version")):
        raise fail("name/version", f"{doc.get('name')!r}@{doc.get('version')!r} does not match the file name")
    kind = doc.get("kind")
    if kind not in PROFILE_KINDS:
        raise fail("kind", f"must be one of {list(PROFILE_KINDS)}, got {kind!r}")
    weights = doc.get("weights")
    if not isinstance(weights, dict) or not weights or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v) and v >= 0 for k, v in weights.items()):
        raise fail("weights", "must be a non-empty object name -> finite number >= 0")
    if not any(v > 0 for v in weights.values()):
        raise fail("weights", "needs at least one positive weight")
    na_policy = doc.get("na_policy")
    if na_policy not in ("skip", "value", "invalidate"):
        raise fail("na_policy", f"must be skip, value or invalidate, got {na_policy!r}")
    na_value = doc.get("na_value")
    if na_policy == "value" and not isinstance(na_value, (int, float)):
        raise fail("na_value", "a number is required with na_policy = 'value'")
    tie = doc.get("tie_threshold", 0.0)
    if not isinstance(tie, (int, float)) or tie < 0:
        raise fail("tie_threshold", f"must be a number >= 0, got {tie!r}")
    created = doc.get("created_from")
    if not isinstance(created, dict):
        raise fail("created_from", "must be an object")
    profile = AggregationProfile(
        name=doc["name"], version=doc["version"], kind=kind,
        weights={k: float(v) for k, v in weights.items()}, na_policy=na_policy,
        na_value=float(na_value) if na_value is not None else None, tie_threshold=float(tie),
        created_from=created, path=p, sha256=digest, body=doc)
    _CACHE[key] = profile
    return profile
