"""The critic: a generative VLM judge whose reply is one JSON object in the template's schema.

The schema goes to vLLM as structured outputs (`{"structured_outputs": {"json": schema}}`), and
the reply is checked against it again here: a reply that does not parse or conform is invalid
(parse_error), never a default. The whole critique goes into details; the reward is the number
at the configured field path, mapped onto [0, 1] by the schema's minimum/maximum.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..config import CriticOptions, JudgeConfig, NormalizeConfig
from ..parsers import ParseError
from ..parsers.critique import parse_critique
from ..parsers.json_schema import field_value, subschema
from ..schema import ErrorCode
from .base import JudgeFailure, ScoreContext, Verdict
from .generative import _GenerativeJudge

if TYPE_CHECKING:
    from ..backends import BackendPool
    from ..schema import SampleInput


class CriticJudge(_GenerativeJudge):
    def __init__(self, name: str, cfg: JudgeConfig, pool: BackendPool) -> None:
        super().__init__(name, cfg, pool)
        assert isinstance(cfg.options, CriticOptions)  # typed at config load (config.kinds)
        self.options = cfg.options
        schema = self.template.json_schema
        assert schema is not None and self.template.violations_field is not None
        self.schema: dict[str, Any] = schema
        self.violations_field: str = self.template.violations_field
        self.reward_field = self.options.reward_field
        node = subschema(schema, self.reward_field) or {}  # validate_config checked it exists
        lo, hi = node.get("minimum"), node.get("maximum")
        self.reward_normalize = (NormalizeConfig(kind="minmax", min=lo, max=hi)
                                 if lo is not None and hi is not None and hi > lo else None)

    def _request_params(self) -> dict[str, Any]:
        params = super()._request_params()
        if self.options.structured_outputs:
            params["extra_body"] = {"structured_outputs": {"json": self.schema}}
        return params

    async def evaluate(self, sample: SampleInput, ctx: ScoreContext) -> Verdict:
        text, facts = await self._generate(sample, ctx)
        duration = _clip_duration(facts.get("video"))
        try:
            critique = parse_critique(text, self.schema, violations_field=self.violations_field,
                                      duration_s=duration, reasoning=facts.get("reasoning"))
        except ParseError as exc:
            hint = " (the reply was cut by max_tokens)" if facts.get("finish_reason") == "length" else ""
            raise JudgeFailure(exc.code, f"{exc}{hint}", details={**facts, **exc.details}) from None
        violations = [v.as_dict() for v in critique.violations]
        bad_times = [v for v in critique.violations if v.t_s is not None and not v.valid_time]
        details = {
            **facts,
            "critique": critique.obj,
            "violations": violations,
            "bad_violation_times": len(bad_times),
            "clip_duration_s": duration,
            "reward_field": self.reward_field,
        }
        if critique.reasoning:
            details["reasoning"] = critique.reasoning
        if bad_times and self.options.on_bad_timestamp == "invalid":
            shown = ", ".join(f"{v.label}@{v.t_s}s" for v in bad_times)
            raise JudgeFailure(ErrorCode.parse_error,
                               f"violation time(s) outside the {duration}s clip the judge saw: {shown}",
                               details=details)
        raw = float(field_value(critique.obj, self.reward_field))
        return Verdict(raw=raw, details=details, default_normalize=self.reward_normalize)


def _clip_duration(video_facts: dict[str, Any] | None) -> float | None:
    """Seconds of the clip the judge saw: its frames at the fps it was encoded at."""
    if not video_facts or not video_facts.get("fps"):
        return None
    return round(video_facts["num_frames"] / video_facts["fps"], 6)
