"""Custom head classes for the tests of brought heads (imported by a head worker by import path,
`tests.support.byo_heads:NAME`): faults the guide's examples do not have."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from judge_gateway.heads.custom import CustomHead, Item, ItemScore


class PromptLength(CustomHead):
    """raw = the prompt's length; raises on a prompt with "boom" in it (the whole call fails: the
    worker retries request by request), and gives an item-level error for a prompt with "skip"."""

    def score(self, items: Sequence[Item]) -> list[ItemScore]:
        for item in items:
            if "boom" in item.prompt:
                raise ValueError(f"cannot score {item.prompt!r}")
        return [ItemScore.failed("the prompt asks to be skipped") if "skip" in item.prompt
                else ItemScore(raw=float(len(item.prompt)), details={"batch_size": len(items)})
                for item in items]


class WithOptions(CustomHead):
    """A class whose options are validated by its Options model."""

    class Options(BaseModel):
        checkpoint: str
        size: int = 64

    def score(self, items: Sequence[Item]) -> list[float]:
        return [float(self.options.size)] * len(items)
