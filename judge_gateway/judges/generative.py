"""Generative VLM judges: the model writes a critique, a parser reads the numbers out of it.

- rubric: per-aspect scores (RationalRewards-style), aggregated with weights, an N/A policy and
  a scale map that come from config, never from code.
- final_score: one number on a declared scale (UnifiedReward-style `Final Score: x`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..config import CriticOptions, FinalScoreOptions, JudgeConfig, NormalizeConfig, RubricOptions
from ..parsers import ParseError, parse_final_score, parse_rubric
from ..parsers.peer_rubric import rational_reward
from ..schema import ErrorCode
from .base import JudgeFailure, ScoreContext, Verdict
from .vlm import VLMJudge

if TYPE_CHECKING:
    from ..backends import BackendPool
    from ..schema import SampleInput

DEFAULT_MAX_TOKENS = 2048
# The reply goes into details so a researcher can see why a number came out; cap its size.
MAX_REPLY_CHARS = 8000


class _GenerativeJudge(VLMJudge):
    options: RubricOptions | FinalScoreOptions | CriticOptions

    @property
    def temperature(self) -> float:
        """The judge's option, else the template's (RationalRewards@2: 0.1, as its README), else 0."""
        if self.options.temperature is not None:
            return self.options.temperature
        return self.template.temperature if self.template.temperature is not None else 0.0

    def _request_params(self) -> dict[str, Any]:
        opts = self.options
        params: dict[str, Any] = {"temperature": self.temperature}
        # The option, else the template's, else DEFAULT_MAX_TOKENS; none where the template says
        # send_max_tokens = false (the server's limit, as cosmos-rl's unified_reward sends none).
        if opts.max_tokens:
            params["max_tokens"] = opts.max_tokens
        elif self.template.send_max_tokens:
            params["max_tokens"] = self.template.max_tokens or DEFAULT_MAX_TOKENS
        stop = opts.stop if opts.stop is not None else list(self.template.stop)
        if stop:
            params["stop"] = stop
        if getattr(opts, "guided_regex", None):
            params["extra_body"] = {"structured_outputs": {"regex": opts.guided_regex}}
        return params

    async def _generate(self, sample: "SampleInput", ctx: ScoreContext) -> tuple[str, dict[str, Any]]:
        prompt = await self.build_prompt(sample, ctx)
        messages, media_facts = prompt.messages, prompt.facts
        params = self._request_params()
        if prompt.extra_body:
            params["extra_body"] = prompt.body(params.get("extra_body"))
        completion = await self.pool.chat(messages=messages, affinity=self.media_affinity(sample, ctx), **params)
        choices = completion.get("choices") or []
        message = (choices[0].get("message") or {}) if choices else {}
        text = message.get("content")
        if not isinstance(text, str) or not text:
            raise JudgeFailure(ErrorCode.parse_error, "the backend returned an empty reply", details=media_facts)
        facts = {
            **media_facts,
            "temperature": self.temperature,
            "finish_reason": choices[0].get("finish_reason"),
            "reply": text[:MAX_REPLY_CHARS],
            "reply_truncated_in_details": len(text) > MAX_REPLY_CHARS,
        }
        # A backend with a reasoning parser returns the <think> text apart from the content.
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            facts["reasoning"] = reasoning[:MAX_REPLY_CHARS]
        usage = completion.get("usage") or {}
        if "completion_tokens" in usage:
            facts["completion_tokens"] = usage["completion_tokens"]
        return text, facts


class RubricJudge(_GenerativeJudge):
    def __init__(self, name: str, cfg: JudgeConfig, pool: "BackendPool") -> None:
        super().__init__(name, cfg, pool)
        assert isinstance(cfg.options, RubricOptions)  # typed at config load (config.kinds)
        self.options = cfg.options
        t = self.template
        self.aspects = [a.name for a in t.aspects]
        template_weights = {a.name: a.weight for a in t.aspects}
        self.weights = {**template_weights, **(self.options.aspect_weights or {})}
        scale = self.options.scale or t.scale
        assert scale is not None
        self.scale = (float(scale[0]), float(scale[1]))
        self.na_policy: str = self.options.na_policy
        self.na_value = self.options.na_value
        # What an aspect absent from the reply does: the option, else the template's default.
        self.missing_policy: str = self.options.missing_policy or t.missing_policy or "invalid"
        self.aggregation_profile = None
        if self.options.aggregation_profile:
            # A tuned aggregation profile (validated by the config loader) replaces weights and N/A policy.
            from ..aggregation_profiles import load_aggregation_profile

            self.aggregation_profile = load_aggregation_profile(
                self.options.aggregation_profile, sha256=self.options.aggregation_profile_sha256)
            self.weights = {a: self.aggregation_profile.weights.get(a, 0.0) for a in self.aspects}
            self.na_policy = self.aggregation_profile.na_policy
            self.na_value = self.aggregation_profile.na_value

    def aggregate(self, scores: dict[str, float | None], missing: list[str]) -> tuple[float, dict[str, Any]]:
        """Weighted mean of the aspect scores on the native scale, per the configured policies."""
        relevant_missing = [m for m in missing if self.weights.get(m, 0.0) > 0]
        if relevant_missing and self.missing_policy == "invalid":
            raise JudgeFailure(
                ErrorCode.parse_error,
                f"no score for aspect(s) {', '.join(relevant_missing)} in the reply",
                details={"aspects": scores, "missing": missing},
            )
        total = weight_sum = 0.0
        used: dict[str, float] = {}
        for aspect in self.aspects:
            weight = self.weights.get(aspect, 0.0)
            if weight <= 0 or aspect not in scores:
                continue
            value = scores[aspect]
            if value is None:  # N/A
                if self.na_policy == "skip":
                    continue
                assert self.na_value is not None
                value = self.na_value
            total += weight * value
            weight_sum += weight
            used[aspect] = weight
        if weight_sum <= 0:
            raise JudgeFailure(
                ErrorCode.parse_error,
                "no weighted aspect has a score (all N/A or missing)",
                details={"aspects": scores, "missing": missing},
            )
        return total / weight_sum, used

    async def evaluate(self, sample: "SampleInput", ctx: ScoreContext) -> Verdict:
        text, facts = await self._generate(sample, ctx)
        if self.options.peer_reading is not None:
            peer = rational_reward(text, self.options.peer_reading)
            if peer is not None:  # where the peer reads no aspect it returns a constant (0.0): none here
                facts["peer_reward"] = peer
        try:
            parsed = parse_rubric(text, self.aspects, scale=self.scale)
        except ParseError as exc:
            hint = " (the reply was cut by max_tokens)" if facts.get("finish_reason") == "length" else ""
            raise JudgeFailure(exc.code, f"{exc}{hint}", details={**exc.details, **facts}) from None
        try:
            raw, used = self.aggregate(parsed.scores, parsed.missing)
        except JudgeFailure as exc:
            exc.details.update(facts)
            raise
        details = {
            **facts,
            **parsed.details(),
            "weights": used,
            "na_policy": self.na_policy,
            "missing_policy": self.missing_policy,
            "scale": list(self.scale),
        }
        if self.aggregation_profile is not None:
            details["aggregation_profile"] = self.aggregation_profile.details()
        return Verdict(raw=raw, details=details,
                       default_normalize=NormalizeConfig(kind="minmax", min=self.scale[0], max=self.scale[1]))


class FinalScoreJudge(_GenerativeJudge):
    def __init__(self, name: str, cfg: JudgeConfig, pool: "BackendPool") -> None:
        super().__init__(name, cfg, pool)
        assert isinstance(cfg.options, FinalScoreOptions)
        self.options = cfg.options
        scale = self.options.scale or self.template.scale
        assert scale is not None
        self.scale = (float(scale[0]), float(scale[1]))
        self.label = self.options.label or self.template.label or "Final Score"
        self.peer_regex = re.compile(self.options.peer_regex) if self.options.peer_regex else None

    def _peer_score(self, text: str) -> dict[str, Any]:
        """{"peer_score": the number the peer's own pattern reads} where it matches (re.search,
        the first match, as cosmos-rl's unified_reward reads it); {} where it does not."""
        if self.peer_regex is None:
            return {}
        match = self.peer_regex.search(text)
        try:
            return {"peer_score": float(match.group(1))} if match else {}
        except (TypeError, ValueError):  # a group that is no number: the peer has none either
            return {}

    async def evaluate(self, sample: "SampleInput", ctx: ScoreContext) -> Verdict:
        text, facts = await self._generate(sample, ctx)
        facts |= self._peer_score(text)
        try:
            parsed = parse_final_score(text, scale=self.scale, label=self.label,
                                       occurrence=self.options.occurrence)
        except ParseError as exc:
            raise JudgeFailure(exc.code, str(exc), details={**exc.details, **facts}) from None
        details = {**facts, **parsed.details()}
        return Verdict(raw=parsed.score, details=details,
                       default_normalize=NormalizeConfig(kind="minmax", min=self.scale[0], max=self.scale[1]))
