"""Flow-Factory reward models, as a Flow-Factory user writes them (src/flow_factory/rewards/abc.py),
unchanged: judge-gateway serves them with `kind = "flow_factory_model"`."""

from __future__ import annotations

from typing import List, Optional

import numpy as np
import torch
from PIL import Image

from flow_factory.rewards.abc import GroupwiseRewardModel, PointwiseRewardModel, RewardModelOutput


class Colorfulness(PointwiseRewardModel):
    """Hasler and Suesstrunk's colourfulness of each image (a video: its middle frame), / `scale`."""

    required_fields = ("prompt", "image", "video")
    use_tensor_inputs = False  # PIL images

    def __init__(self, config, accelerator):
        super().__init__(config, accelerator)
        self.scale = float(getattr(config, "scale", 100.0))  # an extra key of the reward's config

    @torch.no_grad()
    def __call__(
        self,
        prompt: List[str],
        image: Optional[List[Image.Image]] = None,
        video: Optional[List[List[Image.Image]]] = None,
        condition_images: Optional[List[List[Image.Image]]] = None,
        condition_videos: Optional[List[List[List[Image.Image]]]] = None,
    ) -> RewardModelOutput:
        pictures = image if image is not None else [frames[len(frames) // 2] for frames in video]
        raw = [self._colourfulness(p) for p in pictures]
        return RewardModelOutput(rewards=torch.tensor(raw) / self.scale, extra_info={"colourfulness": raw})

    @staticmethod
    def _colourfulness(picture: Image.Image) -> float:
        r, g, b = np.asarray(picture.convert("RGB"), dtype=np.float64).transpose(2, 0, 1)
        rg, yb = r - g, 0.5 * (r + g) - b
        return float(np.hypot(rg.std(), yb.std()) + 0.3 * np.hypot(rg.mean(), yb.mean()))


class BrightnessRank(GroupwiseRewardModel):
    """Each sample's rank of mean brightness within its group, / group size (tensor inputs)."""

    required_fields = ("prompt", "image")
    use_tensor_inputs = True  # float tensors [C, H, W] in [0, 1]

    @torch.no_grad()
    def __call__(
        self,
        prompt: List[str],
        image: Optional[List[torch.Tensor]] = None,
        video: Optional[List[torch.Tensor]] = None,
        condition_images=None,
        condition_videos=None,
    ) -> RewardModelOutput:
        brightness = torch.stack([img.float().mean() for img in image])
        ranks = brightness.argsort().argsort().float() / len(image)
        return RewardModelOutput(rewards=ranks, extra_info={"brightness": brightness.tolist()})
