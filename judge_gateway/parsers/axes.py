"""Read a multi-axis reply: one `label: score` per axis, e.g. UnifiedReward-2.0's pointwise

    Alignment Score (1-5): 3.5
    Coherence Score (1-5): 4
    Style Score (1-5): 3

or VideoScore2's `visual quality: 4; text-to-video alignment: 3, physical/common-sense consistency: 4`
(on one line or several).

A number is read only right after an axis's label and a colon, never from prose. Text inside
`<think>...</think>` is reasoning, not the verdict, and is never read (a reasoning model writes
draft scores there); a reply that opens `<think>` and never closes it has no verdict at all.
An axis whose label is absent, or whose value is neither a number on the scale's terms nor an
allowed N/A, is reported missing (unreadable values also under `unreadable`); the judge's
missing policy decides what that costs. A number outside the scale is clamped into it and
reported under `clamped`, as the rubric parser does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import ParseError
from .rubric import NA, Unreadable, _check_scale, read_score_value

# A <think> block, closed; an opened one that is never closed swallows the rest of the reply.
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_MD = r"[ \t*_`]*"
OCCURRENCES = ("first", "last")


@dataclass(frozen=True)
class Axis:
    name: str
    label: str
    na_allowed: bool = False


@dataclass(frozen=True)
class AxesResult:
    """Per-axis scores read from one reply."""

    scores: dict[str, float | None]  # axis name -> score, None for N/A; only the axes found
    missing: list[str]  # axes without a readable score
    clamped: dict[str, float] = field(default_factory=dict)  # axis -> the number outside the scale
    unreadable: dict[str, str] = field(default_factory=dict)  # axis -> what its value said
    occurrences: dict[str, int] = field(default_factory=dict)  # axis -> how many labels were seen
    reasoning_skipped: bool = False  # the reply had a <think> block that was not read

    def details(self) -> dict[str, Any]:
        return {
            "axes": dict(self.scores),
            "missing": list(self.missing),
            "clamped": dict(self.clamped),
            "unreadable": dict(self.unreadable),
            "label_occurrences": dict(self.occurrences),
            "reasoning_skipped": self.reasoning_skipped,
        }


def verdict_text(text: str) -> tuple[str, bool]:
    """The part of a reply that may hold the verdict: without its <think> blocks. Raises
    ParseError when a <think> is opened and never closed (the reply was cut in its reasoning)."""
    body = _THINK_BLOCK.sub("\n", text)
    skipped = body != text
    opened = _THINK_OPEN.search(body)
    if opened is not None:
        raise ParseError("the reply opens <think> and never closes it: no verdict after the reasoning",
                         details={"reply_chars": len(text)})
    # A `</think>` with no opening tag (a chat template that put <think> in the prompt): the
    # reasoning is everything before it.
    closed = list(_THINK_CLOSE.finditer(body))
    if closed:
        body, skipped = body[closed[-1].end():], True
    return body, skipped


def _label_pattern(label: str) -> re.Pattern[str]:
    words = r"[ \t]+".join(re.escape(w) for w in label.split())
    return re.compile(rf"(?<![A-Za-z0-9]){_MD}{words}{_MD}:(?P<value>[^\n]*)", re.IGNORECASE)


def parse_axes(text: str, axes: Sequence[Axis], *, scale: tuple[float, float] = (1.0, 5.0),
               occurrence: str = "last") -> AxesResult:
    """Each axis's score from a reply; ParseError when no axis has one (or the reasoning never ends).

    `occurrence`: which readable `label:` of an axis counts when the reply states it more than
    once ("last": a model that restates its verdict ends with it; "first": VideoScore2's re.search).
    """
    lo, hi = _check_scale(scale)
    if occurrence not in OCCURRENCES:
        raise ValueError(f"occurrence must be one of {OCCURRENCES}, got {occurrence!r}")
    if not axes:
        raise ValueError("axes must name at least one axis")
    if not isinstance(text, str):
        raise ParseError(f"multi-axis reply is not text: {type(text).__name__}",
                         details={"missing": [a.name for a in axes]})
    body, skipped = verdict_text(text.replace("\r\n", "\n").replace("\r", "\n"))
    # Longest labels first: "text-to-video alignment" must not be read as an axis "alignment".
    taken: list[tuple[int, int]] = []
    scores: dict[str, float | None] = {}
    clamped: dict[str, float] = {}
    unreadable: dict[str, str] = {}
    occurrences: dict[str, int] = {}
    for axis in sorted(axes, key=lambda a: len(a.label), reverse=True):
        found = [m for m in _label_pattern(axis.label).finditer(body)
                 if not any(start <= m.start("value") - 1 < end for start, end in taken)]
        occurrences[axis.name] = len(found)
        taken += [(m.start(), m.start("value")) for m in found]
        values = []
        for match in found:
            raw = _first_value(match["value"])
            values.append((raw, read_score_value(raw, hi=hi, allow_na=axis.na_allowed)))
        readable = [(raw, v) for raw, v in values if not isinstance(v, Unreadable)]
        if not readable:
            if values:
                unreadable[axis.name] = values[0][0].strip()[:200]
            continue
        _, value = readable[0] if occurrence == "first" else readable[-1]
        if value is not NA and not lo <= value <= hi:
            clamped[axis.name] = value
            value = min(max(value, lo), hi)
        scores[axis.name] = value
    order = [a.name for a in axes]
    scores = {name: scores[name] for name in order if name in scores}
    missing = [name for name in order if name not in scores]
    if not scores:
        raise ParseError(
            f"no axis score found (labels {[a.label for a in axes]}; reply of {len(text)} chars"
            f"{', its <think> reasoning not read' if skipped else ''})",
            details={"missing": missing, "unreadable": unreadable, "reasoning_skipped": skipped,
                     "reply_chars": len(text)})
    return AxesResult(scores, missing, clamped, unreadable, occurrences, skipped)


def _first_value(rest: str) -> str:
    """The value after a label: up to the next `;` or `,` that is not part of the number (VideoScore2
    separates its axes with them on one line)."""
    return re.split(r"[;,](?!\d)", rest, maxsplit=1)[0]
