"""Parse a RationalRewards-style critique into per-aspect scores.

The reply is a long critique: `# User Request Analysis`, `# Detailed Judgement` with one numbered
section per aspect (`1. Text Faithfulness:` / `## Justification: ...` / `## Score: 3.5`), then
`# Summary:` and `# User Request Refinement:`. Only the judgement part carries scores; the rest
is prose that may mention aspects and numbers and is never read.

A number is taken only from a line whose label is `Score`, never from prose: a justification that
says "I would give it 2" must not become a reward. An aspect without a readable Score line is
reported missing (not guessed); the judge decides what a partial rubric is worth.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import ParseError

NA = None  # an aspect the judge marked N/A has value None

# Markdown emphasis / code marks that may wrap labels and values, as one character class with
# blanks: adjacent `[ \t]*` and `[*_`]*` runs would backtrack quadratically on long blank lines.
_MD_BLANK = r"[ \t*_`]*"

# `# Detailed Judgement` (or Judgment), as a header line of its own, with optional markdown.
_JUDGEMENT_HEADER = re.compile(
    r"^[ \t#*_`]*detailed[ \t]+judge?ment[ \t*_`:]*$",
    re.IGNORECASE | re.MULTILINE,
)

# A line whose label is Score: `## Score: 3.5`, `**Score:** 3.5`, `- Score (1-4): 3`.
_SCORE_LINE = re.compile(
    rf"^[ \t>#*_+\-]*score[ \t]*(?:\([^)\n]*\))?{_MD_BLANK}:(?P<value>.*)$",
    re.IGNORECASE,
)

# A markdown `#` header line; its label decides whether it ends the current aspect section.
_HASH_HEADER = re.compile(r"^[ \t]*#+[ \t]*(?P<label>.*)$")
_IN_SECTION_LABELS = ("justification", "score", "reason", "analysis", "explanation")

_NA_VALUE = re.compile(
    r"^(?:n[ \t]*/[ \t]*a|n\.a\.?|na|not[ \t_-]+applicable)(?![a-z0-9])", re.IGNORECASE
)
_NUMBER_VALUE = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:[ \t]*/[ \t]*(?P<den>\d+(?:\.\d*)?))?"
    r"(?![0-9A-Za-z])"
)
_VALUE_WRAPPERS = " \t*_`[]"

_NO_SCORE = object()  # a section with no Score line at all


@dataclass(frozen=True)
class Unreadable:
    """A Score value that is neither a number nor N/A; keeps what the model wrote, to report."""

    text: str


def read_score_value(
    raw: str, *, hi: float, allow_na: bool = True, whole: bool = False
) -> float | None | Unreadable:
    """Read the value after a `Score:` label: a number, N/A (None), or Unreadable.

    Tolerates markdown (`**3.5**`), brackets (`[3.5]`), trailing prose (`3.5 (minor flaws)`) and
    an out-of form (`3.5/4`, `3.5 / 4.0`). An out-of denominator other than the scale's top
    means another scale: that number is not guessed into this one. With `whole`, nothing but
    the value (and a final period) may be on the line.
    """
    value = raw.strip(_VALUE_WRAPPERS)
    match = _NA_VALUE.match(value) if allow_na else None
    number: float | None = NA
    if match is None:
        match = _NUMBER_VALUE.match(value)
        if match is None:
            return Unreadable(raw.strip())
        number = float(match["num"])
        den = match["den"]
        if den is not None and not math.isclose(float(den), hi):
            return Unreadable(raw.strip())
    if whole and value[match.end() :].strip(_VALUE_WRAPPERS + "."):
        return Unreadable(raw.strip())
    return number


@dataclass(frozen=True)
class RubricResult:
    """Per-aspect scores read from one critique."""

    scores: dict[str, float | None]  # canonical aspect name -> score, or None for N/A; only found
    missing: list[str]  # expected aspects not found at all
    clamped: dict[str, float]  # aspects whose number was outside the scale -> the original number
    # Aspects whose Score line held neither a number nor N/A -> what it said (also in `missing`).
    unreadable: dict[str, str] = field(default_factory=dict)

    def details(self) -> dict[str, Any]:
        """JSON-able facts for the score's `details`."""
        return {
            "aspect_scores": dict(self.scores),
            "missing": list(self.missing),
            "clamped": dict(self.clamped),
            "unreadable": dict(self.unreadable),
        }


def parse_rubric(
    text: str,
    aspects: Sequence[str],
    *,
    scale: tuple[float, float] = (1.0, 4.0),
    stop_markers: Sequence[str] = ("# Summary", "# User Request Refinement"),
) -> RubricResult:
    """Read each expected aspect's score from a RationalRewards-style critique.

    Returns the aspects found (N/A as None), the missing ones, and the out-of-scale numbers that
    were clamped into `scale`. Raises `ParseError` only when no expected aspect has a score.
    """
    names = _check_aspects(aspects)
    lo, hi = _check_scale(scale)
    if text is None or not isinstance(text, str):
        raise ParseError(
            f"rubric reply is not text: {type(text).__name__}", details={"missing": names}
        )

    body = text.replace("\r\n", "\n").replace("\r", "\n")
    headers = [(name, _header_pattern(name)) for name in sorted(names, key=len, reverse=True)]
    body, has_judgement_header = _judgement_region(body, headers, stop_markers)
    sections = _split_sections(body.split("\n"), headers)

    scores: dict[str, float | None] = {}
    clamped: dict[str, float] = {}
    unreadable: dict[str, str] = {}
    for name in names:
        value = _first_score(sections.get(name, []), hi)
        if value is _NO_SCORE:
            continue
        if isinstance(value, Unreadable):
            unreadable[name] = value.text
            continue
        if value is not NA and not lo <= value <= hi:
            clamped[name] = value
            value = min(max(value, lo), hi)
        scores[name] = value

    missing = [name for name in names if name not in scores]
    if not scores:
        raise ParseError(
            f"no rubric aspect score found (expected {names}; "
            f"{'judgement header present' if has_judgement_header else 'no judgement header'}, "
            f"sections seen: {sorted(sections) or 'none'}, reply of {len(text)} chars)",
            details={
                "missing": missing,
                "unreadable": unreadable,
                "sections_seen": sorted(sections),
                "judgement_header": has_judgement_header,
                "reply_chars": len(text),
            },
        )
    return RubricResult(scores=scores, missing=missing, clamped=clamped, unreadable=unreadable)


def _check_aspects(aspects: Sequence[str]) -> list[str]:
    if isinstance(aspects, str) or not aspects:
        raise ValueError(f"aspects must be a non-empty list of names, got {aspects!r}")
    names = [a.strip() if isinstance(a, str) else a for a in aspects]
    if not all(isinstance(a, str) and a for a in names):
        raise ValueError(f"aspect names must be non-empty text, got {list(aspects)!r}")
    folded = [" ".join(a.casefold().split()) for a in names]
    if len(set(folded)) != len(folded):
        raise ValueError(f"aspect names repeat: {list(aspects)!r}")
    return names


def _check_scale(scale: tuple[float, float]) -> tuple[float, float]:
    lo, hi = (float(x) for x in scale)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"scale must be finite (lo, hi) with lo < hi, got {scale!r}")
    return lo, hi


def _header_pattern(name: str) -> re.Pattern[str]:
    """An aspect header line: `1. Name:`, `**1. Name**:`, `### 2. Name`, `Name:` ...

    The name must start the header and be followed by a separator or the line's end, so that
    "Quality" never matches "Physical and Visual Quality" and "Text" never "Text Rendering".
    """
    words = [r"(?:and|&)" if w.casefold() == "and" else re.escape(w) for w in name.split()]
    spaced_name = r"[ \t]+".join(words)
    return re.compile(
        rf"^(?P<pre>[#>*_+\- \t]*?)"
        rf"(?:(?P<num>\d{{1,2}})[.)]{_MD_BLANK})?"
        rf"(?P<name>{spaced_name})"
        rf"{_MD_BLANK}(?P<sep>:|\(|[-–—]|$)(?P<rest>.*)$",
        re.IGNORECASE,
    )


def _match_header(line: str, headers: list[tuple[str, re.Pattern[str]]]) -> str | None:
    """The aspect a line heads, or None when it is not an aspect header."""
    for name, pattern in headers:
        match = pattern.match(line)
        if match is None:
            continue
        decorated = match["num"] is not None or any(c in match["pre"] for c in "#*_")
        rest = match["rest"].strip(" \t*_:`")
        # A bare "Text Rendering: no text was asked for." is prose, not a header.
        if decorated or not rest or match["sep"] == "(":
            return name
    return None


def _stop_pattern(marker: str) -> re.Pattern[str]:
    """A stop marker as a line start; `# Summary` also matches `## Summary` and `**Summary**`."""
    word = marker.lstrip("#").strip()
    if marker.startswith("#") and word:
        return re.compile(
            rf"^[ \t]*(?:#+|\*\*|__){_MD_BLANK}{re.escape(word)}(?![A-Za-z0-9])",
            re.IGNORECASE | re.MULTILINE,
        )
    return re.compile(rf"^[ \t]*{re.escape(marker)}", re.IGNORECASE | re.MULTILINE)


def _judgement_region(
    body: str,
    headers: list[tuple[str, re.Pattern[str]]],
    stop_markers: Sequence[str],
) -> tuple[str, bool]:
    """The text between the start of the judgement and the first stop marker after it."""
    header = _JUDGEMENT_HEADER.search(body)
    if header is not None:
        start = header.end()
    else:
        # No header: the judgement starts at the first aspect header, so a stop marker that
        # comes before it (a summary written first) does not erase the scores.
        start = 0
        offset = 0
        for line in body.split("\n"):
            if _match_header(line, headers) is not None:
                start = offset
                break
            offset += len(line) + 1
    end = len(body)
    for marker in stop_markers:
        found = _stop_pattern(marker).search(body, start)
        if found is not None:
            end = min(end, found.start())
    return body[start:end], header is not None


def _split_sections(
    lines: list[str], headers: list[tuple[str, re.Pattern[str]]]
) -> dict[str, list[list[str]]]:
    """Aspect name -> the body lines of each of its sections, in reply order."""
    sections: dict[str, list[list[str]]] = {}
    current: list[str] | None = None
    for line in lines:
        name = _match_header(line, headers)
        if name is not None:
            current = []
            sections.setdefault(name, []).append(current)
            continue
        hash_header = _HASH_HEADER.match(line)
        if hash_header is not None:
            label = hash_header["label"].strip(" \t*_").casefold()
            if not label.startswith(_IN_SECTION_LABELS):
                # An unexpected `#` section ends the aspect: its numbers are not this aspect's.
                current = None
                continue
        if current is not None:
            current.append(line)
    return sections


def _first_score(blocks: list[list[str]], hi: float) -> object:
    """Duplicated sections: the first one that has a Score line decides."""
    for lines in blocks:
        value = _section_score(lines, hi)
        if value is not _NO_SCORE:
            return value
    return _NO_SCORE


def _section_score(lines: list[str], hi: float) -> object:
    """The value of a section's first readable Score line (as the RationalRewards reference
    parser, an unreadable one is passed over for a later one), else the first unreadable value,
    else _NO_SCORE when the section has no Score line."""
    unreadable: Unreadable | None = None
    for index, line in enumerate(lines):
        match = _SCORE_LINE.match(line)
        if match is None:
            continue
        raw = match["value"]
        if not raw.strip(_VALUE_WRAPPERS):
            # `## Score:` with the number alone on the next non-blank line.
            following = next((later for later in lines[index + 1 :] if later.strip()), "")
            value = read_score_value(following, hi=hi, whole=True)
        else:
            value = read_score_value(raw, hi=hi)
        if not isinstance(value, Unreadable):
            return value
        unreadable = unreadable or value
    return unreadable if unreadable is not None else _NO_SCORE
