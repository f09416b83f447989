"""Read a one-token Yes/No answer from the next-token distribution (top-K logprobs).

Two ways to count an answer (`counting`):

- `variants` (ours, the default): the probability of an answer is summed over every case/space
  variant of its word found in the top-K ("Yes", " yes", "YES", "Ġyes", "Yes." ...), because
  tokenizers split the same answer into several token ids and counting only the exact "Yes"
  understates it.
- `exact` (Flow-Factory's `vllm_evaluate` default): only the tokens spelled exactly as the
  template's answer words count ("Yes", "No"); when one text is listed twice the last entry wins,
  as in the dict that code builds. The reward is sigmoid(logprob_yes - logprob_no).

The summed (listed) mass of both answers is reported as `answer_mass`: when it is below the
floor, or both answers are absent from the top-K, the model did not answer the question, and
the result is an `answer_missing` error rather than a confident-looking 0 or 1.

One answer absent from the top-K is not missing: the judge is sure of the other one. The absent
answer's probability is at most that of the smallest listed entry (every unlisted token ranks
below it) and at most the mass the list leaves over (1 - listed mass, plus 1e-6 of slack for the
float32 rounding of the listed logprobs: a near-certain answer's list can sum past 1). That bound is used as its probability, so the
reward is valid and close to (not exactly) 1 or 0, and `bounded_answer` / `bound` say so.
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

_UNLISTED_SLACK = 1e-6

_POSITIVE_CHOICES = ("yes", "no")
COUNTING_MODES = ("variants", "exact")


@dataclass(frozen=True)
class YesNoResult:
    """The Yes/No reading of one reply."""

    p_yes: float  # probability of the yes-word(s): listed mass, or the bound when absent
    p_no: float
    answer_mass: float  # listed mass of both answers (what the floor is checked against)
    p_positive: float  # P(positive answer) / (p_yes + p_no), in [0, 1]
    positive: str  # "yes" or "no": which answer is the good one (from the template)
    logprob_yes: float | None  # log(p_yes) (the bound's log when absent), None when p_yes == 0
    logprob_no: float | None
    matched: dict[str, float] = field(default_factory=dict)  # token text -> prob, counted entries
    counting: str = "variants"
    bounded_answer: str | None = None  # "yes"/"no": absent from the top-K, its p is the bound
    bound_rule: str | None = None  # "min_listed" or "unlisted_mass": which bound was tighter

    def details(self) -> dict[str, Any]:
        """JSON-able facts for the score's `details`."""
        bound = None
        if self.bounded_answer is not None:
            bound = self.p_yes if self.bounded_answer == "yes" else self.p_no
        return {
            "p_yes": self.p_yes,
            "p_no": self.p_no,
            "answer_mass": self.answer_mass,
            "p_positive": self.p_positive,
            "positive": self.positive,
            "logprob_yes": self.logprob_yes,
            "logprob_no": self.logprob_no,
            "matched": dict(self.matched),
            "counting": self.counting,
            "bounded_answer": self.bounded_answer,
            "bound": bound,
            "bound_rule": self.bound_rule,
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
    counting: str = "variants",
) -> YesNoResult:
    """Score a one-token Yes/No answer from the candidates at the first generated position.

    `top_logprobs` may be a list of objects with `.token`/`.logprob` (the `openai` package's
    `choice.logprobs.content[0].top_logprobs`), a list of `{"token", "logprob"}` dicts, a list of
    `(token, logprob)` pairs, or a mapping token -> logprob.

    Raises `ParseError` (`parse_error`) for an empty or unusable candidate list and
    (`answer_missing`) when both answers are absent or their listed mass is below
    `min_answer_mass` or zero.
    """
    positive_word = _check_positive(positive)
    if counting not in COUNTING_MODES:
        raise ValueError(f"counting must be one of {list(COUNTING_MODES)}, got {counting!r}")
    yes_set = _word_set(yes_words, "yes_words")
    no_set = _word_set(no_words, "no_words")
    if yes_set & no_set:
        raise ValueError(f"yes_words and no_words overlap: {sorted(yes_set & no_set)}")
    if isinstance(min_answer_mass, bool) or not (
        isinstance(min_answer_mass, numbers.Real) and 0.0 <= min_answer_mass <= 1.0
    ):
        raise ValueError(f"min_answer_mass must be in [0, 1], got {min_answer_mass!r}")

    candidates = _candidates(top_logprobs)
    if counting == "exact":
        yes_entries = _exact_entries(candidates, _raw_words(yes_words))
        no_entries = _exact_entries(candidates, _raw_words(no_words))
    else:
        # Every entry counts once, even when two token ids share the same text (vLLM reports both).
        yes_entries = [(t, lp) for t, lp in candidates if normalize_token(t) in yes_set]
        no_entries = [(t, lp) for t, lp in candidates if normalize_token(t) in no_set]
    matched: dict[str, float] = {}
    for token, logprob in yes_entries + no_entries:
        matched[token] = matched.get(token, 0.0) + math.exp(logprob)

    lp_yes = _logsumexp([lp for _, lp in yes_entries])
    lp_no = _logsumexp([lp for _, lp in no_entries])
    answer_mass = math.exp(lp_yes) + math.exp(lp_no)
    if answer_mass <= 0.0 or answer_mass < min_answer_mass:
        details: dict[str, Any] = {
            "p_yes": math.exp(lp_yes),
            "p_no": math.exp(lp_no),
            "answer_mass": answer_mass,
            "min_answer_mass": float(min_answer_mass),
            "matched": matched,
            "counting": counting,
            "top_tokens": [token for token, _ in candidates[:5]],
        }
        if yes_entries and no_entries:
            # The model did not answer the question: invalid. The two-way numbers still go into
            # the details: a peer that reads the pair whatever its mass (cosmos-rl's softmax over
            # the "Yes"/"No" logits) reports them, and so do its legacy keys.
            details |= {"p_positive": _two_way(lp_yes, lp_no, positive_word, counting),
                        "logprob_yes": lp_yes, "logprob_no": lp_no}
        raise ParseError(
            f"yes/no answer mass {answer_mass:.4g} is below the floor {min_answer_mass:.4g} "
            f"among {len(candidates)} candidates (p_yes={math.exp(lp_yes):.4g}, "
            f"p_no={math.exp(lp_no):.4g}, counting={counting})",
            code=ANSWER_MISSING,
            details=details,
        )

    bounded: str | None = None
    rule: str | None = None
    if not yes_entries or not no_entries:  # both absent was refused above (mass 0)
        bounded = "yes" if not yes_entries else "no"
        bound_lp, rule = _absent_bound(candidates)
        if bounded == "yes":
            lp_yes = bound_lp
        else:
            lp_no = bound_lp

    p_positive = _two_way(lp_yes, lp_no, positive_word, counting)
    return YesNoResult(
        p_yes=math.exp(lp_yes),
        p_no=math.exp(lp_no),
        answer_mass=answer_mass,
        p_positive=p_positive,
        positive=positive_word,
        logprob_yes=lp_yes if lp_yes > -math.inf else None,
        logprob_no=lp_no if lp_no > -math.inf else None,
        matched=matched,
        counting=counting,
        bounded_answer=bounded,
        bound_rule=rule,
    )


def _two_way(lp_yes: float, lp_no: float, positive_word: str, counting: str) -> float:
    """P(positive) / (P(yes) + P(no)): exact counting as sigmoid(logprob difference), which is
    softmax over the two log-probabilities (log_softmax shifts both by one constant)."""
    lp_good, lp_bad = (lp_yes, lp_no) if positive_word == "yes" else (lp_no, lp_yes)
    if counting == "exact":
        return _sigmoid(lp_good - lp_bad) if lp_good > -math.inf else 0.0
    p_good, p_bad = math.exp(lp_good), math.exp(lp_bad)
    # Clamp: float rounding must not push a probability past [0, 1].
    return min(1.0, max(0.0, p_good / (p_good + p_bad)))


def _absent_bound(candidates: list[tuple[str, float]]) -> tuple[float, str]:
    """log of the largest probability an unlisted token can have, and the rule that gave it."""
    lp_min = min(lp for _, lp in candidates)
    # The servers' logprobs are float32: the listed mass is known to about 1e-7 per entry, so
    # what it leaves over gets a little slack (a near-certain answer's list can sum past 1).
    rest = max(0.0, 1.0 - sum(math.exp(lp) for _, lp in candidates)) + _UNLISTED_SLACK
    if math.log(rest) < lp_min:
        return math.log(rest), "unlisted_mass"
    return lp_min, "min_listed"


def _exact_entries(candidates: list[tuple[str, float]], words: Sequence[str]) -> list[tuple[str, float]]:
    """Per word, the entry spelled exactly so; the last one when the text is listed twice."""
    last = {token: lp for token, lp in candidates if token in words}
    return [(word, last[word]) for word in words if word in last]


def _raw_words(words: Sequence[str]) -> tuple[str, ...]:
    return (words,) if isinstance(words, str) else tuple(words)


def _logsumexp(logprobs: Sequence[float]) -> float:
    if not logprobs:
        return -math.inf
    top = max(logprobs)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(lp - top) for lp in logprobs))


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


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
