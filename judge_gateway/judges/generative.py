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
from ..prompts import Template
from ..parsers.peer_rubric import rational_reward
from ..schema import ErrorCode
from .aspects import AspectWeights
from .base import JudgeFailure, ScoreContext, Verdict
from .vlm import VLMJudge, media_body

if TYPE_CHECKING:
    from ..backends import BackendPool
    from ..schema import SampleInput

DEFAULT_MAX_TOKENS = 2048
# The reply goes into details so a researcher can see why a number came out; cap its size.
MAX_REPLY_CHARS = 8000


def generation_params(opts: Any, template: Template) -> dict[str, Any]:
    """The generation parameters of a judge that writes a reply (rubric, final score, critic, a
    comparative verdict in an answer tag): `opts` has max_tokens, temperature and stop."""
    # The option, else the template's (RationalRewards@2: 0.1, as its README), else 0.
    temperature = opts.temperature if opts.temperature is not None else template.temperature
    params: dict[str, Any] = {"temperature": temperature if temperature is not None else 0.0}
    # The option, else the template's, else DEFAULT_MAX_TOKENS; none where the template says
    # send_max_tokens = false (the server's limit, as cosmos-rl's unified_reward sends none).
    if opts.max_tokens:
        params["max_tokens"] = opts.max_tokens
    elif template.send_max_tokens:
        params["max_tokens"] = template.max_tokens or DEFAULT_MAX_TOKENS
    stop = opts.stop if opts.stop is not None else list(template.stop)
    if stop:
        params["stop"] = stop
    return params


def unread(exc: ParseError, facts: dict[str, Any]) -> JudgeFailure:
    """The failure of a reply the parser could not read: its code, and a hint when max_tokens cut it."""
    hint = " (the reply was cut by max_tokens)" if facts.get("finish_reason") == "length" else ""
    return JudgeFailure(exc.code, f"{exc}{hint}", details={**exc.details, **facts})


class _GenerativeJudge(VLMJudge):
    options: RubricOptions | FinalScoreOptions | CriticOptions

    @property
    def temperature(self) -> float:
        return generation_params(self.options, self.template)["temperature"]

    def _request_params(self) -> dict[str, Any]:
        params = generation_params(self.options, self.template)
        if getattr(self.options, "guided_regex", None):
            params["extra_body"] = {"structured_outputs": {"regex": self.options.guided_regex}}
        return params

    async def _generate(self, sample: "SampleInput", ctx: ScoreContext) -> tuple[str, dict[str, Any]]:
        text, facts, _ = await self._generate_choice(sample, ctx)
        return text, facts

    async def _generate_choice(self, sample: "SampleInput", ctx: ScoreContext,
                               **extra: Any) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """The reply's text, its facts for details, and the completion's first choice (where a
        judge reads more than the text: its logprobs). `extra`: more request parameters."""
        messages, media_facts = await self.build_messages(sample, ctx)
        params = {**self._request_params(), **extra}
        if body := media_body(media_facts):
            params["extra_body"] = {**body, **params.get("extra_body", {})}
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
        return text, facts, choices[0]


class RubricJudge(_GenerativeJudge):
    def __init__(self, name: str, cfg: JudgeConfig, pool: "BackendPool") -> None:
        super().__init__(name, cfg, pool)
        assert isinstance(cfg.options, RubricOptions)  # typed at config load (config.kinds)
        self.options = cfg.options
        t = self.template
        self.aspects = [a.name for a in t.aspects]
        scale = self.options.scale or t.scale
        assert scale is not None
        self.scale = (float(scale[0]), float(scale[1]))
        self.weighting = AspectWeights(t, self.options)

    async def evaluate(self, sample: "SampleInput", ctx: ScoreContext) -> Verdict:
        text, facts = await self._generate(sample, ctx)
        if self.options.peer_reading is not None:
            peer = rational_reward(text, self.options.peer_reading)
            if peer is not None:  # where the peer reads no aspect it returns a constant (0.0): none here
                facts["peer_reward"] = peer
        try:
            parsed = parse_rubric(text, self.aspects, scale=self.scale)
        except ParseError as exc:
            raise unread(exc, facts) from None
        try:
            raw, used = self.weighting.aggregate(parsed.scores, parsed.missing)
        except JudgeFailure as exc:
            exc.details.update(facts)
            raise
        details = {**facts, **parsed.details(), **self.weighting.details(used), "scale": list(self.scale)}
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
