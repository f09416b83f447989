"""The interface of a head you bring (`kind = "custom"`): what your class gets and gives back.

    from judge_gateway.heads.custom import CustomHead, HeadContext, Item, ItemScore

    class Sharpness(CustomHead):
        class Options(pydantic.BaseModel):        # optional: validates `options.params`
            checkpoint: str

        def __init__(self, options: Options, context: HeadContext) -> None: ...   # once, in the worker
        def load(self) -> dict: ...                  # optional, once: facts for the scores' details
        def score(self, items: Sequence[Item]) -> list[ItemScore | float]: ...    # per batch

The worker builds the class once, `cls(options, context)` (`options`: an instance of its `Options`
model, or the `params` dict when it declares none), calls `load()` once if it has one, then
`score(items)` with up to `max_batch_size` samples gathered across requests (a groupwise class,
`groupwise = True`, gets one whole group per call). `score` returns one result per item, in order:
a float, or an `ItemScore` with the raw number and optional details, or with an error for that
item alone. An exception from `score` is retried one request at a time, so only the items whose
request raises get its message as their error.

Only numpy and pydantic are needed here; the worker imports your class under the head's own
interpreter (`options.python`), where torch and your dependencies live. Subclassing CustomHead is
optional: any class with this constructor and a `score` method works.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel

Medium = Literal["image", "video"]


@dataclass(frozen=True)
class HeadContext:
    """Where the head runs, from its judge's options."""

    name: str  # the configured judge name
    kind: str  # custom, flow_factory_model or cosmos_rl_handler
    device: str  # cpu, cuda, cuda:N or mps
    dtype: str  # fp32, fp16 or bf16
    max_batch_size: int  # most items per `score` call (a groupwise head's group may be larger)


@dataclass(frozen=True)
class Item:
    """One sample to score. The arrays are read-only views of the worker's shared memory, valid
    until `score` returns: copy what you keep."""

    prompt: str
    medium: Medium
    pixels: np.ndarray  # uint8 RGB: an image [H, W, 3]; a video's sampled frames [T, H, W, 3]
    fps: float | None = None  # a video: the rate of its sampled frames
    metadata: Mapping[str, Any] = field(default_factory=dict)  # the sample's own (JSON) metadata
    group_id: str | None = None  # the sample's GRPO group
    condition_images: tuple[np.ndarray, ...] = ()  # uint8 [H, W, 3] each (e.g. an edit's source)
    condition_videos: tuple[np.ndarray, ...] = ()  # uint8 [T, H, W, 3] each


@dataclass(frozen=True)
class ItemScore:
    """One item's result: a raw number (with optional JSON details), or an error for this item
    alone (its score is invalid, `head_error`, with this message)."""

    raw: float | None = None
    details: Mapping[str, Any] | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if (self.raw is None) == (self.error is None):
            raise ValueError("an ItemScore has either a raw number or an error")

    @classmethod
    def failed(cls, error: str, details: Mapping[str, Any] | None = None) -> "ItemScore":
        return cls(error=error, details=details)


class CustomHead(ABC):
    """Optional base of a custom head class (see the module's docstring for the contract)."""

    # A pydantic model of the class's own options (`options.params` in the config).
    Options: ClassVar[type[BaseModel] | None] = None
    # True: each `score` call gets one whole group (samples sharing a group_id in a request).
    groupwise: ClassVar[bool] = False

    def __init__(self, options: Any, context: HeadContext) -> None:
        self.options = options
        self.context = context

    def load(self) -> Mapping[str, Any] | None:
        """Load what takes time (weights ...), once; return facts for the scores' details."""
        return None

    @abstractmethod
    def score(self, items: Sequence[Item]) -> Sequence[ItemScore | float]:
        """One result per item, in order."""

    def close(self) -> None:
        """Release what the head started (called once when the worker ends)."""


def as_item_score(value: Any) -> ItemScore:
    """A class's result for one item as an ItemScore; a value of another type is that item's error."""
    if isinstance(value, ItemScore):
        return value
    if isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return ItemScore(raw=float(value))
    return ItemScore.failed(f"the head returned a {type(value).__name__} for this item, not a number or an ItemScore")

