"""Read a critic's reply: optional `<think>` reasoning, then one JSON object that must conform
to the template's schema. Anything else is a `ParseError` (parse_error), never a default.

Cosmos-Reason1 writes `<think>...</think>` then `<answer>...</answer>`; the reasoning is kept as
text (never read for numbers) and the JSON is taken from the answer block, else from the rest.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ParseError
from .json_schema import field_value, validate

_THINK_RE = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_ANSWER_RE = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL)
_FENCE_RE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


@dataclass(frozen=True)
class Violation:
    label: str
    t_s: float | None
    valid_time: bool  # the timestamp lies within the clip the judge saw

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "t_s": self.t_s, "valid_time": self.valid_time}


@dataclass(frozen=True)
class Critique:
    obj: dict[str, Any]  # the reply's JSON object, as returned
    reasoning: str | None
    violations: list[Violation] = field(default_factory=list)


def split_reasoning(text: str) -> tuple[str | None, str]:
    """(the `<think>` text or None, the text that should hold the JSON)."""
    think = _THINK_RE.search(text)
    reasoning = think.group(1).strip() if think else None
    rest = text[think.end():] if think else text
    answer = _ANSWER_RE.search(rest)
    body = (answer.group(1) if answer else rest).strip()
    fenced = _FENCE_RE.match(body)
    return reasoning, fenced.group(1) if fenced else body


def parse_critique(text: str, schema: Mapping[str, Any], *, violations_field: str,
                   duration_s: float | None, reasoning: str | None = None) -> Critique:
    """Parse and check one reply; `reasoning` is the backend's separate reasoning text, if any.

    Violation timestamps are checked against `duration_s` (the clip the judge saw): one outside
    [0, duration] (or with no duration known) gets valid_time = False; null times are allowed.
    """
    think, body = split_reasoning(text)
    reasoning = reasoning or think
    facts = {"reasoning": reasoning} if reasoning else {}
    try:
        obj = json.loads(body, parse_constant=_refuse_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        raise ParseError(f"the reply is not a JSON object: {exc}", details=facts) from None
    problems = validate(obj, schema)
    if problems:
        shown = "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")
        raise ParseError(f"the reply does not conform to the template's schema: {shown}",
                         details={**facts, "rejected_critique": obj, "schema_errors": problems[:20]})
    violations = [_violation(v, duration_s) for v in field_value(obj, violations_field)]
    return Critique(obj=obj, reasoning=reasoning, violations=violations)


def _violation(item: Mapping[str, Any], duration_s: float | None) -> Violation:
    t = item.get("t_s")
    t_s = float(t) if t is not None else None
    valid = (t_s is not None and duration_s is not None and math.isfinite(t_s)
             and 0.0 <= t_s <= duration_s)
    return Violation(label=item["label"], t_s=t_s, valid_time=valid)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
