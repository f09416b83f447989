"""A cosmos-rl reward handler, as a cosmos-rl user writes it (reward_service/cosmos_rl_reward:
handler/reward_base.py, registry.py), unchanged: judge-gateway serves it with
`kind = "cosmos_rl_handler"`."""

from __future__ import annotations

import time

import torch

from cosmos_rl_reward.handler.registry import RewardRegistry
from cosmos_rl_reward.handler.reward_base import BaseRewardHandler


@RewardRegistry.register()
class ContrastReward(BaseRewardHandler):
    """RMS contrast of the luma of each image (uint8 [B, H, W, C]) or video (uint8 [B, C, T, H, W])."""

    reward_name = "contrast"

    def __init__(self, model_path: str = "", download_path: str = "", device: str = "cuda",
                 dtype: str = "float32", **kwargs):
        super().__init__()
        self.device = device
        self.threshold = float(kwargs.get("threshold", 0.2))
        self.weights = None

    def set_up(self):
        self.weights = torch.tensor([0.299, 0.587, 0.114], device=self.device)

    def calculate_reward(self, images, metadata):
        start = time.time()
        x = images.to(self.device).float() / 255.0
        if x.dim() == 5:  # a video batch [B, C, T, H, W] -> [B, T, H, W, C]
            x = x.permute(0, 2, 3, 4, 1)
        luma = (x * self.weights).sum(dim=-1)
        contrast = luma.flatten(1).std(dim=1).cpu().tolist()
        return {
            "scores": {"contrast": contrast,
                       "contrast_label": ["high" if c >= self.threshold else "low" for c in contrast]},
            "input_info": metadata.get("input_info", {}),
            "duration": f"{time.time() - start:.2f}",
            "decoded_duration": metadata.get("decode_duration", "N/A"),
            "type": self.reward_name,
        }
