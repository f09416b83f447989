"""Samples on disk: the JSONL / folder readers of `score` (read_jsonl, read_folder, read_inputs),
and what `score`, `eval` (binary labels) and `tune` / `prompts compare` (preference pairs) share:
`InputItem`, `resolve_path`, `sample_key` and the image / video suffixes (eval and tune read their
own files).

A sample is an `InputItem` (its media loaded only when its batch is sent); `sample_key` is the
sha256 of what a judge sees, so resumed runs and score caches survive moved files."""

from __future__ import annotations

import hashlib
import mimetypes
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .jsonl import iter_objects

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".gif"}
VIDEO_SUFFIXES = {".mp4", ".webm", ".mkv", ".mov", ".avi"}
# A GIF is read here and sent as what the service takes: a still one as a PNG image, an
# animated one (in a folder, or given as `video`) as its frames with the fps of their durations.
GIF_SUFFIX = ".gif"
# Browsers show a GIF frame of 0-10 ms for 100 ms; so is it read here.
GIF_MIN_FRAME_MS = 20
GIF_DEFAULT_FRAME_MS = 100


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
            sample["image"] = _load_image(self.image)
        if self.video is not None:
            sample["video"] = _load_video(self.video, self.fps or default_fps)
        if self.condition_images:
            sample["condition_images"] = [p.read_bytes() for p in self.condition_images]
        if self.group_id is not None:
            sample["group_id"] = self.group_id
        if self.metadata:
            sample["metadata"] = self.metadata
        return sample


def _load_image(path: Path) -> bytes:
    if path.suffix.lower() != GIF_SUFFIX:
        return path.read_bytes()
    if is_animated_gif(path):
        raise ValueError(f"{path.name} is an animated GIF: give it as a `video`")
    return _gif_frames(path, max_frames=1)[0][0]


def _gif_frames(path: Path, max_frames: int) -> tuple[list[bytes], float]:
    """A GIF's frames as PNG bytes (at most `max_frames`, else ValueError) and their fps."""
    import io

    from PIL import Image, ImageSequence

    frames, durations = [], []
    try:
        with Image.open(path) as gif:
            for frame in ImageSequence.Iterator(gif):
                if len(frames) == max_frames:
                    raise ValueError(f"{path.name}: more than {max_frames} GIF frames")
                buf = io.BytesIO()
                frame.convert("RGB").save(buf, format="PNG", compress_level=1)
                frames.append(buf.getvalue())
                ms = frame.info.get("duration") or GIF_DEFAULT_FRAME_MS
                durations.append(ms if ms >= GIF_MIN_FRAME_MS else GIF_DEFAULT_FRAME_MS)
    except (OSError, Image.DecompressionBombError, SyntaxError) as exc:
        raise ValueError(f"{path.name}: not a readable GIF ({exc})") from None
    return frames, 1000.0 * len(durations) / sum(durations)


def is_animated_gif(path: Path) -> bool:
    """Whether a .gif file holds more than one frame (an unreadable one counts as a still:
    reading it as that sample's image reports why it is unreadable)."""
    from PIL import Image

    try:
        with Image.open(path) as gif:
            return bool(getattr(gif, "is_animated", False))
    except (OSError, SyntaxError):
        return False


def _load_video(path: Path, fps: float | None) -> dict[str, Any]:
    if path.is_dir():
        frames = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if fps is None:
            raise ValueError(f"{path}: a folder of frames needs an fps (in the JSONL line or --fps)")
        return {"frames": [p.read_bytes() for p in frames], "fps": fps}
    if path.suffix.lower() == GIF_SUFFIX:
        from .media import MAX_VIDEO_FRAMES

        frames, gif_fps = _gif_frames(path, MAX_VIDEO_FRAMES)
        return {"frames": frames, "fps": fps or gif_fps}
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


@dataclass
class FolderScan:
    """What `read_folder` found: the samples, the media files it cannot score (by name), and the
    samples with no prompt file beside them (scored with an empty prompt)."""

    items: list[InputItem]
    unsupported: list[str] = field(default_factory=list)
    no_prompt: list[str] = field(default_factory=list)


def _looks_like_media(p: Path) -> bool:
    kind = (mimetypes.guess_type(p.name)[0] or "").split("/")[0]
    return kind in ("image", "video")


def read_folder(path: Path) -> FolderScan:
    """Every image/video file in the folder; its prompt from a same-named .txt beside it. An
    animated GIF is a video, a still one an image."""
    scan = FolderScan(items=[])
    for p in sorted(path.iterdir()):
        suffix = p.suffix.lower()
        if suffix not in IMAGE_SUFFIXES | VIDEO_SUFFIXES:
            if p.is_file() and _looks_like_media(p):
                scan.unsupported.append(p.name)
            continue
        caption = p.with_suffix(".txt")
        if caption.exists():
            prompt = caption.read_text(encoding="utf-8").strip()
        else:
            prompt = ""
            scan.no_prompt.append(p.name)
        video = suffix in VIDEO_SUFFIXES or (suffix == GIF_SUFFIX and is_animated_gif(p))
        scan.items.append(InputItem(source=p.name, prompt=prompt, **{"video" if video else "image": p}))
    if not scan.items:
        found = f" (found only {', '.join(scan.unsupported[:5])}: not formats it reads)" if scan.unsupported else ""
        raise ValueError(f"{path}: no image or video files{found}; it reads {_formats()}")
    return scan


def _formats() -> str:
    return (f"images {', '.join(sorted(IMAGE_SUFFIXES))} and videos {', '.join(sorted(VIDEO_SUFFIXES))}")


def read_inputs(path: Path) -> FolderScan:
    """The samples of a folder (see read_folder) or a JSONL file."""
    if path.is_dir():
        return read_folder(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    return FolderScan(items=read_jsonl(path))


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
