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
from ..parsers import Axis, ParseError, parse_axes, soft_score, token_logprobs_of
from ..schema import ErrorCode
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
        self.soft_score = self.options.soft_score or t.soft_score or "none"

    async def evaluate(self, sample: SampleInput, ctx: ScoreContext) -> Verdict:
        soft = self.soft_score == "score_token"
        extra = {"logprobs": True, "top_logprobs": self.options.top_logprobs} if soft else {}
        text, facts, choice = await self._generate_choice(sample, ctx, **extra)
        try:
            parsed = parse_axes(text, self.axes, scale=self.scale, occurrence=self.occurrence)
        except ParseError as exc:
            raise unread(exc, facts) from None
        scores, missing = parsed.scores, parsed.missing
        details = {**facts, **parsed.details()}
        if soft:
            scores, missing, soft_details = self._soft_scores(choice, parsed.scores, facts)
            details |= {"axes": scores, "missing": missing, "written_axes": dict(parsed.scores),
                        "soft_scores": soft_details}
        try:
            raw, used = self.weighting.aggregate(scores, missing)
        except JudgeFailure as exc:
            exc.details.update(details)
            raise
        details |= {**self.weighting.details(used), "scale": list(self.scale), "occurrence": self.occurrence,
                    "soft_score": self.soft_score}
        low = 0.0 if soft else self.scale[0]
        return Verdict(raw=raw, details=details,
                       default_normalize=NormalizeConfig(kind="minmax", min=low, max=self.scale[1]))

    def _soft_scores(self, choice: dict, written: dict[str, float | None],
                     facts: dict) -> tuple[dict[str, float | None], list[str], dict[str, dict]]:
        """Each written axis's soft score; an axis without one joins the missing ones."""
        tokens = token_logprobs_of((choice.get("logprobs") or {}).get("content"))
        if tokens is None:
            raise JudgeFailure(ErrorCode.parse_error, "soft_score = score_token needs the reply's logprobs and the "
                               "backend returned none", details=facts)
        labels = {a.name: a.label for a in self.axes}
        scores: dict[str, float | None] = {}
        soft_details: dict[str, dict] = {}
        for name, value in written.items():
            if value is None:  # N/A: no number, no score token; the N/A policy decides
                scores[name] = None
                continue
            # The reference finds the label with its colon (vs2_inference.py: "visual quality:").
            result = soft_score(tokens, f"{labels[name]}:", self.scale, self.temperature)
            soft_details[name] = result.details()
            if result.value is not None:
                scores[name] = result.value
        order = [a.name for a in self.axes]
        return scores, [n for n in order if n not in scores], soft_details
