"""A watched run's record: a run folder as `judge-gateway score` writes it (runs.RunFolder, its
lines runs.ScoreLine), so `browse` opens it, plus what only the watch has.

    FOLDER/RUN/run.json        the run, its training judges and shadows, the config's hash
    FOLDER/RUN/scores.jsonl    one line per watched sample: both the training judges' and the
                               shadows' scores, run, step, window, gap; `image` names its thumbnail
                               when it has one. Past watch.max_file_bytes it is renamed
                               scores.N.jsonl (N = 1, 2, ...) and a new one begun; watch.keep_files
                               bounds how many rotated files stay (0: all).
    FOLDER/RUN/thumbs/N.jpg    thumbnails of the samples where training and shadow disagree most
    FOLDER/RUN/watch.json      the run's report (windows, alarms, disagreements), as GET /v1/watch

Bounded on disk: when a run's record is opened, the run folders under FOLDER beyond
watch.max_run_folders (the least recently written first) and those not written for
watch.max_run_age_days are removed, except the ones a gateway process is writing (their
`.writer` lock is held): a client that names a new run per request cannot fill the disk.

A window's lines are written when it is sealed, with its thumbnails; a later start of the gateway
with the same run appends after the last line's index. One process writes a folder (it holds a
lock on FOLDER/RUN/.writer); another process watching the same run (a second gateway replica on
the same file system) writes FOLDER/RUN@HOST-PID instead. Every method does blocking file I/O:
the watch calls them in a worker thread.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from ..runs import RunFolder, ScoreLine, write_atomic
from .report import RunReport

log = logging.getLogger(__name__)

THUMBS = "thumbs"
WATCH_FILE = "watch.json"
INFO_FILE = "run.json"


def folder_name(run: str) -> str:
    """A folder name for a run name: itself when it is plain ([A-Za-z0-9_.-], not starting with a
    dot), else its plain characters and a hash of the whole name (two names never share a folder)."""
    plain = re.sub(r"[^A-Za-z0-9_.-]", "_", run)
    if plain == run and not run.startswith("."):
        return run
    return f"{plain.lstrip('.')[:64] or 'run'}-{hashlib.sha256(run.encode()).hexdigest()[:10]}"


def thumbnail_name(index: int) -> str:
    return f"{THUMBS}/{index:08d}.jpg"


def _last_index(path: Path) -> int | None:
    """The `index` of the last whole line of a scores file (read from its end)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - (1 << 16)))
            tail = f.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for text in reversed(tail):
        try:
            index = json.loads(text).get("index")
        except (json.JSONDecodeError, AttributeError):
            continue
        if isinstance(index, int):  # any line holding an index: the next one never repeats it
            return index
    return None


def _claim(folder: Path) -> int | None:
    """An open descriptor holding the folder's writer lock, or None when another process holds it."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / ".writer", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _last_written(folder: Path) -> float | None:
    """When a run folder was last written (its scores or run.json), or None if it is no run folder."""
    times = []
    for name in (INFO_FILE, "scores.jsonl", WATCH_FILE):
        try:
            times.append((folder / name).stat().st_mtime)
        except OSError:
            pass
    return max(times) if times else None


def prune_runs(root: Path, *, keep: int, max_age_s: float, now: float | None = None) -> list[str]:
    """Remove the run folders under `root` beyond the `keep` most recently written and those not
    written for `max_age_s` (0: no such bound), skipping any whose writer lock another record
    holds. The names removed."""
    if not keep and not max_age_s:
        return []
    now = time.time() if now is None else now
    try:
        entries = [(t, p) for p in root.iterdir() if p.is_dir() and (t := _last_written(p)) is not None]
    except OSError:
        return []
    entries.sort(key=lambda e: e[0], reverse=True)  # newest first
    removed = []
    for rank, (written, folder) in enumerate(entries):
        if not ((keep and rank >= keep) or (max_age_s and now - written > max_age_s)):
            continue
        lock = _claim(folder)
        if lock is None:  # being written (this process's other runs, or another process's)
            continue
        try:
            shutil.rmtree(folder, ignore_errors=True)
        finally:
            os.close(lock)
        removed.append(folder.name)
    if removed:
        log.warning("watch: removed %d run folder(s) under %s (watch.max_run_folders = %d, watch.max_run_age_days "
                    "= %g): %s", len(removed), root, keep, max_age_s / 86400, ", ".join(removed[:10]))
    return removed


class RunRecord:
    def __init__(self, root: Path, run: str, info: dict[str, Any], *, max_file_bytes: int, keep_files: int,
                 max_run_folders: int = 0, max_run_age_s: float = 0.0) -> None:
        self.folder = root / folder_name(run)
        self._lock = _claim(self.folder)
        if self._lock is None:  # another process writes that folder
            self.folder = root / folder_name(f"{run}@{socket.gethostname()}-{os.getpid()}")
            self._lock = _claim(self.folder)
        self.max_file_bytes = max_file_bytes
        self.keep_files = keep_files
        (self.folder / THUMBS).mkdir(parents=True, exist_ok=True)
        self.run_folder = RunFolder(self.folder)
        self.scores = self.run_folder.scores_file
        last = _last_index(self.scores)
        if last is None and self.run_folder.rotated_scores():
            last = _last_index(self.run_folder.rotated_scores()[-1][1])
        self.next_index = 0 if last is None else last + 1
        before = self.run_folder.read_info()
        judges = list(dict.fromkeys([*(before.get("judges") or []), *info["judges"]]))
        self.info = {**before, **info, "judges": judges, "started_at": before.get("started_at", time.time())}
        self.run_folder.write_info(self.info)
        # after run.json: this folder is the newest, and locked, so it is never its own victim
        prune_runs(root, keep=max_run_folders, max_age_s=max_run_age_s)

    def update_judges(self, judges: list[str]) -> None:
        merged = list(dict.fromkeys([*self.info["judges"], *judges]))
        if merged != self.info["judges"]:
            self.info["judges"] = merged
            self.run_folder.write_info(self.info)

    def thumbnail(self, index: int, data: bytes) -> str:
        """Write a thumbnail; its path relative to the run folder."""
        rel = thumbnail_name(index)
        (self.folder / rel).write_bytes(data)
        return rel

    def thumbnail_file(self, index: int) -> Path | None:
        path = self.folder / thumbnail_name(index)
        return path if path.is_file() else None

    def append(self, lines: list[ScoreLine]) -> None:
        """Append whole lines (flushed and synced), rotating the file first when it is full."""
        if not lines:
            return
        if self.scores.exists() and self.scores.stat().st_size >= self.max_file_bytes:
            self._rotate()
        with self.run_folder.open_for_append() as f:
            RunFolder.append_to(f, lines, sync=True)

    def _rotate(self) -> None:
        rotated = self.run_folder.rotated_scores()
        number = rotated[-1][0] + 1 if rotated else 1
        os.replace(self.scores, self.folder / f"scores.{number}.jsonl")
        if self.keep_files:
            for _, old in self.run_folder.rotated_scores()[:-self.keep_files]:
                old.unlink(missing_ok=True)

    def write_report(self, report: RunReport) -> None:
        write_atomic(self.folder / WATCH_FILE, report.model_dump_json(indent=1) + "\n")

    def close(self) -> None:
        """Let another process write the folder."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
