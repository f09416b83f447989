"""Soft axis scores from the score token's probabilities (VideoScore2's reading of its own reply).

VideoScore2 (TIGER-AI-Lab/VideoScore2 `vs2_inference.py`) reports, per axis, not the integer it
wrote but a soft score read at the token of that integer:

- the score token is the first digit after the axis's label (its first occurrence in the reply,
  case-insensitive), and only where that digit ends a token (a digit inside a longer token has
  no score token: the axis has no soft score);
- at that token, each score of the scale whose digit is one token gets its probability; the most
  probable score `best` (the lowest on a tie) and its share of the scale's probability give
  `best * p(best) / sum(p)`, rounded to 4 places as the reference prints it.

The reference reads the probabilities from `generate`'s processed scores: the logits divided by
the sampling temperature. A vLLM server lists raw logprobs (its default `--logprobs-mode`), so
they are divided by the temperature here (greedy decoding divides by nothing); the ratio between
the scale's digits is then the reference's, as long as each digit is among the listed top-K
(a digit outside it counts 0 here, a small probability there).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import ParseError
from .yes_no import _candidates

_DIGIT = re.compile(rb"[0-9]")


@dataclass(frozen=True)
class TokenLogprobs:
    """One generated token as the backend listed it. Only the text and bytes are read for every
    token (to find the score tokens); the alternatives are read at the few tokens that matter."""

    token: str
    alternatives: Any = ()  # the position's `top_logprobs`, as listed
    logprob: float | None = None  # the token's own logprob (vLLM lists it beside the top-K)
    # The token's bytes (vLLM's `bytes`): a token that ends inside a UTF-8 character has a
    # placeholder text, so positions in the reply are counted in bytes.
    raw: bytes | None = None

    @property
    def data(self) -> bytes:
        return self.raw if self.raw is not None else self.token.encode("utf-8")

    def top(self) -> dict[str, float]:
        """Token text -> logprob over the listed alternatives and the token itself (the highest
        where a text is listed twice); ParseError where the list is malformed, as the yes/no
        parser reads a list."""
        top: dict[str, float] = {}
        for text, lp in _candidates(self.alternatives):
            top[text] = max(lp, top.get(text, -math.inf))
        if isinstance(self.logprob, (int, float)) and math.isfinite(self.logprob):
            top[self.token] = max(min(float(self.logprob), 0.0), top.get(self.token, -math.inf))
        return top


@dataclass(frozen=True)
class SoftScore:
    """One axis's soft score, or why it has none."""

    value: float | None
    token_index: int | None = None
    best: int | None = None
    share: float | None = None  # p(best) / sum of the scale's listed probabilities
    digit_logprobs: dict[str, float] = field(default_factory=dict)  # the scale's digits found at the token
    reason: str | None = None  # set when value is None

    def details(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value, "token_index": self.token_index}
        if self.value is None:
            out["reason"] = self.reason
        else:
            out |= {"best": self.best, "share": self.share, "digit_logprobs": dict(self.digit_logprobs)}
        return out


def token_logprobs_of(content: Any) -> list[TokenLogprobs] | None:
    """The per-token list of an OpenAI chat completion's `choices[0].logprobs.content`, or None
    where the backend returned none (or a shape without token texts)."""
    if not isinstance(content, list):
        return None
    tokens = []
    for entry in content:
        if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
            return None
        raw = entry.get("bytes")
        data = bytes(raw) if isinstance(raw, list) and all(isinstance(b, int) and 0 <= b < 256 for b in raw) else None
        logprob = entry.get("logprob")
        tokens.append(TokenLogprobs(entry["token"], entry.get("top_logprobs") or (),
                                    logprob if isinstance(logprob, (int, float)) and not isinstance(logprob, bool)
                                    else None, data))
    return tokens


def score_token_index(tokens: Sequence[TokenLogprobs], label: str) -> int | None:
    """The index of the token that ends with the first digit after `label`'s first occurrence in
    the reply the tokens spell; None where the label or a digit after it is absent, or the digit
    does not end a token."""
    text = b"".join(t.data for t in tokens)
    found = re.search(re.escape(label.encode("utf-8")), text, flags=re.IGNORECASE)
    if found is None:
        return None
    digit = _DIGIT.search(text, found.end())
    if digit is None:
        return None
    end = digit.end()
    position = 0
    for index, token in enumerate(tokens):
        position += len(token.data)
        if position == end:
            return index
        if position > end:
            return None
    return None


def soft_score(tokens: Sequence[TokenLogprobs], label: str, scale: tuple[float, float],
               temperature: float) -> SoftScore:
    """The axis's soft score (module docstring), or a SoftScore with value None and the reason."""
    index = score_token_index(tokens, label)
    if index is None:
        return SoftScore(None, reason=f"no score token: no digit ending a token after {label!r}")
    try:
        top = tokens[index].top()
    except ParseError as exc:
        return SoftScore(None, token_index=index, reason=f"the logprobs listed at token {index} are unusable: {exc}")
    scores = range(math.ceil(scale[0]), math.floor(scale[1]) + 1)
    found = {str(s): top[str(s)] for s in scores
             if len(str(s)) == 1 and str(s) in top and math.isfinite(top[str(s)])}
    if not found:
        return SoftScore(None, token_index=index,
                         reason=f"none of the scale's digits is among the logprobs listed at token {index}")
    divisor = temperature if temperature > 0 else 1.0
    scaled = {digit: lp / divisor for digit, lp in found.items()}
    peak = max(scaled.values())
    weights = {digit: math.exp(v - peak) for digit, v in scaled.items()}
    best_digit = next(d for d in found if scaled[d] == peak)  # the lowest score on a tie, as the reference
    share = weights[best_digit] / sum(weights.values())
    best = int(best_digit)
    return SoftScore(round(best * share, 4), token_index=index, best=best, share=share, digit_logprobs=found)
