"""`judge-gateway score`: a folder or JSONL of prompts + media in, a JSONL of scores out."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .jsonl import iter_objects
from .schema import RewardResponse

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp"}
VIDEO_SUFFIXES = {".mp4", ".webm", ".mkv", ".mov"}


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


KNOWN_KEYS = {"id", "prompt", "image", "video", "fps", "condition_images", "group_id", "metadata"}


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


def _summary(lines: list[dict[str, Any]], judges: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    per: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in lines:
        for name, score in line.get("scores", {}).items():
            per[name].append(score)
    table = Table(title=f"{len(lines)} samples")
    for col in ("judge", "valid", "invalid", "errors", "mean reward", "p50 latency ms"):
        table.add_column(col, justify="left" if col in ("judge", "errors") else "right")
    for name in judges:
        scores = per.get(name, [])
        valid = [s["reward"] for s in scores if s["valid"]]
        codes = Counter(s["error"]["code"] for s in scores if not s["valid"] and s.get("error"))
        lat = [s["latency_ms"] for s in scores]
        table.add_row(
            name, str(len(valid)), str(len(scores) - len(valid)),
            ", ".join(f"{c}={n}" for c, n in codes.most_common()) or "-",
            f"{statistics.fmean(valid):.4f}" if valid else "-",
            f"{statistics.median(lat):.0f}" if lat else "-",
        )
    combined = [line["reward"] for line in lines if line.get("reward") is not None]
    failed = sum(1 for line in lines if "request_error" in line)
    table.caption = (f"combined reward: mean {statistics.fmean(combined):.4f} over {len(combined)} samples"
                     if combined else "no combined reward") + (f"; {failed} samples lost to request errors"
                                                              if failed else "")
    Console(file=sys.stderr).print(table)


async def score_items(items: list[InputItem], client: Any, *, judges: list[str] | None, batch_size: int,
                      concurrency: int, default_fps: float | None, out: Any, progress: bool) -> list[dict[str, Any]]:
    from tqdm import tqdm

    sem = asyncio.Semaphore(concurrency)
    written: list[dict[str, Any]] = []
    bar = tqdm(total=len(items), unit="sample", disable=not progress, file=sys.stderr)
    resolved: list[str] = list(judges or [])

    async def run_batch(start: int) -> None:
        batch = items[start:start + batch_size]
        async with sem:
            try:
                samples = await asyncio.to_thread(lambda: [it.to_sample(default_fps) for it in batch])
                resp: RewardResponse = await client.rewards.create(samples=samples, judges=judges)
            except Exception as exc:  # noqa: BLE001 - the batch is reported, never dropped
                lines = [{"index": start + i, "source": it.source, "valid": False, "reward": None,
                          "request_error": f"{type(exc).__name__}: {exc}"} for i, it in enumerate(batch)]
            else:
                if not resolved:
                    resolved.extend(resp.judges)
                lines = []
                for i, (it, res) in enumerate(zip(batch, resp.results)):
                    line = {"index": start + i, "source": it.source, "prompt": it.prompt,
                            **res.model_dump(mode="json", exclude={"index"})}
                    lines.append(line)
        for line in lines:
            out.write(json.dumps(line) + "\n")
        out.flush()
        written.extend(lines)
        bar.update(len(batch))

    await asyncio.gather(*(run_batch(s) for s in range(0, len(items), batch_size)))
    bar.close()
    written.sort(key=lambda x: x["index"])
    _summary(written, resolved)
    return written


def run_score_command(args: argparse.Namespace) -> int:
    from .client import AsyncRewardClient

    items = read_inputs(Path(args.input))
    judges = [j.strip() for j in args.judges.split(",") if j.strip()] if args.judges else None
    if args.batch_size < 1 or args.concurrency < 1:
        raise ValueError("--batch-size and --concurrency must be >= 1")

    async def main() -> list[dict[str, Any]]:
        if args.server:
            client = AsyncRewardClient(args.server, api_key=args.api_key)
        else:
            from .config import load_config
            client = AsyncRewardClient(config=load_config(args.config))
        try:
            with open(args.output, "w", encoding="utf-8") as out:  # noqa: ASYNC230 - opened once
                return await score_items(items, client, judges=judges, batch_size=args.batch_size,
                                         concurrency=args.concurrency, default_fps=args.fps, out=out,
                                         progress=not args.no_progress)
        finally:
            await client.close()

    lines = asyncio.run(main())
    lost = sum(1 for line in lines if "request_error" in line)
    if lost:
        print(f"error: {lost} sample(s) failed at the request level; see request_error in {args.output}",
              file=sys.stderr)
        return 1
    return 0
