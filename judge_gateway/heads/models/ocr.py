"""OCR head: RapidOCR (PP-OCR det/cls/rec ONNX models shipped in the wheel) on onnxruntime.

Outputs the recognised lines per image; the reward (target text, edit distance) is computed on
the gateway side (heads/ocr_text.py), which also knows whether a prompt has target text at all.
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...config.head_options import OcrOptions
from ...extras import install_command
from .base import HeadLoadError, HeadModel


def rapidocr_version() -> str:
    """The installed RapidOCR's version (the package has no `__version__`: its distribution's)."""
    try:
        return importlib.metadata.version("rapidocr")
    except importlib.metadata.PackageNotFoundError:
        import rapidocr  # an install without distribution metadata (a source tree on the path)

        return str(getattr(rapidocr, "__version__", "unknown version"))


class RapidOcrHead(HeadModel):
    options: OcrOptions

    def load(self) -> dict[str, Any]:
        try:
            from rapidocr import RapidOCR
        except ImportError as exc:
            raise HeadLoadError(f"rapidocr is not installed in the worker's interpreter ({exc}): "
                                f"{install_command('ocr', sys.executable)}") from exc
        o = self.options
        device = o.device
        params: dict[str, Any] = {
            "Global.log_level": "warning",
            "Global.text_score": o.min_confidence,
            "Global.use_cls": o.use_cls,
        }
        if device.startswith("cuda"):
            params["EngineConfig.onnxruntime.use_cuda"] = True
            params["EngineConfig.onnxruntime.cuda_ep_cfg.device_id"] = int(device.partition(":")[2] or 0)
        if o.threads:
            params["EngineConfig.onnxruntime.intra_op_num_threads"] = o.threads
        try:
            self.engine = RapidOCR(params=params)
        except Exception as exc:
            raise HeadLoadError(f"RapidOCR failed to initialise: {exc}") from exc
        return {"model": f"rapidocr {rapidocr_version()} (PP-OCR)", "library": "rapidocr"}

    def infer(self, images: Sequence[np.ndarray], prompts: Sequence[str]) -> list[dict[str, Any]]:
        outputs = []
        for im in images:
            # RapidOCR reads a 3-channel ndarray as BGR (OpenCV order); ours are RGB.
            result = self.engine(np.ascontiguousarray(im[..., ::-1]))
            lines = list(result.txts or ())
            scores = [float(s) for s in (result.scores or ())]
            outputs.append({"lines": lines, "confidences": scores})
        return outputs
