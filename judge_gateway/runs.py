"""The run folder `judge-gateway score` writes and `browse` / `eval` read.

    RUN_DIR/scores.jsonl   one line per sample: index, source, key, prompt, image|video (a path
                           relative to the run's input root), model/checkpoint when given, and
                           the sample's result (scores per judge, reward, valid, ...)
    RUN_DIR/summary.json   counts: samples, valid, invalid by error code, per-judge means; the
                           combined mean is over valid samples only (invalid ones that got a
                           reward through combine.on_invalid = skip / fill: `invalid_with_reward`)
    RUN_DIR/run.json       what produced it: input, media folders, judges with their models,
                           kinds and weights, config sha256, template hashes

Every file is replaced whole (a temporary file and a rename), except that scores.jsonl is
appended to while a run scores, so a kill loses at most a torn last line.

A line with `request_error` (its request failed as a whole) or with a judge's transient error
(timeout, backend unavailable or failing) is not done: a resumed run scores it again. Every
other line is done, valid or not.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from .schema import TRANSIENT_ERRORS

SCORES_FILE = "scores.jsonl"
SUMMARY_FILE = "summary.json"
RUN_FILE = "run.json"


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename, so a reader or a kill
    mid-write never sees half a file (the old one stays until the new one is whole)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def media_roots(paths: list[Path]) -> list[str]:
    """The folders holding the given media files, none inside another: what `browse` may serve."""
    folders = sorted({p.resolve().parent for p in paths})
    kept: list[Path] = []
    for folder in folders:
        if not any(folder.is_relative_to(k) for k in kept):
            kept.append(folder)
    return [str(k) for k in kept]


def config_sha256(doc: dict[str, Any]) -> str:
    """sha256 of a config's canonical JSON (key order and TOML formatting do not count)."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def read_lines(run_dir: Path) -> list[dict[str, Any]]:
    """The scores.jsonl lines; a torn last line (the run was killed mid-write) is dropped."""
    path = run_dir / SCORES_FILE
    if not path.exists():
        return []
    lines = []
    for text in path.read_text(encoding="utf-8").splitlines():
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            lines.append(obj)
    return lines


def read_run_info(run_dir: Path) -> dict[str, Any]:
    path = run_dir / RUN_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


# Faults of the moment: a resumed run scores such a sample again.
TRANSIENT_CODES = frozenset(code.value for code in TRANSIENT_ERRORS)


def is_done(line: dict[str, Any]) -> bool:
    """Scored for good: no request error and no judge failed for a transient reason."""
    if "request_error" in line:
        return False
    return not any(not s.get("valid") and (s.get("error") or {}).get("code") in TRANSIENT_CODES
                   for s in (line.get("scores") or {}).values())


def sample_error_codes(line: dict[str, Any]) -> list[str]:
    """The error codes that make a sample invalid: its own (bad media) and its judges'."""
    if "request_error" in line:
        return ["request_error"]
    codes = []
    if isinstance(line.get("error"), dict):
        codes.append(str(line["error"].get("code")))
    for score in (line.get("scores") or {}).values():
        if not score.get("valid") and isinstance(score.get("error"), dict):
            codes.append(str(score["error"].get("code")))
    return codes


def summarize(lines: list[dict[str, Any]], judges: list[str]) -> dict[str, Any]:
    """summary.json: what a reader checks first (how many, how many invalid and why, means)."""
    invalid = [line for line in lines if not line.get("valid")]
    by_code: Counter[str] = Counter()
    for line in invalid:
        by_code.update(set(sample_error_codes(line)))
    per_judge: dict[str, Any] = {}
    for name in judges:
        scores = [line["scores"][name] for line in lines if name in (line.get("scores") or {})]
        valid = [s["reward"] for s in scores if s.get("valid") and s.get("reward") is not None]
        codes = Counter(s["error"]["code"] for s in scores if not s.get("valid") and s.get("error"))
        per_judge[name] = {
            "scored": len(scores), "valid": len(valid), "invalid": len(scores) - len(valid),
            "invalid_by_code": dict(codes.most_common()),
            "mean_reward": statistics.fmean(valid) if valid else None,
        }
    # combine.on_invalid = skip / fill gives an invalid sample a combined reward: it is reported
    # on its own, never averaged with the valid ones.
    combined = [line["reward"] for line in lines if line.get("valid") and line.get("reward") is not None]
    rewarded_invalid = [line["reward"] for line in invalid if line.get("reward") is not None]
    # Samples no judge scored (their media failed validation, their request failed): they count
    # in no judge's row, so they are reported on their own.
    unscored = [line for line in lines if not line.get("scores")]
    unscored_codes = Counter(code for line in unscored for code in set(sample_error_codes(line)))
    return {
        "samples": len(lines),
        "valid": len(lines) - len(invalid),
        "invalid": len(invalid),
        "invalid_by_code": dict(by_code.most_common()),
        "unscored": {"samples": len(unscored), "by_code": dict(unscored_codes.most_common())},
        "mean_reward": statistics.fmean(combined) if combined else None,
        "invalid_with_reward": {"samples": len(rewarded_invalid),
                                "mean_reward": statistics.fmean(rewarded_invalid) if rewarded_invalid else None},
        "judges": per_judge,
    }
