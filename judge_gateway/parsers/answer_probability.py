"""The probability of an expected answer ("four", "red", "Yes") at the reply's first token, read
from its top-K logprobs: GenEval 2's Soft-TIFA per-atom score.

Which tokens are the answer (`counting`):

- `variants` (ours, the default): every token whose bare word (no space marker, case or final
  stop: `yes_no.normalize_token`) is the answer, and, for a number word of a `numerals` answer
  set, its digits ("four", " Four", "FOUR", "4", " 4.").
- `exact`: GenEval 2's list (facebookresearch/GenEval2 evaluation.py, `soft_tifa`): the answer in
  lower case and `capitalize()`d, each with a leading space (its "How many" list for the lower-case
  count words of its data; its fixed 'Yes', 'yes', ' yes', ' Yes' for every other question, whose
  answer is "Yes"), and for a number word one..ten its digits with
  and without a leading space, each read as GenEval 2 reads it: the probability of the spelling's
  first token (`tokenizer.encode(spelling)[0]`). On Qwen's tokenizers (GenEval 2's Qwen3-VL) a
  digit string is one token per digit and a space before a digit is a token of its own, so "4"
  is "4", "10" is "1" and " 4" is " ": GenEval 2 counts the probability of a bare space towards
  every count answer, and so does this mode (a word is taken as one token). A token counts once.

`normalize`: `none` (GenEval 2): the answer's summed probability as it is; `answer_set`: divided by
the summed probability of every answer of the question's set (the conditional probability that
the answer is this one, given the model answered the question at all).

The listed mass of the whole answer set is `answer_mass`: below the floor, or zero, the model did
not answer the question and the atom is `answer_missing`, never a confident 0. The expected answer
absent from the top-K while others of its set are listed is not missing: its probability is at
most the smallest listed entry's and at most the mass the list leaves over (`yes_no._absent_bound`),
and that bound is used, so the value is small (not 0) and `bounded` says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import ANSWER_MISSING, ParseError
from .yes_no import _absent_bound, _candidates, _logsumexp, normalize_token

COUNTING_MODES = ("variants", "exact")
NORMALIZE_MODES = ("none", "answer_set")

# GenEval 2's `return_numeric_string` maps one..ten; zero and up to twenty are ours (variants).
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
                "nineteen", "twenty")
_GENEVAL2_NUMBERS = NUMBER_WORDS[1:11]


@dataclass(frozen=True)
class AnswerProbability:
    """One atom's reading."""

    answer: str
    probability: float  # the score: p_answer, or p_answer / p_set (normalize = answer_set)
    p_answer: float  # the answer's listed probability, or its bound when absent
    answer_mass: float  # the listed probability of the whole answer set
    normalize: str
    counting: str
    matched: dict[str, float] = field(default_factory=dict)  # the answer's listed tokens -> p
    bounded: bool = False  # the answer was not in the top-K: p_answer is a bound
    bound_rule: str | None = None

    def details(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "probability": self.probability,
            "p_answer": self.p_answer,
            "answer_mass": self.answer_mass,
            "normalize": self.normalize,
            "counting": self.counting,
            "matched": dict(self.matched),
            "bounded": self.bounded,
            "bound_rule": self.bound_rule,
        }


def numeral_twin(word: str) -> str | None:
    """"four" -> "4", "4" -> "four" (zero..twenty); None for any other word."""
    w = word.strip().casefold()
    if w in NUMBER_WORDS:
        return str(NUMBER_WORDS.index(w))
    if w.isdigit() and int(w) < len(NUMBER_WORDS):
        return NUMBER_WORDS[int(w)]
    return None


def exact_spellings(answer: str, *, numerals: bool) -> tuple[str, ...]:
    """The first tokens GenEval 2 reads for an answer (its `soft_tifa`): the answer lower-cased and
    capitalised, both with a leading space, and for a number word one..ten its digits, bare and with
    a space, each as its first token on a Qwen tokenizer (see the module docstring)."""
    word = answer.lower()
    spellings = [word, word.capitalize(), " " + word, " " + word.capitalize()]
    if numerals and word in _GENEVAL2_NUMBERS:
        digits = str(_GENEVAL2_NUMBERS.index(word) + 1)
        spellings += [digits, " " + digits]
    return tuple(dict.fromkeys(_qwen_first_token(s) for s in spellings))


def _qwen_first_token(spelling: str) -> str:
    """The first token of a spelling on Qwen2/3's tokenizers, whose pre-tokenizer splits every digit
    apart and a space before a digit from it: "10" -> "1", " 4" -> " "; a word stays whole."""
    if spelling[:1].isdigit():
        return spelling[0]
    if spelling[:1] == " " and spelling[1:2].isdigit():
        return " "
    return spelling


def _bare_forms(word: str, numerals: bool) -> set[str]:
    forms = {normalize_token(word)}
    twin = numeral_twin(word) if numerals else None
    if twin is not None:
        forms.add(twin)
    return forms


def parse_answer_probability(top_logprobs: Any, answer: str, answer_set: Sequence[str] = (), *,
                             numerals: bool = False, counting: str = "variants", normalize: str = "none",
                             min_answer_mass: float = 0.5) -> AnswerProbability:
    """The probability of `answer` among the first token's candidates (see the module docstring).

    `answer_set`: the answers the question admits (the expected one is always among them).
    Raises ParseError (`parse_error`) for an unusable candidate list and (`answer_missing`) when
    the set's listed mass is zero or below `min_answer_mass`.
    """
    if counting not in COUNTING_MODES:
        raise ValueError(f"counting must be one of {COUNTING_MODES}, got {counting!r}")
    if normalize not in NORMALIZE_MODES:
        raise ValueError(f"normalize must be one of {NORMALIZE_MODES}, got {normalize!r}")
    if not isinstance(answer, str) or not normalize_token(answer):
        raise ValueError(f"answer must be a word, got {answer!r}")
    if not 0.0 <= min_answer_mass <= 1.0:
        raise ValueError(f"min_answer_mass must be in [0, 1], got {min_answer_mass!r}")
    candidates = _candidates(top_logprobs)
    others = [w for w in answer_set if normalize_token(w) != normalize_token(answer)]
    if counting == "exact":
        mine = set(exact_spellings(answer, numerals=numerals))
        rest = {s for w in others for s in exact_spellings(w, numerals=numerals)} - mine
        answer_entries = [(t, lp) for t, lp in candidates if t in mine]
        other_entries = [(t, lp) for t, lp in candidates if t in rest]
    else:
        mine_bare = _bare_forms(answer, numerals)
        rest_bare = {f for w in others for f in _bare_forms(w, numerals)} - mine_bare
        answer_entries = [(t, lp) for t, lp in candidates if normalize_token(t) in mine_bare]
        other_entries = [(t, lp) for t, lp in candidates if normalize_token(t) in rest_bare]
    matched: dict[str, float] = {}
    for token, logprob in answer_entries:
        matched[token] = matched.get(token, 0.0) + math.exp(logprob)
    p_listed = math.exp(_logsumexp([lp for _, lp in answer_entries]))
    p_others = math.exp(_logsumexp([lp for _, lp in other_entries]))
    mass = p_listed + p_others
    if mass <= 0.0 or mass < min_answer_mass:
        raise ParseError(
            f"answer-set mass {mass:.4g} is below the floor {min_answer_mass:.4g} among {len(candidates)} "
            f"candidates (expected {answer!r}: p={p_listed:.4g}; counting={counting})",
            code=ANSWER_MISSING,
            details={"answer": answer, "p_answer": p_listed, "answer_mass": mass,
                     "min_answer_mass": float(min_answer_mass), "counting": counting,
                     "top_tokens": [t for t, _ in candidates[:5]]})
    bounded, rule = False, None
    p_answer = p_listed
    if not answer_entries:
        bound_lp, rule = _absent_bound(candidates)
        p_answer, bounded = math.exp(bound_lp), True
    if normalize == "answer_set":
        probability = min(1.0, max(0.0, p_answer / (p_answer + p_others)))
    else:
        probability = min(1.0, p_answer)
    return AnswerProbability(answer, probability, p_answer, mass, normalize, counting, matched, bounded, rule)


def atom_means(values: Sequence[float]) -> dict[str, float]:
    """Soft-TIFA's prompt scores over a prompt's atoms, as GenEval 2's evaluation.py computes them:
    arithmetic mean `sum(s) / len(s)` (AM) and scipy's `gmean` (GM: exp of the mean log; 0 when
    an atom is 0)."""
    if not values:
        raise ValueError("no atom values")
    am = sum(values) / len(values)
    gm = 0.0 if min(values) <= 0.0 else math.exp(sum(math.log(v) for v in values) / len(values))
    return {"arithmetic": am, "geometric": gm}
