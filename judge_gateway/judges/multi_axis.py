"""Multi-axis judges: the reply scores several axes on one scale (UnifiedReward-2.0's Alignment /
Coherence or Physics / Style, VideoScore2's visual quality / text-to-video alignment / physical
consistency). Each axis is a `details.axes` entry; the reward is their weighted mean under the
judge's aggregation (template weights, options or a tuned profile; N/A and missing policies),
mapped onto [0, 1] by the scale. An axis the reply lacks is never a 0: the missing policy makes
the score invalid or leaves the axis out, and details say which.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import JudgeConfig, MultiAxisOptions, NormalizeConfig
from ..parsers import Axis, ParseError, parse_axes
from .aspects import AspectWeights
from .base import JudgeFailure, ScoreContext, Verdict
from .generative import _GenerativeJudge, unread

if TYPE_CHECKING:
    from ..backends import BackendPool
    from ..schema import SampleInput


class MultiAxisJudge(_GenerativeJudge):
    def __init__(self, name: str, cfg: JudgeConfig, pool: BackendPool) -> None:
        super().__init__(name, cfg, pool)
        assert isinstance(cfg.options, MultiAxisOptions)  # typed at config load (config.kinds)
        self.options = cfg.options
        t = self.template
        self.axes = [Axis(a.name, a.label or a.name, a.na_allowed) for a in t.aspects]
        scale = self.options.scale or t.scale
        assert scale is not None
        self.scale = (float(scale[0]), float(scale[1]))
        self.occurrence = self.options.occurrence or t.occurrence or "last"
        self.weighting = AspectWeights(t, self.options)

    async def evaluate(self, sample: SampleInput, ctx: ScoreContext) -> Verdict:
        text, facts = await self._generate(sample, ctx)
        try:
            parsed = parse_axes(text, self.axes, scale=self.scale, occurrence=self.occurrence)
        except ParseError as exc:
            raise unread(exc, facts) from None
        try:
            raw, used = self.weighting.aggregate(parsed.scores, parsed.missing)
        except JudgeFailure as exc:
            exc.details.update({**facts, **parsed.details()})
            raise
        details = {**facts, **parsed.details(), **self.weighting.details(used), "scale": list(self.scale),
                   "occurrence": self.occurrence}
        return Verdict(raw=raw, details=details,
                       default_normalize=NormalizeConfig(kind="minmax", min=self.scale[0], max=self.scale[1]))
