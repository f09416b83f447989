"""A peer-style reward class for the tests of brought heads, imported only by a head worker under
the heads venv (torch, and the stand-in flow_factory of tests/support/peers on its pythonpath):
condition media through the Flow-Factory adapter, which the guide's examples do not use."""

from __future__ import annotations

import torch

from flow_factory.rewards.abc import PointwiseRewardModel, RewardModelOutput


class SourceDistance(PointwiseRewardModel):
    """An edit reward with tensor inputs: minus the mean absolute difference between each edited
    image and its first source image (values in [0, 1])."""

    required_fields = ("prompt", "image", "condition_images")
    use_tensor_inputs = True

    @torch.no_grad()
    def __call__(self, prompt, image=None, video=None, condition_images=None, condition_videos=None):
        firsts = [sources[0] for sources in condition_images]  # a stacked [N, C, H, W] or a list
        rewards = torch.stack([-(edited - source).abs().mean() for edited, source in zip(image, firsts)])
        return RewardModelOutput(rewards=rewards, extra_info={"sources": [len(s) for s in condition_images]})
