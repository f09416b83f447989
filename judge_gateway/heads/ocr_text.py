"""OCR text-rendering reward: the target text of a prompt, and the reference's reward formula.

Reference (cosmos-rl's reward service, `model/ocr.py` 41-79): target = prompt.split('"')[1], the
text after the prompt's first double quote up to the next one (or to the end when there is no
second), as written (its spaces count in the length); recognised = all detected lines
concatenated; both with their ASCII spaces removed (`.replace(" ", "")`, nothing else) and
lowercased; distance 0 when the target is a substring of the recognised text, else the
Levenshtein distance clipped to the target length; reward = 1 - distance / max(1, len(raw target)).
A prompt with a double quote gets exactly that target. The reference knows no other quotes and
fails the request without one; we then take the earliest single or typographic quote pair
(stripped). A prompt without target text is `not_applicable`; so is a double-quoted target of
ASCII spaces only, which the reference scores 1.0 whatever the image shows (`reference_blank_reward`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# Other (opening, closing) pairs, when the prompt has no closed pair of double quotes: the
# earliest opening quote in the prompt wins.
_QUOTE_PAIRS = (("\u201c", "\u201d"), ("\u201e", "\u201c"), ("\u00ab", "\u00bb"),
                ("\u2018", "\u2019"), ("'", "'"))
# An apostrophe inside a word ("don't") does not open a quote.
_SINGLE_OPEN = re.compile(r"(?<![\w])'")


# What the reference scores a target of ASCII spaces only: "" is in any text, distance 0.
REFERENCE_BLANK_REWARD = 1.0


def extract_target_text(prompt: str) -> str | None:
    """The reference's target (after the first double quote up to the next or the end,
    unstripped; possibly blank), else the first span in other quotes (stripped); None when there is
    none."""
    parts = prompt.split('"')
    if len(parts) >= 2:
        return parts[1]
    best: tuple[int, str] | None = None
    for open_q, close_q in _QUOTE_PAIRS:
        if open_q == "'":
            m = _SINGLE_OPEN.search(prompt)
            start = m.start() if m else -1
        else:
            start = prompt.find(open_q)
        if start < 0:
            continue
        end = prompt.find(close_q, start + 1)
        # An apostrophe inside the quoted text ("Don't") does not close it.
        while close_q in ("'", "\u2019") and end >= 0 and end + 1 < len(prompt) and prompt[end + 1].isalnum():
            end = prompt.find(close_q, end + 1)
        if end < 0:
            continue
        text = prompt[start + 1 : end].strip()
        if text and (best is None or start < best[0]):
            best = (start, text)
    return best[1] if best else None


def is_blank_target(target: str) -> bool:
    """A target the reference reads as empty: ASCII spaces only (it removes nothing else)."""
    return _normalise(target) == ""


def _normalise(text: str) -> str:
    """The reference's normalisation: ASCII spaces removed, lowercased (a tab or a no-break space stays)."""
    return text.replace(" ", "").lower()


def levenshtein(a: str, b: str) -> int:
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def ocr_reward(target: str, recognised_lines: Sequence[str]) -> tuple[float, dict[str, object]]:
    """(reward in [0, 1], details) for one image."""
    recognised = "".join(recognised_lines)
    t, r = _normalise(target), _normalise(recognised)
    distance = 0 if t in r else min(levenshtein(t, r), len(t))
    reward = 1.0 - distance / max(1, len(target))
    return reward, {"target": target, "recognized": recognised, "edit_distance": distance}
