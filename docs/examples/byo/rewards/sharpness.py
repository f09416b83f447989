"""A custom head (`kind = "custom"`): a small torch model that scores how sharp an image or a
video is, written against judge-gateway's interface (judge_gateway.heads.custom).

The gateway runs it in the judge's own worker process, under the judge's `python`, and calls
`score` with up to `max_batch_size` samples gathered across requests.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from pydantic import BaseModel, Field

from judge_gateway.heads.custom import CustomHead, HeadContext, Item, ItemScore


class SharpnessNet(torch.nn.Module):
    """Edge filters on the grey image, their mean response, a linear read-out: one number per frame."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.edges = torch.nn.Conv2d(1, channels, kernel_size=3, padding=1)
        self.readout = torch.nn.Linear(channels, 1)

    def forward(self, grey: torch.Tensor) -> torch.Tensor:  # [N, 1, S, S] in [0, 1] -> [N]
        return self.readout(self.edges(grey).abs().mean(dim=(2, 3))).squeeze(-1)


class SharpnessHead(CustomHead):
    class Options(BaseModel):  # the judge's `options.params`, validated when the worker starts
        checkpoint: str = Field(description="SharpnessNet's state dict (torch.save)")
        size: int = Field(64, ge=8, le=1024, description="frames are resized to size x size")

    def __init__(self, options: Options, context: HeadContext) -> None:
        super().__init__(options, context)
        self.device = torch.device(context.device)

    def load(self) -> dict:
        self.net = SharpnessNet()
        self.net.load_state_dict(torch.load(self.options.checkpoint, map_location="cpu", weights_only=True))
        self.net.to(self.device).eval()
        return {"model": f"SharpnessNet({self.options.checkpoint})"}

    @torch.inference_mode()
    def score(self, items: Sequence[Item]) -> list[ItemScore]:
        # An image is one frame, a video its sampled frames: one forward pass over all of them.
        frames = [torch.from_numpy(it.pixels.copy()).reshape(-1, *it.pixels.shape[-3:]) for it in items]
        size = self.options.size
        x = torch.cat([F.interpolate(f.permute(0, 3, 1, 2).float() / 255.0, size=(size, size),
                                     mode="bilinear", antialias=True, align_corners=False) for f in frames])
        per_frame = self.net(x.mean(dim=1, keepdim=True).to(self.device)).cpu()
        scores, start = [], 0
        for f in frames:
            value = per_frame[start:start + len(f)].mean().item()
            start += len(f)
            scores.append(ItemScore(raw=value, details={"frames": len(f), "batch_size": len(items)}))
        return scores
