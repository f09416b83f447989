"""How a judge's raw score becomes its reward (`[judges.NAME.normalize]`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import Strict


class NormalizeConfig(Strict):
    """reward = clip(f(raw)); f is identity, affine (raw*scale+offset) or minmax ((raw-min)/(max-min))."""

    kind: Literal["identity", "affine", "minmax"] = Field(
        "identity", description="identity: reward = raw; affine: raw * scale + offset; minmax: (raw - min) / (max - min)."
    )
    scale: float = Field(1.0, description="affine: the factor.")
    offset: float = Field(0.0, description="affine: added after scaling.")
    min: float | None = Field(None, description="minmax: the raw value that maps to 0 (required with minmax).")
    max: float | None = Field(None, description="minmax: the raw value that maps to 1 (required with minmax).")
    clip: tuple[float, float] | None = Field(None, description="[low, high]: the reward is clipped into it last.")

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
