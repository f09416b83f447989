"""Scored run folders as the browser sees them, and the only way it finds a file to serve."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import runs


@dataclass
class Run:
    """One run folder: its lines, judges and the folders its files may be served from."""

    name: str
    path: Path
    info: dict[str, Any]
    lines: list[dict[str, Any]]
    judges: list[str]
    roots: list[Path] = field(default_factory=list)  # a served file must lie inside one of these
    bases: list[Path] = field(default_factory=list)  # what a relative media path is relative to
    skipped: int = 0  # lines of scores.jsonl too malformed to show

    def sample(self, index: int) -> dict[str, Any] | None:
        return self._by_index.get(index)

    def __post_init__(self) -> None:
        self._by_index = {int(line.get("index", n)): line for n, line in enumerate(self.lines)}

    def resolve(self, relative: str) -> Path | None:
        """The file `relative` names, only if it lies inside one of the run's roots (the run
        folder and the folders its media came from); anything else (`..`, absolute paths
        elsewhere, links out) is None."""
        if not isinstance(relative, str) or not relative or "\x00" in relative:
            return None
        candidate = Path(relative)
        bases = [candidate] if candidate.is_absolute() else [base / candidate for base in self.bases or self.roots]
        for base in bases:
            try:
                real = base.resolve(strict=True)
            except (OSError, RuntimeError):
                continue
            if real.is_file() and any(real.is_relative_to(root) for root in self.roots):
                return real
        return None


def load_run(path: Path, name: str | None = None) -> Run:
    if not path.is_dir():
        raise ValueError(f"{path}: not a folder")
    folder = runs.RunFolder(path)
    if not folder.scores_file.exists():
        raise ValueError(f"{path}: no {runs.SCORES_FILE} (write one with `judge-gateway score ... -o {path}`)")
    info = folder.read_info()
    if not isinstance(info, dict):
        info = {}
    # As written, not as runs.ScoreLine: a hand-edited or foreign line the model refuses is
    # still shown, with typed defaults for what it lacks (normalize_lines).
    raw = folder.read_objects()
    lines, problems = normalize_lines(raw)
    for problem in problems[:5]:
        print(f"warning: {folder.scores_file}: {problem}", file=sys.stderr)
    if len(problems) > 5:
        print(f"warning: ... and {len(problems) - 5} more", file=sys.stderr)
    judges = [j for j in info.get("judges") or [] if isinstance(j, str)]
    for line in lines:
        for judge in line["scores"]:
            if judge not in judges:
                judges.append(judge)
    here = path.resolve()
    input_root = _folder(info.get("input_root"))
    # Runs since media_roots was recorded serve only the folders their media came from; an older
    # run falls back to its input root (the JSONL's parent folder).
    media = [f for f in map(_folder, info.get("media_roots") or []) if f is not None]
    if "media_roots" not in info and input_root is not None:
        media = [input_root]
    return Run(name=name or here.name, path=here, info=info, lines=lines, judges=judges,
               roots=[here, *media], bases=[b for b in (here, input_root) if b is not None],
               skipped=len(raw) - len(lines))


def _folder(value: Any) -> Path | None:
    if not isinstance(value, str) or not value:
        return None
    folder = Path(value)
    return folder.resolve() if folder.is_dir() else None


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def _error(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        return {"code": "unknown", "message": _str(value)}
    return {**value, "code": _str(value.get("code")) or "unknown", "message": _str(value.get("message"))}


def _template(value: Any) -> dict[str, str] | None:
    if not isinstance(value, dict):
        return None
    return {**value, **{k: _str(value.get(k)) for k in ("id", "version", "sha256")}}


def _normalize_score(name: str, s: dict[str, Any]) -> dict[str, Any]:
    reward = _finite(s.get("reward"))
    valid = s.get("valid") is True and reward is not None
    error = _error(s.get("error"))
    if not valid and error is None:
        error = {"code": "unknown", "message": "marked invalid without an error" if s.get("valid") is not True
                 else "no numeric reward"}
    details = s.get("details")
    return {**s, "judge": _str(s.get("judge")) or name, "reward": reward, "valid": valid, "error": error,
            "details": details if isinstance(details, dict) else {}, "template": _template(s.get("template")),
            "model": s.get("model") if isinstance(s.get("model"), str) else None,
            "raw": s.get("raw") if isinstance(s.get("raw"), (int, float, str)) or s.get("raw") is None else None,
            "latency_ms": _finite(s.get("latency_ms")) or 0.0}


def normalize_lines(raw: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Every field the pages read, with its type (a hand-edited or foreign scores.jsonl must not
    give a 500): a line without a usable `index` (or a repeated one) is skipped, other missing
    or mistyped fields get typed defaults. Returns the lines and what was wrong with them."""
    lines, problems, seen = [], [], set()
    for n, line in enumerate(raw, 1):
        index = line.get("index")
        if isinstance(index, bool) or not isinstance(index, int):
            problems.append(f"line {n}: skipped, `index` is not an integer ({index!r})")
            continue
        if index in seen:
            problems.append(f"line {n}: skipped, index {index} repeats an earlier line")
            continue
        seen.add(index)
        scores = line.get("scores") if isinstance(line.get("scores"), dict) else {}
        bad_scores = [j for j, s in scores.items() if not isinstance(s, dict)]
        if bad_scores:
            problems.append(f"line {n}: dropped non-object score(s) of {', '.join(map(str, bad_scores))}")
        out = {**line, "index": index, "source": _str(line.get("source")), "prompt": _str(line.get("prompt")),
               "key": _str(line.get("key")), "reward": _finite(line.get("reward")), "valid": line.get("valid") is True,
               "error": _error(line.get("error")),
               "scores": {str(j): _normalize_score(str(j), s) for j, s in scores.items() if isinstance(s, dict)},
               "model": _str(line.get("model")), "checkpoint": _str(line.get("checkpoint"))}
        for kind in ("image", "video"):
            if not isinstance(out.get(kind), str) or not out[kind]:
                out.pop(kind, None)
        lines.append(out)
    return lines, problems


def load_runs(paths: list[str]) -> list[Run]:
    loaded: list[Run] = []
    for p in paths:
        run = load_run(Path(p))
        names = {r.name for r in loaded}
        if run.name in names:  # two folders of one name: tell them apart by position
            run.name = f"{run.name} ({len(loaded) + 1})"
        loaded.append(run)
    return loaded


def band_of(score: dict[str, Any]) -> str | None:
    band = (score.get("details") or {}).get("band")
    return band if isinstance(band, str) else None


def violations_of(score: dict[str, Any]) -> list[dict[str, Any]]:
    """A critic's violations, each with a seekable time when it has a valid one."""
    out = []
    for v in (score.get("details") or {}).get("violations") or []:
        if not isinstance(v, dict):
            continue
        t = v.get("t_s")
        seekable = isinstance(t, (int, float)) and math.isfinite(t) and t >= 0 and v.get("valid_time", True)
        out.append({"label": str(v.get("label", "")), "t_s": float(t) if seekable else None,
                    "raw_t": t, "valid_time": bool(v.get("valid_time", seekable))})
    return out


@dataclass(frozen=True)
class JudgeFrames:
    """The source frame indices a judge saw; `exact` when the score recorded the list itself
    (older runs recorded first/step/count only: the list rebuilt from them is approximate)."""

    indices: list[int]
    exact: bool

    def __bool__(self) -> bool:
        return bool(self.indices)


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, list) and value and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                                 for x in value):
        return value
    return None


def judge_frames(score: dict[str, Any]) -> JudgeFrames:
    """The frames a judge saw: details.video.frame_indices (a VLM judge) or details.frame_indices
    (a head), else rebuilt from details.video's first, step and count (approximate)."""
    details = score.get("details") or {}
    video = details.get("video") if isinstance(details.get("video"), dict) else {}
    exact = _int_list(video.get("frame_indices")) or _int_list(details.get("frame_indices"))
    if exact:
        return JudgeFrames(exact, exact=True)
    first, step, n = video.get("frame_first"), video.get("frame_step"), video.get("num_frames")
    if not isinstance(first, int) or not isinstance(n, int) or n < 1:
        return JudgeFrames([], exact=False)
    if n == 1 or not isinstance(step, (int, float)):
        return JudgeFrames([first], exact=False)
    return JudgeFrames([round(first + k * step) for k in range(n)], exact=False)


def sample_row(run: Run, line: dict[str, Any]) -> dict[str, Any]:
    """The fields of a grid row (also what the filters and sort keys read)."""
    codes = runs.sample_error_codes(line)
    scores = line.get("scores") or {}
    return {
        "index": int(line.get("index", 0)),
        "source": line.get("source", ""),
        "prompt": line.get("prompt", ""),
        "kind": "video" if line.get("video") else ("image" if line.get("image") else None),
        "valid": bool(line.get("valid")),
        "codes": sorted(set(codes)),
        "reward": line.get("reward"),
        "scores": {j: scores.get(j) for j in run.judges},
        "bands": sorted({b for s in scores.values() if (b := band_of(s))}),
        "model": line.get("model") or "",
        "checkpoint": line.get("checkpoint") or "",
    }
