"""The worker's head factory: a head kind's concrete HeadModel.

It lives on the worker side (worker.py calls it), not in `models.py`: the concrete heads import
`HeadModel` from there, and a base module that imported them back would make a circle.
"""

from __future__ import annotations

from typing import Any

from .models.base import HeadLoadError, HeadModel


def build_head(kind: str, options: dict[str, Any]) -> HeadModel:
    # Imported here: only the worker process loads torch / onnxruntime.
    if kind in ("clip", "pickscore", "hpsv2"):
        from .models.clip import build_clip_family

        return build_clip_family(kind, options)
    if kind == "hpsv3":
        from .models.hpsv3 import HPSv3Head

        return HPSv3Head(kind, options)
    if kind == "ocr":
        from .models.ocr import RapidOcrHead

        return RapidOcrHead(kind, options)
    if kind == "gen_eval":
        from .geneval.model import GenEvalDetectorHead

        return GenEvalDetectorHead(kind, options)
    if kind == "videoalign":
        from .videoalign.model import VideoAlignHead

        return VideoAlignHead(kind, options)
    if kind == "image_reward":
        from .models.image_reward import ImageRewardHead

        return ImageRewardHead(kind, options)
    raise HeadLoadError(f"unknown head kind {kind!r}")
