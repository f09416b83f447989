"""The run folder: `judge-gateway score` writes and resumes it, the watch's recorder writes the
same layout (watch/record.py), `browse` and `eval` read it. `RunFolder` is the folder (its files,
reading, atomic rewrites, appends, the resume rule); `ScoreLine` is one scores.jsonl line.

    RUN_DIR/scores.jsonl   one line per sample: index, source, key, prompt, image|video (a path
                           relative to the run's input root), model/checkpoint when given, and
                           the sample's result (scores per judge, reward, valid, ...)
    RUN_DIR/summary.json   counts: samples, valid, invalid by error code, per-judge means; the
                           combined mean is over valid samples only (invalid ones that got a
                           reward through combine.on_invalid = skip / fill: `invalid_with_reward`)
    RUN_DIR/run.json       what produced it: input, media folders, judges with their models,
                           kinds and weights, config sha256, template hashes

A line holds the fields `ScoreLine` declares and any others as they were written (a run's
origin such as `model` / `checkpoint`, the result's `invalid_judges` and `group_reward`, the
watch's `run`, `step`, `window`, `watch`): a line is read and written back with all of them.
Every file is replaced whole (a temporary file and a rename), except that scores.jsonl is
appended to while a run scores, so a kill loses at most a torn last line.

A line with `request_error` (its request failed as a whole) or with a judge's transient error
(timeout, backend unavailable or failing) is not done: a resumed run scores it again. Every
other line is done, valid or not. A sample is known across runs by its content key and how many
earlier samples of the input had the same key, so a moved or re-ordered input still resumes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from .schema import TRANSIENT_ERRORS

SCORES_FILE = "scores.jsonl"
SUMMARY_FILE = "summary.json"
RUN_FILE = "run.json"
# A scores file the watch rotated out when it grew past watch.max_file_bytes.
ROTATED_SCORES = re.compile(r"^scores\.(\d+)\.jsonl$")

# Faults of the moment: a resumed run scores such a sample again.
TRANSIENT_CODES = frozenset(code.value for code in TRANSIENT_ERRORS)

# What must match for a resumed run's old lines to belong with its new ones.
IDENTITY_FIELDS = ("judges", "config_sha256", "templates", "models", "kinds", "weights")


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


def _error_codes(request_error: bool, error: Any, scores: Mapping[str, Any]) -> list[str]:
    if request_error:
        return ["request_error"]
    codes = []
    if isinstance(error, dict):
        codes.append(str(error.get("code")))
    for score in scores.values():
        if not score.get("valid") and isinstance(score.get("error"), dict):
            codes.append(str(score["error"].get("code")))
    return codes


def sample_error_codes(line: Mapping[str, Any]) -> list[str]:
    """The error codes that make a sample invalid: its own (bad media) and its judges'. On a line
    as a mapping (browse reads its normalised lines); `ScoreLine.error_codes` is the same rule."""
    return _error_codes("request_error" in line, line.get("error"), line.get("scores") or {})


class ScoreLine(BaseModel):
    """One scores.jsonl line: a sample (its place in the input, content key, prompt, media paths
    relative to the input root) and its result. Fields not declared here are kept as written
    (`extra = allow`); `to_json` writes only the fields the line was given, so a line read and
    written back has the same keys and values."""

    model_config = ConfigDict(extra="allow")

    index: int
    source: str = ""
    key: str = ""
    prompt: str = ""
    image: str | None = None  # relative to the run's input root (score) or the run folder (watch thumbnails)
    video: str | None = None
    model: str | None = None  # the generator that made the sample, when the input names it
    checkpoint: str | None = None
    group_id: str | None = None
    scores: dict[str, dict[str, Any]] = {}  # judge -> its score (schema.JudgeScore as JSON)
    reward: float | None = None
    valid: bool = False
    error: dict[str, Any] | None = None  # the sample's own fault (bad_input): no judge scored it
    request_error: str | None = None  # its request failed as a whole: scored again on resume

    @classmethod
    def parse(cls, obj: Any) -> ScoreLine | None:
        """A line from its decoded JSON; None for one that is not a line (no integer index ...)."""
        if not isinstance(obj, dict):
            return None
        try:
            return cls.model_validate(obj)
        except ValidationError:
            return None

    def to_json(self) -> str:
        """The line as written: the fields it was given, json.dumps's default separators (browse's
        watch page finds a line by its `"index": N`)."""
        return json.dumps(self.model_dump(exclude_unset=True))

    def with_fields(self, **fields: Any) -> ScoreLine:
        """This line with `fields` set over it (a sample's result over its sample fields; a resumed
        sample's scores under the current input's numbering, file name and prompt)."""
        return ScoreLine.model_validate({**self.model_dump(exclude_unset=True), **fields})

    @property
    def done(self) -> bool:
        """Scored for good: no request error and no judge failed for a transient reason."""
        if "request_error" in self.model_fields_set:
            return False
        return not any(not s.get("valid") and (s.get("error") or {}).get("code") in TRANSIENT_CODES
                       for s in self.scores.values())

    def error_codes(self) -> list[str]:
        """The error codes that make the sample invalid: its own (bad media) and its judges'."""
        return _error_codes("request_error" in self.model_fields_set, self.error, self.scores)


def occurrences(keys: Iterable[str]) -> list[tuple[str, int]]:
    """(content key, how many earlier samples had it): a sample's identity across runs, so two
    identical files are two samples and a moved or re-ordered input still resumes."""
    seen: Counter[str] = Counter()
    out = []
    for key in keys:
        out.append((key, seen[key]))
        seen[key] += 1
    return out


@dataclass
class Resumed:
    """What a resumed run keeps of a folder's lines and what it still has to score."""

    kept: list[ScoreLine]  # done lines of samples still in the input, renumbered as the input is now
    todo: list[int]  # positions in the input of the samples to score
    gone: int  # lines of samples no longer in the input, dropped
    unreadable: int  # lines that are not score lines (hand-edited, foreign), dropped and scored again


class RunFolder:
    """One run folder on disk. Reads never fail on a torn last line (a run killed mid-write):
    it is dropped. Blocking file I/O throughout."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def scores_file(self) -> Path:
        return self.path / SCORES_FILE

    @property
    def info_file(self) -> Path:
        return self.path / RUN_FILE

    @property
    def summary_file(self) -> Path:
        return self.path / SUMMARY_FILE

    def rotated_scores(self) -> list[tuple[int, Path]]:
        """The watch's rotated scores files (scores.N.jsonl), oldest first."""
        if not self.path.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.path.iterdir() if (m := ROTATED_SCORES.match(p.name))]
        return sorted(found)

    # ---- reading -----------------------------------------------------------------------------

    def read_info(self) -> dict[str, Any]:
        """run.json, or {} when there is none."""
        return json.loads(self.info_file.read_text(encoding="utf-8")) if self.info_file.exists() else {}

    def read_objects(self) -> list[dict[str, Any]]:
        """The JSON objects of scores.jsonl as written (browse normalises them for hand-edited
        files); a torn or non-object line is dropped."""
        if not self.scores_file.exists():
            return []
        objects = []
        for text in self.scores_file.read_text(encoding="utf-8").splitlines():
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                objects.append(obj)
        return objects

    def read_lines(self) -> tuple[list[ScoreLine], int]:
        """The score lines of scores.jsonl, and how many objects in it are not score lines."""
        objects = self.read_objects()
        lines = [line for obj in objects if (line := ScoreLine.parse(obj)) is not None]
        return lines, len(objects) - len(lines)

    # ---- writing -----------------------------------------------------------------------------

    def write_info(self, info: dict[str, Any]) -> None:
        write_atomic(self.info_file, json.dumps(info, indent=2) + "\n")

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_atomic(self.summary_file, json.dumps(summary, indent=2) + "\n")

    def write_lines(self, lines: Iterable[ScoreLine]) -> None:
        """Replace scores.jsonl whole (a failure half-way leaves the old file)."""
        write_atomic(self.scores_file, "".join(line.to_json() + "\n" for line in lines))

    def open_for_append(self) -> IO[str]:
        return open(self.scores_file, "a", encoding="utf-8")

    @staticmethod
    def append_to(out: IO[str], lines: Iterable[ScoreLine], *, sync: bool = False) -> None:
        """Append whole lines and flush them (`sync`: to the disk too)."""
        out.writelines(line.to_json() + "\n" for line in lines)
        out.flush()
        if sync:
            os.fsync(out.fileno())

    # ---- resuming ----------------------------------------------------------------------------

    def check_identity(self, identity: dict[str, Any]) -> None:
        """Refuse to mix: a folder scored with other judges, config, templates, models, kinds or
        weights (IDENTITY_FIELDS of its run.json) is not resumed with these."""
        before = self.read_info()
        for field in IDENTITY_FIELDS:
            if field in before and before[field] != identity[field]:
                raise ValueError(f"{self.path} was scored with other {field} ({before[field]!r}, now "
                                 f"{identity[field]!r}); score into a new folder")

    def resume(self, samples: list[ScoreLine]) -> Resumed:
        """Match the folder's done lines to the input's samples (each given as its line's sample
        fields: index, source, key, prompt, media) by content key and occurrence."""
        position = {ident: i for i, ident in enumerate(occurrences(s.key for s in samples))}
        before, unreadable = self.read_lines()
        before.sort(key=lambda line: line.index)
        kept, done, gone = [], set(), 0
        for line, ident in zip(before, occurrences(line.key for line in before)):
            if ident not in position:
                gone += 1
            elif line.done:
                kept.append(line.with_fields(**samples[position[ident]].model_dump(exclude_unset=True)))
                done.add(position[ident])
        return Resumed(kept, [i for i in range(len(samples)) if i not in done], gone, unreadable)


def summarize(lines: list[ScoreLine], judges: list[str]) -> dict[str, Any]:
    """summary.json: what a reader checks first (how many, how many invalid and why, means)."""
    invalid = [line for line in lines if not line.valid]
    by_code: Counter[str] = Counter()
    for line in invalid:
        by_code.update(set(line.error_codes()))
    per_judge: dict[str, Any] = {}
    for name in judges:
        scores = [line.scores[name] for line in lines if name in line.scores]
        valid = [s["reward"] for s in scores if s.get("valid") and s.get("reward") is not None]
        codes = Counter(s["error"]["code"] for s in scores if not s.get("valid") and s.get("error"))
        per_judge[name] = {
            "scored": len(scores), "valid": len(valid), "invalid": len(scores) - len(valid),
            "invalid_by_code": dict(codes.most_common()),
            "mean_reward": statistics.fmean(valid) if valid else None,
        }
    # combine.on_invalid = skip / fill gives an invalid sample a combined reward: it is reported
    # on its own, never averaged with the valid ones.
    combined = [line.reward for line in lines if line.valid and line.reward is not None]
    rewarded_invalid = [line.reward for line in invalid if line.reward is not None]
    # Samples no judge scored (their media failed validation, their request failed): they count
    # in no judge's row, so they are reported on their own.
    unscored = [line for line in lines if not line.scores]
    unscored_codes = Counter(code for line in unscored for code in set(line.error_codes()))
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
