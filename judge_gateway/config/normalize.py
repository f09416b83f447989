"""How a judge's raw score becomes its reward (`[judges.NAME.normalize]`)."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from .base import Strict


class NormalizeConfig(Strict):
    """reward = clip(f(raw)); f is identity, affine (raw*scale+offset) or minmax ((raw-min)/(max-min))."""

    kind: Literal["identity", "affine", "minmax"] = "identity"
    scale: float = 1.0
    offset: float = 0.0
    min: float | None = None
    max: float | None = None
    clip: tuple[float, float] | None = None

    @model_validator(mode="after")
    def _check(self) -> "NormalizeConfig":
        if self.kind == "minmax":
            if self.min is None or self.max is None or self.max <= self.min:
                raise ValueError("minmax needs min < max")
        if self.clip is not None and self.clip[0] > self.clip[1]:
            raise ValueError("clip must be [low, high] with low <= high")
        return self

    def apply(self, raw: float) -> float:
        if self.kind == "affine":
            value = raw * self.scale + self.offset
        elif self.kind == "minmax":
            assert self.min is not None and self.max is not None
            value = (raw - self.min) / (self.max - self.min)
        else:
            value = raw
        if self.clip is not None:
            value = min(max(value, self.clip[0]), self.clip[1])
        return value
