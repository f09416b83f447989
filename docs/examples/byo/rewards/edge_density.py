"""Your first reward: how much edge a picture has, in numpy alone (no torch, no weights to fetch),
so it runs under the gateway's own interpreter on a fresh clone (`kind = "custom"`, written
against judge-gateway's interface, judge_gateway.heads.custom).

raw = the mean luma step between neighbouring pixels, in [0, 1]: 0 for a flat image, higher for a
detailed or sharp one (a blurred copy scores lower); a video's sampled frames are averaged.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, Field

from judge_gateway.heads.custom import CustomHead, Item, ItemScore

LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)  # ITU-R BT.601


class EdgeDensity(CustomHead):
    class Options(BaseModel):  # the judge's `options.params`, validated when the worker starts
        threshold: float = Field(0.1, gt=0, lt=1, description="a luma step above this counts as an edge")

    def score(self, items: Sequence[Item]) -> list[ItemScore]:
        scores = []
        for item in items:  # an image [H, W, 3], a video's frames [T, H, W, 3]: uint8 RGB
            frames = item.pixels.reshape(-1, *item.pixels.shape[-3:]).astype(np.float32) / 255.0
            luma = frames @ LUMA
            steps = (np.abs(np.diff(luma, axis=2))[:, :-1, :] + np.abs(np.diff(luma, axis=1))[:, :, :-1]) / 2
            scores.append(ItemScore(raw=float(steps.mean()), details={
                "edge_share": float((steps > self.options.threshold).mean()), "frames": len(frames)}))
        return scores
