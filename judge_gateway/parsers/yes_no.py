"""Read a one-token Yes/No answer from the next-token distribution (top-K logprobs).

The probability of an answer is summed over every case/space variant of its word found in the
top-K ("Yes", " yes", "YES", "Ġyes", "Yes." ...), because tokenizers split the same answer into
several token ids and counting only the exact "Yes" understates it. The summed mass of both
answers is reported: when it is small, the model did not answer the question, and the result is
an `answer_missing` error rather than a confident-looking 0 or 1.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import ANSWER_MISSING, ParseError

# Markers BPE/SentencePiece tokenizers put in token text for a leading space or newline.
_BPE_MARKERS = "Ġ▁Ċĉ"
_TRAILING_PUNCT = ".,!:;"
# A logprob is log(p) <= 0; allow float noise above 0, reject anything larger.
_LOGPROB_TOLERANCE = 1e-6

_POSITIVE_CHOICES = ("yes", "no")


@dataclass(frozen=True)
class YesNoResult:
    """The Yes/No reading of one reply."""

    p_yes: float  # summed probability of every variant of the yes-word(s) in the top-K
    p_no: float
    answer_mass: float  # p_yes + p_no
    p_positive: float  # P(positive answer) / answer_mass, in [0, 1]
    positive: str  # "yes" or "no": which answer is the good one (from the template)
    logprob_yes: float | None  # log(p_yes), None when p_yes == 0
    logprob_no: float | None
    matched: dict[str, float] = field(default_factory=dict)  # token text -> prob, counted variants

    def details(self) -> dict[str, Any]:
        """JSON-able facts for the score's `details`."""
        return {
            "p_yes": self.p_yes,
            "p_no": self.p_no,
            "answer_mass": self.answer_mass,
            "p_positive": self.p_positive,
            "positive": self.positive,
            "logprob_yes": self.logprob_yes,
            "logprob_no": self.logprob_no,
            "matched": dict(self.matched),
        }


def normalize_token(token: str) -> str:
    """Reduce a token's text to the bare word it spells: no space markers, case or final stop."""
    text = token.strip().strip(_BPE_MARKERS).strip()
    text = text.casefold().rstrip(_TRAILING_PUNCT)
    return text.strip().strip(_BPE_MARKERS).strip()


def parse_yes_no(
    top_logprobs: Any,
    *,
    positive: str = "yes",
    yes_words: Sequence[str] = ("yes",),
    no_words: Sequence[str] = ("no",),
    min_answer_mass: float = 0.5,
) -> YesNoResult:
    """Score a one-token Yes/No answer from the candidates at the first generated position.

    `top_logprobs` may be a list of objects with `.token`/`.logprob` (the `openai` package's
    `choice.logprobs.content[0].top_logprobs`), a list of `{"token", "logprob"}` dicts, a list of
    `(token, logprob)` pairs, or a mapping token -> logprob.

    Raises `ParseError` (`parse_error`) for an empty or unusable candidate list and
    (`answer_missing`) when P(yes) + P(no) < `min_answer_mass` or is zero.
    """
    positive_word = _check_positive(positive)
    yes_set = _word_set(yes_words, "yes_words")
    no_set = _word_set(no_words, "no_words")
    if yes_set & no_set:
        raise ValueError(f"yes_words and no_words overlap: {sorted(yes_set & no_set)}")
    if isinstance(min_answer_mass, bool) or not (
        isinstance(min_answer_mass, numbers.Real) and 0.0 <= min_answer_mass <= 1.0
    ):
        raise ValueError(f"min_answer_mass must be in [0, 1], got {min_answer_mass!r}")

    candidates = _candidates(top_logprobs)

    p_yes = 0.0
    p_no = 0.0
    matched: dict[str, float] = {}
    # Every entry counts once, even when two token ids share the same text (vLLM reports both).
    for token, logprob in candidates:
        word = normalize_token(token)
        if word in yes_set or word in no_set:
            prob = math.exp(logprob)
            if word in yes_set:
                p_yes += prob
            else:
                p_no += prob
            matched[token] = matched.get(token, 0.0) + prob

    answer_mass = p_yes + p_no
    if answer_mass <= 0.0 or answer_mass < min_answer_mass:
        raise ParseError(
            f"yes/no answer mass {answer_mass:.4g} is below the floor {min_answer_mass:.4g} "
            f"among {len(candidates)} candidates (p_yes={p_yes:.4g}, p_no={p_no:.4g})",
            code=ANSWER_MISSING,
            details={
                "p_yes": p_yes,
                "p_no": p_no,
                "answer_mass": answer_mass,
                "min_answer_mass": float(min_answer_mass),
                "matched": matched,
                "top_tokens": [token for token, _ in candidates[:5]],
            },
        )

    p_good = p_yes if positive_word == "yes" else p_no
    # Clamp: float rounding must not push a probability past [0, 1].
    p_positive = min(1.0, max(0.0, p_good / answer_mass))
    return YesNoResult(
        p_yes=p_yes,
        p_no=p_no,
        answer_mass=answer_mass,
        p_positive=p_positive,
        positive=positive_word,
        logprob_yes=math.log(p_yes) if p_yes > 0.0 else None,
        logprob_no=math.log(p_no) if p_no > 0.0 else None,
        matched=matched,
    )


def _check_positive(positive: str) -> str:
    word = positive.strip().casefold() if isinstance(positive, str) else positive
    if word not in _POSITIVE_CHOICES:
        raise ValueError(f"positive must be 'yes' or 'no', got {positive!r}")
    return word


def _word_set(words: Sequence[str], name: str) -> frozenset[str]:
    if isinstance(words, str):
        words = (words,)  # a bare string would otherwise be split into letters
    if not words or not all(isinstance(w, str) for w in words):
        raise ValueError(f"{name} must be a non-empty list of words, got {words!r}")
    normalized = frozenset(normalize_token(w) for w in words)
    if "" in normalized:
        raise ValueError(f"{name} contains an empty word: {words!r}")
    return normalized


def _candidates(top_logprobs: Any) -> list[tuple[str, float]]:
    """Turn any accepted candidate shape into checked (token, logprob) pairs."""
    if top_logprobs is None:
        raise ParseError("no top logprobs in the reply (was logprobs requested?)")
    if isinstance(top_logprobs, Mapping):
        entries: Iterable[Any] = list(top_logprobs.items())
    elif isinstance(top_logprobs, (str, bytes)):
        raise ParseError(
            f"top logprobs must be a list of candidates, got {type(top_logprobs).__name__}"
        )
    else:
        try:
            entries = list(top_logprobs)
        except TypeError:
            raise ParseError(
                f"top logprobs must be a list of candidates, got {type(top_logprobs).__name__}"
            ) from None
    pairs = [_pair(entry, index) for index, entry in enumerate(entries)]
    if not pairs:
        raise ParseError("the reply's top logprobs list is empty")
    return pairs


def _pair(entry: Any, index: int) -> tuple[str, float]:
    if isinstance(entry, Mapping):
        if "token" not in entry or "logprob" not in entry:
            raise ParseError(f"candidate {index} lacks 'token'/'logprob': {entry!r}")
        token, logprob = entry["token"], entry["logprob"]
    elif isinstance(entry, tuple) and len(entry) == 2:
        token, logprob = entry
    elif hasattr(entry, "token") and hasattr(entry, "logprob"):
        token, logprob = entry.token, entry.logprob
    else:
        raise ParseError(f"candidate {index} is not a (token, logprob) entry: {entry!r}")

    if not isinstance(token, str):
        raise ParseError(f"candidate {index} token is not text: {token!r}")
    if isinstance(logprob, bool) or not isinstance(logprob, numbers.Real):
        raise ParseError(f"candidate {index} ({token!r}) has a non-numeric logprob: {logprob!r}")
    logprob = float(logprob)
    if math.isnan(logprob) or logprob > _LOGPROB_TOLERANCE:
        raise ParseError(f"candidate {index} ({token!r}) has an unusable logprob: {logprob!r}")
    # Float noise just above 0 means probability 1, not more.
    return token, min(logprob, 0.0)
