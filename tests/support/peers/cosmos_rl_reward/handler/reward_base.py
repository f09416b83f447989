"""cosmos-rl's BaseRewardHandler with the signatures of its handler/reward_base.py.

The real __init__ also starts a multiprocessing Manager (a score queue and a loop event) for
cosmos-rl's own serving loop, and the class has that loop's methods (calculate_scores_in_shmem,
upload_scores_in_queue); a handler run as a judge-gateway head uses neither.
"""

from __future__ import annotations

from typing import Any


class BaseRewardHandler:
    reward_name = "base"

    def __init__(self, **kwargs: Any) -> None:
        self.score_pool = None
        self.threading_pool = None
        self.redis_manager = None

    @classmethod
    def get_instance(cls, **kwargs: Any) -> "BaseRewardHandler":
        if not hasattr(cls, "_instance"):
            cls._instance = cls(**kwargs)
        return cls._instance

    def calculate_reward(self, images: Any, metadata: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError("This method should be overridden in subclasses to calculate the reward.")

    def set_up(self) -> None:
        raise NotImplementedError("This method should be overridden in subclasses to set up the inference engine.")

    @classmethod
    def initialize(cls, **kwargs: Any) -> None:
        cls.get_instance(**kwargs).set_up()
