"""A RationalRewards reply read as Flow-Factory's reward models read it, for its legacy profiles.

Flow-Factory's RationalRewards{T2I,Edit}RewardModel (src/flow_factory/rewards/
rational_rewards_t2i.py 59-204, rational_rewards_edit.py 121-248, at a0b2bc5) read a reply its own
way, which differs from our rubric parser on some layouts (bold or unnumbered headers, a bold
score): the text before `# Summary:` is cut into one block per aspect at lines starting with the
aspect's number and containing its title; without any such line, at the first occurrences of
"Title:" in order; in each block the first line matching `(?:##\\s*)?Score\\s*:\\s*(.+)$` (any case)
whose value is "N/A" or starts with a plain number counts; each number is clamped to [1, 4]; the
reward is (mean - 1) / 3, clamped to [0, 1]. No usable aspect: None (the model returns 0.0, a
constant for a reply it cannot read; the judge's own reading and validity decide then).

Our rubric judge stays the native reading (`valid`, `details`); this number goes into
`details.peer_reward`, which a Flow-Factory profile with `peer_source` reports.
"""

from __future__ import annotations

import math
import re

# (number prefix, title, aspect key) per rubric, in Flow-Factory's order
RATIONAL_SECTIONS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "flow_factory_rational_rewards_t2i": (("1.", "Text Faithfulness", "text_faithfulness"),
                                          ("2.", "Physical and Visual Quality", "physical_quality"),
                                          ("3.", "Text Rendering", "text_rendering")),
    "flow_factory_rational_rewards_edit": (("1.", "Text Faithfulness", "text_faithfulness"),
                                           ("2.", "Image Faithfulness", "image_faithfulness"),
                                           ("3.", "Physical and Visual Quality", "physical_quality"),
                                           ("4.", "Text Rendering", "text_rendering")),
}
PEER_READINGS = tuple(RATIONAL_SECTIONS)

_SCORE_LINE = re.compile(r"(?:##\s*)?Score\s*:\s*(.+)$", re.IGNORECASE)
_LEADING_NUMBER = re.compile(r"^\s*(\d+(?:\.\d+)?)")


def _value(text: str) -> float | str | None:
    """extract_numeric_score on a string: "N/A", a leading plain number, else None (not a score)."""
    if text == "N/A":
        return "N/A"
    match = _LEADING_NUMBER.match(text.strip())
    return float(match.group(1)) if match else None


def _block_score(block: str) -> float | str | None:
    for line in block.split("\n"):
        match = _SCORE_LINE.search(line.strip())
        if match:
            value = _value(match.group(1).strip())
            if value is not None:
                return value
    return None


def rational_aspects(text: str, reading: str) -> dict[str, float | str | None]:
    """Per aspect: its number, "N/A", or None (absent), as Flow-Factory's parser reads the reply."""
    sections = RATIONAL_SECTIONS[reading]
    body = text.split("# Summary:")[0] if "# Summary:" in text else text
    blocks: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    for raw in body.split("\n"):
        stripped = raw.strip()
        hit = next((key for number, title, key in sections if stripped.startswith(number) and title in stripped), None)
        if hit is not None:
            if current:
                blocks[current] = "\n".join(lines)
            current, lines = hit, [raw]
        elif current:
            lines.append(raw)
    if current:
        blocks[current] = "\n".join(lines)
    titles = [f"{title}:" for _, title, _ in sections]
    if not blocks and titles[0] in body:
        rest = body.partition(titles[0])[2]
        for (_, _, key), following in zip(sections, titles[1:] + [""]):
            if following and following in rest:
                blocks[key], _, rest = rest.partition(following)
            else:
                blocks[key], rest = rest, ""
    result: dict[str, float | str | None] = {key: None for _, _, key in sections}
    for key, block in blocks.items():
        value = _block_score(block)
        if value is not None:
            result[key] = value
    return result


def rational_reward(text: str, reading: str) -> float | None:
    """Flow-Factory's reward for the reply: (mean of the usable aspects, each clamped to [1, 4], - 1) / 3,
    clamped to [0, 1]; None where it has no usable aspect (its model returns 0.0 there)."""
    numbers = [max(1.0, min(4.0, float(v))) for v in rational_aspects(text, reading).values()
               if v is not None and v != "N/A" and math.isfinite(float(v))]
    if not numbers:
        return None
    return max(0.0, min(1.0, (sum(numbers) / len(numbers) - 1.0) / 3.0))
