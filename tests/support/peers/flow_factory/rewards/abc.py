"""Flow-Factory's reward model base classes with the signatures of its
src/flow_factory/rewards/abc.py: what a reward model class subclasses and returns.

The real RewardModelOutput derives from diffusers' BaseOutput and the real __init__ types its
arguments as RewardArguments and accelerate's Accelerator; the attributes set are the same.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class RewardModelOutput:
    rewards: Any  # torch.Tensor, np.ndarray or list of floats, one per sample
    extra_info: dict[str, Any] | None = None


class BaseRewardModel(ABC):
    required_fields: tuple[str, ...] = ()
    use_tensor_inputs: bool = False

    def __init__(self, config: Any, accelerator: Any) -> None:
        self.accelerator = accelerator
        self.config = config
        self.device = accelerator.device if config.device == torch.device("cuda") else config.device
        self.dtype = config.dtype
        self.model: torch.nn.Module | None = None

    @abstractmethod
    def __call__(self, *args: Any, **kwargs: Any) -> RewardModelOutput:
        """Compute rewards."""

    def to(self, device: torch.device) -> BaseRewardModel:
        if self.model is not None:
            self.model.to(device)
        self.device = device
        return self


class PointwiseRewardModel(BaseRewardModel):
    """Each sample's reward depends on that sample alone."""

    required_fields: tuple[str, ...] = ("image", "prompt")
    use_tensor_inputs: bool = False

    @abstractmethod
    def __call__(self, prompt: list[str], image: list[Any] | None = None, video: list[Any] | None = None,
                 audio: list[Any] | None = None, condition_images: list[Any] | None = None,
                 condition_videos: list[Any] | None = None, **kwargs: Any) -> RewardModelOutput:
        """Rewards of shape (batch_size,)."""


class GroupwiseRewardModel(BaseRewardModel):
    """Called once per group (the samples sharing a unique_id); rewards in the samples' order."""

    required_fields: tuple[str, ...] = ("image", "prompt")
    use_tensor_inputs: bool = False

    @abstractmethod
    def __call__(self, prompt: list[str], image: list[Any] | None = None, video: list[Any] | None = None,
                 audio: list[Any] | None = None, condition_images: list[Any] | None = None,
                 condition_videos: list[Any] | None = None, **kwargs: Any) -> RewardModelOutput:
        """Rewards of shape (group_size,)."""
