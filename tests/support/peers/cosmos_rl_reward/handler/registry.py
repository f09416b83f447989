"""cosmos-rl's RewardRegistry (handler/registry.py): reward name -> handler class."""

from __future__ import annotations

from typing import Any


class RewardRegistry:
    _REWARD_REGISTRY: dict[str, type] = {}
    _REWARD_VENV: dict[str, str] = {}

    @classmethod
    def register_reward(cls, reward_cls: type) -> None:
        RewardRegistry._REWARD_REGISTRY[reward_cls.reward_name] = reward_cls  # type: ignore[attr-defined]

    @classmethod
    def register(cls, *, allow_override: bool = False) -> Any:
        def decorator(reward_cls: type) -> type:
            name = reward_cls.reward_name  # type: ignore[attr-defined]
            known = RewardRegistry._REWARD_REGISTRY.get(name)
            if not allow_override and known is not None and known is not reward_cls:
                raise ValueError(f"Reward {name} is already registered.")
            RewardRegistry.register_reward(reward_cls)
            return reward_cls

        return decorator

    @classmethod
    def get_reward_class(cls, reward_type: str) -> type:
        if reward_type not in RewardRegistry._REWARD_REGISTRY:
            raise ValueError(f"Reward type {reward_type} is not registered.")
        return RewardRegistry._REWARD_REGISTRY[reward_type]
