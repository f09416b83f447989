"""Read a comparative verdict from a generated reply: the text inside the answer tag (the first
`<answer>...</answer>`, as UnifiedReward-Think's `_extract_answer` takes it in Pref-GRPO's
`fastvideo/rewards/unifiedreward_think.py`) names the first image, the second, or a tie.

The phrases are the template's. As in Pref-GRPO, a phrase counts when the answer contains it,
checked in the order first, second, tie. Where Pref-GRPO reads a missing tag or an answer naming
neither image as a tie (0.5 each), here it is a `ParseError`: the comparison is masked, never a
tie the judge did not give.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .errors import ParseError

WINNERS = ("first", "second", "tie")


@dataclass(frozen=True)
class AnswerVerdict:
    winner: str  # "first" | "second" | "tie"
    answer: str  # the answer tag's text, stripped

    @property
    def p_first(self) -> float:
        """P(first shown is better) of this verdict: 1, 0, or 0.5 for a tie."""
        return {"first": 1.0, "second": 0.0, "tie": 0.5}[self.winner]

    def details(self) -> dict[str, Any]:
        return {"winner": self.winner, "answer": self.answer}


@functools.lru_cache(maxsize=64)
def _tag_pattern(tag: str) -> re.Pattern[str]:
    return re.compile(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", re.DOTALL)


def parse_answer_verdict(text: str | None, *, first: Sequence[str], second: Sequence[str],
                         tie: Sequence[str] = (), tag: str = "answer") -> AnswerVerdict:
    """The winner an answer tag names; `ParseError` when the reply has no such tag, or its
    answer contains none of the phrases."""
    if not first or not second:
        raise ValueError("a comparative verdict needs phrases for the first and the second image")
    if not isinstance(text, str):
        raise ParseError(f"comparative reply is not text: {type(text).__name__}")
    found = _tag_pattern(tag).search(text)
    if found is None:
        raise ParseError(f"no <{tag}>...</{tag}> in the reply ({len(text)} chars)",
                         details={"reply_chars": len(text)})
    answer = found.group(1).strip()
    for winner, phrases in zip(WINNERS, (first, second, tie)):
        if any(phrase in answer for phrase in phrases):
            return AnswerVerdict(winner, answer)
    allowed = [*first, *second, *tie]
    raise ParseError(f"the <{tag}> names no image: {answer[:120]!r} (expected one of {allowed})",
                     details={"answer": answer[:200]})
