"""The load and probe checks: each judge scores one made-up sample through a real Gateway.

A head's worker starts under its configured interpreter and loads its model (the load check);
then one sample shaped for the judge (an image with the text "PROBE" rendered and quoted in the
prompt, so OCR applies; a short video for video judges; GenEval metadata for gen_eval) is
scored (the probe check). A probe passes when its score is valid: the value itself is shown,
not judged. A VLM judge's load check is its backend listing the served model.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from ..gateway import Gateway
from ..heads.judge import HeadJudge
from ..media import ImageMedia, VideoMedia
from ..schema import RewardRequest, SampleInput

PROBE_TEXT = "PROBE"
PROBE_PROMPT = f'a white sign with the word "{PROBE_TEXT}" written on it in black'


@dataclass
class CheckResult:
    load: str  # "ok" or why not
    probe: str  # "ok (reward 0.42)", why not, or "-" (not run)
    seconds: float
    ok: bool


def text_image(text: str, size: tuple[int, int] = (512, 256), *, font_size: int = 56,
               origin: tuple[int, int] | None = None) -> np.ndarray:
    """Black `text` on white, the way a text-rendering prompt would ideally come out ([H, W, 3]
    uint8), drawn from `origin` (default: 40 px in, 30 px above the middle) in PIL's own font."""
    image = Image.new("RGB", size, "white")
    at = origin if origin is not None else (40, size[1] // 2 - 30)
    ImageDraw.Draw(image).text(at, text, fill="black", font=ImageFont.load_default(size=font_size))
    return np.asarray(image)


def probe_image(size: tuple[int, int] = (320, 160)) -> np.ndarray:
    return text_image(PROBE_TEXT, size, font_size=64, origin=(24, 40))


def probe_sample(media: tuple[str, ...]) -> SampleInput:
    """One sample carrying every medium the judge reads (an image where it takes one, else a video)."""
    image = probe_image()
    fields: dict = {"prompt": PROBE_PROMPT,
                    "metadata": {"tag": "single_object", "include": [{"class": "dog", "count": 1}]}}
    if "image" in media or not media:
        fields["image"] = ImageMedia.from_array(image)
    elif "video" in media:
        frames = np.stack([np.roll(image, 8 * i, axis=1) for i in range(8)])
        fields["video"] = VideoMedia.from_array(frames, fps=8.0)
    if "condition_image" in media:
        fields["condition_images"] = [ImageMedia.from_array(image)]
    if "condition_video" in media:
        fields["condition_videos"] = [VideoMedia.from_array(np.stack([image] * 8), fps=8.0)]
    return SampleInput(**fields)


async def check_judge(gw: Gateway, name: str, *, load_only: bool = False) -> CheckResult:
    judge = gw.judges[name]
    started = time.monotonic()
    if isinstance(judge, HeadJudge):
        try:
            await judge.worker.wait_ready()
        except Exception as exc:  # noqa: BLE001 - HeadError and anything its start raised: the reason
            return CheckResult(f"failed: {exc}", "-", time.monotonic() - started, False)
    else:
        ready, reason = await judge.probe()
        if not ready:
            return CheckResult(f"not serving: {reason}", "-", time.monotonic() - started, False)
    if load_only:
        return CheckResult("ok", "-", time.monotonic() - started, True)
    # a comparative judge compares a group: it is probed with a group of its probe_group_size
    samples = [probe_sample(judge.media) for _ in range(judge.probe_group_size)]
    response = await gw.score(RewardRequest(samples=samples, judges=[name]))
    score = response.results[0].scores[name]
    seconds = time.monotonic() - started
    if not score.valid:
        assert score.error is not None
        return CheckResult("ok", f"invalid ({score.error.code.value}): {score.error.message}", seconds, False)
    return CheckResult("ok", f"ok (reward {score.reward:.4g})", seconds, True)


async def check_judges(gw: Gateway, names: list[str]) -> dict[str, CheckResult]:
    """Every judge at once (their workers load side by side); one failing never stops another."""
    results = await asyncio.gather(*(check_judge(gw, n) for n in names), return_exceptions=True)
    out = {}
    for name, result in zip(names, results):
        if isinstance(result, BaseException):
            out[name] = CheckResult(f"failed: {type(result).__name__}: {result}", "-", 0.0, False)
        else:
            out[name] = result
    return out
