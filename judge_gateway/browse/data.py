"""Scored run folders as the browser sees them, and the only way it finds a file to serve."""

from __future__ import annotations

import math
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
    roots: list[Path] = field(default_factory=list)

    def sample(self, index: int) -> dict[str, Any] | None:
        return self._by_index.get(index)

    def __post_init__(self) -> None:
        self._by_index = {int(line.get("index", n)): line for n, line in enumerate(self.lines)}

    def resolve(self, relative: str) -> Path | None:
        """The file `relative` names, only if it lies inside one of the run's roots (the run
        folder and the input folder it scored); anything else (`..`, absolute paths elsewhere,
        links out) is None."""
        if not isinstance(relative, str) or not relative or "\x00" in relative:
            return None
        candidate = Path(relative)
        bases = [candidate] if candidate.is_absolute() else [root / candidate for root in self.roots]
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
    if not (path / runs.SCORES_FILE).exists():
        raise ValueError(f"{path}: no {runs.SCORES_FILE} (write one with `judge-gateway score ... -o {path}`)")
    info = runs.read_run_info(path)
    lines = runs.read_lines(path)
    judges = list(info.get("judges") or [])
    for line in lines:
        for judge in line.get("scores") or {}:
            if judge not in judges:
                judges.append(judge)
    roots = [path.resolve()]
    if info.get("input_root"):
        input_root = Path(info["input_root"])
        if input_root.is_dir():
            roots.append(input_root.resolve())
    return Run(name=name or path.resolve().name, path=path.resolve(), info=info, lines=lines, judges=judges,
               roots=roots)


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


def judge_frames(score: dict[str, Any]) -> list[int]:
    """The source frame indices the judge saw, rebuilt from details.video (first, step, count)."""
    video = (score.get("details") or {}).get("video")
    if not isinstance(video, dict):
        return []
    first, step, n = video.get("frame_first"), video.get("frame_step"), video.get("num_frames")
    if not isinstance(first, int) or not isinstance(n, int) or n < 1:
        return []
    if n == 1 or not isinstance(step, (int, float)):
        return [first]
    return [round(first + k * step) for k in range(n)]


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
