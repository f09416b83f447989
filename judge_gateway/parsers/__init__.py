"""Parsers that turn a judge's raw reply into numbers, or a `ParseError` saying why not."""

from .answer_probability import AnswerProbability, atom_means, parse_answer_probability
from .axes import AxesResult, Axis, parse_axes
from .comparative import AnswerVerdict, parse_answer_verdict
from .errors import ParseError
from .final_score import FinalScoreResult, parse_final_score
from .rubric import RubricResult, parse_rubric
from .score_token import SoftScore, TokenLogprobs, soft_score, token_logprobs_of
from .yes_no import YesNoResult, parse_yes_no

__all__ = [
    "SoftScore",
    "TokenLogprobs",
    "soft_score",
    "token_logprobs_of",
    "ParseError",
    "YesNoResult",
    "parse_yes_no",
    "RubricResult",
    "parse_rubric",
    "FinalScoreResult",
    "parse_final_score",
    "AnswerVerdict",
    "parse_answer_verdict",
    "Axis",
    "AxesResult",
    "parse_axes",
    "AnswerProbability",
    "parse_answer_probability",
    "atom_means",
]
