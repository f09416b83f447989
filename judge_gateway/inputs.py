"""Samples on disk: the JSONL / folder readers of `score` (read_jsonl, read_folder, read_inputs),
and what `score`, `eval` (binary labels) and `tune` / `prompts compare` (preference pairs) share:
`InputItem`, `resolve_path`, `sample_key` and the image / video suffixes (eval and tune read their
own files).

A sample is an `InputItem` (its media loaded only when its batch is sent); `sample_key` is the
sha256 of what a judge sees, so resumed runs and score caches survive moved files."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .jsonl import iter_objects

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp"}
VIDEO_SUFFIXES = {".mp4", ".webm", ".mkv", ".mov", ".avi"}


@dataclass
class InputItem:
    """One sample to score, as found on disk (media loaded only when its batch is sent)."""

    source: str
    prompt: str
    image: Path | None = None
    video: Path | None = None
    fps: float | None = None
    condition_images: list[Path] = field(default_factory=list)
    group_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    # Which generator made the sample (for `browse`'s model / checkpoint ranking); not sent.
    origin: dict[str, str] = field(default_factory=dict)

    def to_sample(self, default_fps: float | None) -> dict[str, Any]:
        sample: dict[str, Any] = {"prompt": self.prompt}
        if self.image is not None:
            sample["image"] = self.image.read_bytes()
        if self.video is not None:
            sample["video"] = _load_video(self.video, self.fps or default_fps)
        if self.condition_images:
            sample["condition_images"] = [p.read_bytes() for p in self.condition_images]
        if self.group_id is not None:
            sample["group_id"] = self.group_id
        if self.metadata:
            sample["metadata"] = self.metadata
        return sample


def _load_video(path: Path, fps: float | None) -> dict[str, Any]:
    if path.is_dir():
        frames = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if fps is None:
            raise ValueError(f"{path}: a folder of frames needs an fps (in the JSONL line or --fps)")
        return {"frames": [p.read_bytes() for p in frames], "fps": fps}
    video: dict[str, Any] = {"mp4": path.read_bytes()}
    if fps is not None:
        video["fps"] = fps
    return video


def resolve_path(base: Path, value: Any, where: str, error: type[Exception] = ValueError) -> Path:
    """A path from an input line, relative to the file it came from; it must exist."""
    if not isinstance(value, str) or not value:
        raise error(f"{where}: expected a file path string, got {value!r}")
    p = Path(value)
    p = p if p.is_absolute() else base / p
    if not p.exists():
        raise error(f"{where}: {p} does not exist")
    return p


KNOWN_KEYS = {"id", "prompt", "image", "video", "fps", "condition_images", "group_id", "metadata", "model",
              "checkpoint"}


def read_jsonl(path: Path) -> list[InputItem]:
    items = []
    base = path.parent
    for _, where, obj in iter_objects(path, ValueError, KNOWN_KEYS):
        if "image" not in obj and "video" not in obj:
            raise ValueError(f"{where}: needs an `image` or a `video` path")
        items.append(InputItem(
            source=str(obj.get("id", where)),
            prompt=str(obj.get("prompt", "")),
            image=resolve_path(base, obj["image"], f"{where}: image") if "image" in obj else None,
            video=resolve_path(base, obj["video"], f"{where}: video") if "video" in obj else None,
            fps=obj.get("fps"),
            condition_images=[resolve_path(base, c, f"{where}: condition_images")
                              for c in obj.get("condition_images", [])],
            group_id=obj.get("group_id"),
            metadata=obj.get("metadata", {}),
            origin={k: str(obj[k]) for k in ("model", "checkpoint") if obj.get(k) is not None},
        ))
    return items


def read_folder(path: Path) -> list[InputItem]:
    """Every image/video file in the folder; its prompt from a same-named .txt beside it."""
    items = []
    for p in sorted(path.iterdir()):
        suffix = p.suffix.lower()
        if suffix not in IMAGE_SUFFIXES | VIDEO_SUFFIXES:
            continue
        caption = p.with_suffix(".txt")
        prompt = caption.read_text(encoding="utf-8").strip() if caption.exists() else ""
        kind = "image" if suffix in IMAGE_SUFFIXES else "video"
        items.append(InputItem(source=p.name, prompt=prompt, **{kind: p}))
    if not items:
        raise ValueError(f"{path}: no image or video files")
    return items


def read_inputs(path: Path) -> list[InputItem]:
    if path.is_dir():
        return read_folder(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    return read_jsonl(path)


def _file_digest(path: Path, h: Any) -> None:
    if path.is_dir():
        frames = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        h.update(f"frames:{len(frames)}\0".encode())
        for frame in frames:
            h.update(hashlib.sha256(frame.read_bytes()).digest())
    else:
        h.update(hashlib.sha256(path.read_bytes()).digest())


def sample_key(item: InputItem) -> str:
    """sha256 of what a judge sees: the prompt, the media bytes, fps, condition images."""
    h = hashlib.sha256()
    h.update(b"prompt\0" + item.prompt.encode("utf-8") + b"\0")
    for kind, path in (("image", item.image), ("video", item.video)):
        if path is not None:
            h.update(kind.encode() + b"\0")
            _file_digest(path, h)
    if item.fps is not None:
        h.update(f"fps:{item.fps!r}\0".encode())
    for cond in item.condition_images:
        h.update(b"condition\0")
        _file_digest(cond, h)
    return h.hexdigest()
