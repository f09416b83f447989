"""Read the one number a UnifiedReward-style reply ends with: `Final Score: 4.5`.

The reference regex (`Final Score:\\s*([1-5](\\.\\d+)?)`) maps a miss to 0.0; here a miss, an N/A
or a number off the declared scale is a `ParseError`, never a score.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from .errors import ParseError
from .rubric import Unreadable, read_score_value


@dataclass(frozen=True)
class FinalScoreResult:
    """The final score of one reply."""

    score: float  # on the declared scale
    scale: tuple[float, float]
    normalized: float  # (score - lo) / (hi - lo)
    occurrences: int = 1  # how many times the label appeared (the last one counts)

    def details(self) -> dict[str, Any]:
        """JSON-able facts for the score's `details`."""
        return {
            "final_score": self.score,
            "scale": list(self.scale),
            "normalized": self.normalized,
            "label_occurrences": self.occurrences,
        }


def parse_final_score(
    text: str,
    *,
    scale: tuple[float, float] = (1.0, 5.0),
    label: str = "Final Score",
    occurrence: str = "last",
) -> FinalScoreResult:
    """Take the number after the last `<label>:` (models sometimes restate it; `occurrence =
    "first"`: the first, as cosmos-rl's unified_reward reads it) on `scale`.

    Tolerates markdown (`**Final Score:** 4`, `Final Score: **4.5**`), `4/5`, `4.5 / 5` and a
    trailing period. Raises `ParseError` when the label is absent, its value is not a number
    (N/A included), or the number is off the scale (never clamped: the reference would reject it).
    """
    lo, hi = _check_scale(scale)
    if not isinstance(label, str) or not label.strip():
        raise ValueError(f"label must be non-empty text, got {label!r}")
    if text is None or not isinstance(text, str):
        raise ParseError(f"final-score reply is not text: {type(text).__name__}")

    body = text.replace("\r\n", "\n").replace("\r", "\n")
    pattern = _label_pattern(label)
    found = list(pattern.finditer(body))
    if not found:
        raise ParseError(
            f"no '{label}:' in the reply ({len(text)} chars)",
            details={"label": label, "reply_chars": len(text)},
        )

    if occurrence not in ("last", "first"):
        raise ValueError(f"occurrence must be 'last' or 'first', got {occurrence!r}")
    last = found[-1] if occurrence == "last" else found[0]
    raw = last["value"]
    if raw.strip(" \t*_`[]"):
        value = read_score_value(raw, hi=hi, allow_na=False)
    else:
        # `Final Score:` with the number alone on the next non-blank line; nothing further away.
        following = next((line for line in body[last.end() :].split("\n") if line.strip()), "")
        raw = following
        value = read_score_value(following, hi=hi, allow_na=False, whole=True)

    if isinstance(value, Unreadable) or value is None:
        raise ParseError(
            f"'{label}:' is not followed by a number on {lo:g}-{hi:g}: {raw.strip()[:80]!r}",
            details={
                "label": label,
                "value_text": raw.strip()[:200],
                "label_occurrences": len(found),
            },
        )
    if not lo <= value <= hi:
        raise ParseError(
            f"'{label}: {value:g}' is outside the scale {lo:g}-{hi:g}",
            details={
                "label": label,
                "value": value,
                "scale": [lo, hi],
                "label_occurrences": len(found),
            },
        )
    return FinalScoreResult(
        score=value,
        scale=(lo, hi),
        normalized=(value - lo) / (hi - lo),
        occurrences=len(found),
    )


def _check_scale(scale: tuple[float, float]) -> tuple[float, float]:
    lo, hi = (float(x) for x in scale)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"scale must be finite (lo, hi) with lo < hi, got {scale!r}")
    return lo, hi


def _label_pattern(label: str) -> re.Pattern[str]:
    """`<label>:` anywhere in a line, markdown allowed around it; the value is the line's rest."""
    words = r"[ \t]+".join(re.escape(w) for w in label.split())
    return re.compile(
        rf"(?<![A-Za-z0-9]){words}[ \t*_`]*:(?P<value>[^\n]*)",
        re.IGNORECASE,
    )
