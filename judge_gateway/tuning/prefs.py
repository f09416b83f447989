"""Human preference pairs (JSONL): a prompt, two samples, and which one people preferred.

One JSON object per line:

    {"id": "p0", "prompt": "a red bicycle", "a": "img/a0.png", "b": {"image": "img/b0.png"},
     "label": "a"}

- `a`, `b`: a media path (image by suffix, video file, or a folder of frames) or an object
  `{"image": path}` / `{"video": path, "fps": F}`; relative paths are relative to the file.
- `condition_images`: paths shared by both samples (the source image of an edit).
- `label`: `a`, `b` or `tie`; omitted or null for an unlabelled pair (`prompts compare` uses
  those too; tuning needs labels).

Every sample gets a content key, the sha256 of its prompt and media bytes, so a score cache
survives moved files and a changed file is never matched to an old score.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..exceptions import InvalidInput
from ..inputs import IMAGE_SUFFIXES, VIDEO_SUFFIXES, InputItem, resolve_path, sample_key
from ..jsonl import iter_objects

LABELS = ("a", "b", "tie")
_PAIR_KEYS = {"id", "prompt", "a", "b", "condition_images", "label", "metadata"}
_SAMPLE_KEYS = {"image", "video", "fps"}


class PreferenceDataError(InvalidInput):
    """A preference file line that cannot be used; the message starts with `file:line:`."""


@dataclass(frozen=True)
class PrefSample:
    """One side of a pair, with its content key."""

    key: str
    item: InputItem


@dataclass(frozen=True)
class PreferencePair:
    id: str
    prompt: str
    a: PrefSample
    b: PrefSample
    label: str | None
    where: str = ""


@dataclass
class PreferenceData:
    path: Path
    pairs: list[PreferencePair]
    sha256: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def labelled(self) -> list[PreferencePair]:
        return [p for p in self.pairs if p.label is not None]

    def samples(self) -> dict[str, PrefSample]:
        """Unique samples by content key, in first-seen order."""
        out: dict[str, PrefSample] = {}
        for pair in self.pairs:
            out.setdefault(pair.a.key, pair.a)
            out.setdefault(pair.b.key, pair.b)
        return out


def _path(base: Path, value: Any, where: str) -> Path:
    return resolve_path(base, value, where, PreferenceDataError)


def _sample(base: Path, spec: Any, where: str, prompt: str, conditions: list[Path], pair_id: str,
            side: str) -> PrefSample:
    image = video = None
    fps = None
    if isinstance(spec, str):
        p = _path(base, spec, where)
        suffix = p.suffix.lower()
        if p.is_dir() or suffix in VIDEO_SUFFIXES:
            video = p
        elif suffix in IMAGE_SUFFIXES:
            image = p
        else:
            raise PreferenceDataError(
                f"{where}: cannot tell whether {p.name} is an image or a video from its suffix; "
                'write {"image": ...} or {"video": ...}')
    elif isinstance(spec, dict):
        unknown = set(spec) - _SAMPLE_KEYS
        if unknown:
            raise PreferenceDataError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(_SAMPLE_KEYS)}")
        if ("image" in spec) == ("video" in spec):
            raise PreferenceDataError(f"{where}: needs exactly one of `image` or `video`")
        if "image" in spec:
            image = _path(base, spec["image"], f"{where}.image")
        else:
            video = _path(base, spec["video"], f"{where}.video")
        fps = spec.get("fps")
        if fps is not None and (isinstance(fps, bool) or not isinstance(fps, (int, float)) or fps <= 0):
            raise PreferenceDataError(f"{where}.fps: must be a positive number, got {fps!r}")
    else:
        raise PreferenceDataError(f"{where}: expected a path or an object with `image`/`video`, got {spec!r:.60}")
    if video is not None and video.is_dir() and fps is None:
        raise PreferenceDataError(f"{where}: a folder of frames needs an fps ({{\"video\": ..., \"fps\": F}})")
    item = InputItem(source=f"{pair_id}:{side}", prompt=prompt, image=image, video=video, fps=fps,
                     condition_images=list(conditions))
    return PrefSample(key=sample_key(item), item=item)


def load_preferences(path: str | Path, *, require_labels: bool = False) -> PreferenceData:
    """Read and validate a preference JSONL; every error names `file:line` and the reason."""
    path = Path(path)
    base = path.parent
    pairs: list[PreferencePair] = []
    seen: dict[str, str] = {}
    for n, where, obj in iter_objects(path, PreferenceDataError, _PAIR_KEYS):
        for side in ("a", "b"):
            if side not in obj:
                raise PreferenceDataError(f"{where}: missing sample `{side}`")
        prompt = obj.get("prompt", "")
        if not isinstance(prompt, str):
            raise PreferenceDataError(f"{where}: `prompt` must be a string")
        pair_id = str(obj.get("id", f"line{n}"))
        if pair_id in seen:
            raise PreferenceDataError(f"{where}: duplicate id {pair_id!r} (first at {seen[pair_id]})")
        seen[pair_id] = where
        label = obj.get("label")
        if label is not None and label not in LABELS:
            raise PreferenceDataError(f"{where}: label must be one of {list(LABELS)} or null, got {label!r}")
        if label is None and require_labels:
            raise PreferenceDataError(f"{where}: no `label`; tuning needs a human label on every pair")
        conds_raw = obj.get("condition_images", [])
        if not isinstance(conds_raw, list):
            raise PreferenceDataError(f"{where}: `condition_images` must be a list of paths")
        conds = [_path(base, c, f"{where}: condition_images[{i}]") for i, c in enumerate(conds_raw)]
        a = _sample(base, obj["a"], f"{where}: a", prompt, conds, pair_id, "a")
        b = _sample(base, obj["b"], f"{where}: b", prompt, conds, pair_id, "b")
        pairs.append(PreferencePair(id=pair_id, prompt=prompt, a=a, b=b, label=label, where=where))
    if not pairs:
        raise PreferenceDataError(f"{path}: no preference pairs")
    # The data's identity: the samples' content and the labels, not file paths or formatting.
    h = hashlib.sha256()
    for p in pairs:
        h.update(f"{p.id}\t{p.a.key}\t{p.b.key}\t{p.label}\n".encode())
    return PreferenceData(path=path, pairs=pairs, sha256=h.hexdigest())
