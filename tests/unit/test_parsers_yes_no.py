"""parse_yes_no: one-token Yes/No answers read from the top-K logprobs."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest

from judge_gateway.parsers import ParseError, YesNoResult, parse_yes_no


@dataclass
class TopLogprob:
    """The shape of `openai`'s `choice.logprobs.content[0].top_logprobs[i]`."""

    token: str
    logprob: float
    bytes: list[int] | None = None


def lp(p: float) -> float:
    return math.log(p)


# A realistic top-20 from a Qwen-style tokenizer after "Please answer yes or no."
QWEN_TOP = [
    TopLogprob("Yes", lp(0.62)),
    TopLogprob("No", lp(0.21)),
    TopLogprob(" Yes", lp(0.05)),
    TopLogprob("yes", lp(0.03)),
    TopLogprob("YES", lp(0.01)),
    TopLogprob("Ġyes", lp(0.005)),
    TopLogprob("Yes.", lp(0.004)),
    TopLogprob(" No", lp(0.02)),
    TopLogprob("no", lp(0.01)),
    TopLogprob("Yesterday", lp(0.008)),
    TopLogprob("yess", lp(0.003)),
    TopLogprob("Noo", lp(0.002)),
    TopLogprob("None", lp(0.006)),
    TopLogprob("not", lp(0.004)),
    TopLogprob("The", lp(0.007)),
    TopLogprob("Maybe", lp(0.003)),
]
QWEN_P_YES = 0.62 + 0.05 + 0.03 + 0.01 + 0.005 + 0.004
QWEN_P_NO = 0.21 + 0.02 + 0.01


def test_openai_objects_sum_every_variant_and_skip_lookalikes():
    result = parse_yes_no(QWEN_TOP)
    assert isinstance(result, YesNoResult)
    assert result.p_yes == pytest.approx(QWEN_P_YES)
    assert result.p_no == pytest.approx(QWEN_P_NO)
    assert result.answer_mass == pytest.approx(QWEN_P_YES + QWEN_P_NO)
    assert result.p_positive == pytest.approx(QWEN_P_YES / (QWEN_P_YES + QWEN_P_NO))
    assert result.positive == "yes"
    for excluded in ("Yesterday", "yess", "Noo", "None", "not", "The", "Maybe"):
        assert excluded not in result.matched
    assert set(result.matched) == {"Yes", " Yes", "yes", "YES", "Ġyes", "Yes.", "No", " No", "no"}
    assert result.logprob_yes == pytest.approx(math.log(QWEN_P_YES))
    assert result.logprob_no == pytest.approx(math.log(QWEN_P_NO))


def test_dicts_tuples_and_mapping_read_the_same():
    dicts = [{"token": c.token, "logprob": c.logprob} for c in QWEN_TOP]
    tuples = [(c.token, c.logprob) for c in QWEN_TOP]
    mapping = {c.token: c.logprob for c in QWEN_TOP}
    expected = parse_yes_no(QWEN_TOP)
    for shape in (dicts, tuples, mapping):
        result = parse_yes_no(shape)
        assert result.p_yes == pytest.approx(expected.p_yes)
        assert result.p_no == pytest.approx(expected.p_no)
        assert result.p_positive == pytest.approx(expected.p_positive)


@pytest.mark.parametrize(
    "token",
    ["Yes", " yes", "YES", "Ġyes", "▁Yes", "Ċyes", "Yes.", "yes,", "Yes!", "yes:", " Yes ", "\nyes"],
)
def test_each_yes_variant_counts(token):
    result = parse_yes_no([TopLogprob(token, lp(0.7)), TopLogprob("No", lp(0.3))])
    assert result.p_yes == pytest.approx(0.7)
    assert result.p_positive == pytest.approx(0.7)


@pytest.mark.parametrize("token", ["Yesterday", "yess", "yes-man", "Yeah", "eyes", "y"])
def test_lookalikes_of_yes_do_not_count(token):
    result = parse_yes_no([TopLogprob(token, lp(0.4)), TopLogprob("No", lp(0.6))])
    # Yes is absent: the list holds all the mass, so only the float32 slack (1e-6) is left for it.
    assert token not in result.matched
    assert result.bounded_answer == "yes" and result.bound_rule == "unlisted_mass"
    assert result.p_yes == pytest.approx(1e-6, rel=1e-6)
    assert result.p_positive == pytest.approx(1e-6 / (0.6 + 1e-6), rel=1e-6)


def test_duplicate_token_text_counts_once_per_entry():
    # vLLM can report two token ids that decode to the same text; both are real mass.
    result = parse_yes_no(
        [
            {"token": "Yes", "logprob": lp(0.4)},
            {"token": "Yes", "logprob": lp(0.2)},
            {"token": "No", "logprob": lp(0.3)},
        ]
    )
    assert result.p_yes == pytest.approx(0.6)
    assert result.answer_mass == pytest.approx(0.9)
    assert result.matched["Yes"] == pytest.approx(0.6)


def test_both_answers_absent_is_answer_missing_with_zero_mass():
    with pytest.raises(ParseError) as info:
        parse_yes_no([TopLogprob("The", lp(0.5)), TopLogprob("I", lp(0.3)), TopLogprob("Sorry", lp(0.1))])
    assert info.value.code == "answer_missing"
    assert info.value.details["answer_mass"] == 0.0
    assert "0" in str(info.value)


def test_both_absent_is_invalid_even_with_no_floor():
    with pytest.raises(ParseError) as info:
        parse_yes_no([("The", lp(0.9))], min_answer_mass=0.0)
    assert info.value.code == "answer_missing"


def test_low_mass_below_floor_is_answer_missing_and_reports_mass():
    with pytest.raises(ParseError) as info:
        parse_yes_no([("Yes", lp(0.2)), ("No", lp(0.1)), ("The", lp(0.6))], min_answer_mass=0.5)
    error = info.value
    assert error.code == "answer_missing"
    assert error.details["answer_mass"] == pytest.approx(0.3)
    assert error.details["p_yes"] == pytest.approx(0.2)
    assert "0.3" in str(error)


def test_only_yes_present_is_bounded_by_the_unlisted_mass():
    # No is absent: at most the 0.03 the list leaves over (tighter than the smallest entry, 0.04).
    result = parse_yes_no([("Yes", lp(0.93)), ("Sure", lp(0.04))])
    bound = 0.03 + 1e-6
    assert result.bounded_answer == "no" and result.bound_rule == "unlisted_mass"
    assert result.p_no == pytest.approx(bound)
    assert result.logprob_no == pytest.approx(math.log(bound))
    assert result.p_positive == pytest.approx(0.93 / (0.93 + bound))
    assert result.answer_mass == pytest.approx(0.93)  # the listed answer mass only
    details = result.details()
    assert details["bounded_answer"] == "no" and details["bound"] == pytest.approx(bound)


def test_only_no_present_is_bounded_by_the_smallest_entry():
    # Yes is absent: the list leaves 0.1 over, but every unlisted token is below 0.01.
    top = [(" No", lp(0.8)), ("Not", lp(0.09)), ("The", lp(0.01))]
    result = parse_yes_no(top)
    assert result.bounded_answer == "yes" and result.bound_rule == "min_listed"
    assert result.p_yes == pytest.approx(0.01)
    assert result.logprob_yes == pytest.approx(math.log(0.01))
    assert result.p_positive == pytest.approx(0.01 / 0.81)
    assert result.answer_mass == pytest.approx(0.8)


def test_sure_judge_at_top20_is_valid_and_close_to_one():
    # A near-certain "No" (Cosmos-Reason1: no anomaly) with float32 rounding pushing the listed
    # mass past 1: Yes is bounded by the slack, not by its (unknown) rank.
    top = [("No", -1e-7)] + [(f"tok{i}", -10.0 - 0.1 * i) for i in range(19)]
    result = parse_yes_no(top, positive="no")
    assert result.bounded_answer == "yes" and result.bound_rule == "unlisted_mass"
    assert result.p_yes == pytest.approx(1e-6)
    assert result.logprob_yes == pytest.approx(math.log(1e-6))
    assert result.p_positive == pytest.approx(1.0 / (1.0 + 1e-6), abs=1e-9)
    assert result.p_positive < 1.0


def test_both_present_is_never_bounded():
    result = parse_yes_no(QWEN_TOP)
    assert result.bounded_answer is None and result.bound_rule is None
    assert result.details()["bound"] is None


def test_only_one_answer_below_floor_is_not_a_zero_score():
    with pytest.raises(ParseError) as info:
        parse_yes_no([("No", lp(0.35)), ("The", lp(0.6))], min_answer_mass=0.5)
    assert info.value.code == "answer_missing"


def test_mass_exactly_at_floor_is_valid():
    result = parse_yes_no([("Yes", math.log(0.25)), ("No", math.log(0.25))], min_answer_mass=0.5)
    assert result.answer_mass == pytest.approx(0.5)
    assert result.p_positive == pytest.approx(0.5)


def test_positive_no_flips_the_reward_like_cosmos_reason1():
    # Cosmos-Reason1 asks "Does the video contain any anomalies?": No is good.
    candidates = [TopLogprob("Yes", -1.7), TopLogprob("No", -0.2)]
    as_yes = parse_yes_no(candidates)
    as_no = parse_yes_no(candidates, positive="no")
    assert as_no.positive == "no"
    assert as_no.p_positive == pytest.approx(1.0 - as_yes.p_positive)
    # Same two-way softmax as cosmos-rl's no_score on raw logits.
    assert as_no.p_positive == pytest.approx(1.0 / (1.0 + math.exp(-(-0.2 - -1.7))))


def test_custom_answer_words():
    result = parse_yes_no([("True", lp(0.5)), ("yes", lp(0.2)), ("False", lp(0.2))],
                          yes_words=("yes", "true"), no_words=("no", "false"))
    assert result.p_yes == pytest.approx(0.7)
    assert result.p_no == pytest.approx(0.2)


@pytest.mark.parametrize("empty", [None, [], {}])
def test_empty_candidates_are_parse_error(empty):
    with pytest.raises(ParseError) as info:
        parse_yes_no(empty)
    assert info.value.code == "parse_error"


@pytest.mark.parametrize("bad", [float("nan"), 0.5, float("inf"), "x", None])
def test_unusable_logprob_is_parse_error(bad):
    with pytest.raises(ParseError) as info:
        parse_yes_no([("Yes", -0.1), ("No", bad)])
    assert info.value.code == "parse_error"


def test_malformed_entry_is_parse_error():
    with pytest.raises(ParseError):
        parse_yes_no([{"text": "Yes", "lp": -0.1}])


def test_float_noise_above_zero_is_probability_one():
    result = parse_yes_no([("Yes", 1e-7)])
    assert result.p_yes == 1.0
    assert result.logprob_yes == 0.0


def test_exact_counting_reads_only_the_exact_tokens_like_vllm_evaluate():
    # Flow-Factory's default: sigmoid(lp('Yes') - lp('No')) over exactly 'Yes' and 'No'.
    top = [("Yes", lp(0.7)), (" yes", lp(0.1)), ("No", lp(0.15)), ("no", lp(0.04))]
    result = parse_yes_no(top, yes_words=("Yes",), no_words=("No",), counting="exact")
    assert result.p_positive == pytest.approx(1.0 / (1.0 + math.exp(-(math.log(0.7) - math.log(0.15)))))
    assert result.p_positive == pytest.approx(0.8235294, abs=1e-7)
    assert set(result.matched) == {"Yes", "No"}
    assert result.counting == "exact"
    # ours counts every variant: 0.8 / 0.99
    assert parse_yes_no(top).p_positive == pytest.approx(0.8 / 0.99)


def test_exact_counting_keeps_the_last_entry_of_a_repeated_token():
    # vllm_evaluate builds {token: logprob}: a text listed twice keeps its last logprob.
    top = [("Yes", lp(0.5)), ("No", lp(0.2)), ("Yes", lp(0.1))]
    result = parse_yes_no(top, yes_words=("Yes",), no_words=("No",), counting="exact", min_answer_mass=0.0)
    assert result.p_yes == pytest.approx(0.1)
    assert result.p_positive == pytest.approx(0.1 / 0.3)


def test_exact_counting_both_missing_is_invalid_not_zero():
    # vllm_evaluate returns 0.0 here; a failure is never a score.
    with pytest.raises(ParseError) as info:
        parse_yes_no([(" yes", lp(0.6)), ("no", lp(0.3))], yes_words=("Yes",), no_words=("No",),
                     counting="exact", min_answer_mass=0.0)
    assert info.value.code == "answer_missing"


def test_exact_counting_one_missing_is_bounded():
    result = parse_yes_no([("Yes", lp(0.9)), (" yes", lp(0.05)), ("Sure", lp(0.02))],
                          yes_words=("Yes",), no_words=("No",), counting="exact", min_answer_mass=0.0)
    assert result.bounded_answer == "no"
    assert result.p_no == pytest.approx(0.02)
    assert result.p_positive == pytest.approx(1.0 / (1.0 + 0.02 / 0.9))


def test_unknown_counting_is_value_error():
    with pytest.raises(ValueError):
        parse_yes_no([("Yes", -0.1)], counting="canonical")


def test_minus_infinity_is_zero_probability():
    result = parse_yes_no([("Yes", float("-inf")), ("No", -0.01)])
    assert result.p_yes == 0.0
    assert result.p_positive == 0.0


@pytest.mark.parametrize("positive", ["maybe", "", "y", 1])
def test_invalid_positive_is_value_error(positive):
    with pytest.raises(ValueError) as info:
        parse_yes_no([("Yes", -0.1)], positive=positive)
    assert not isinstance(info.value, ParseError)


def test_overlapping_words_are_rejected():
    with pytest.raises(ValueError):
        parse_yes_no([("Yes", -0.1)], yes_words=("yes",), no_words=("Yes",))


def test_details_are_json_serialisable():
    details = parse_yes_no(QWEN_TOP, positive="no").details()
    restored = json.loads(json.dumps(details))
    assert restored["positive"] == "no"
    assert restored["answer_mass"] == pytest.approx(QWEN_P_YES + QWEN_P_NO)
    assert restored["p_positive"] == pytest.approx(QWEN_P_NO / (QWEN_P_YES + QWEN_P_NO))
    assert restored["matched"]["Yes"] == pytest.approx(0.62)


@pytest.mark.parametrize("floor", [-0.1, 1.5, float("nan"), True])
def test_invalid_floor_is_value_error(floor):
    with pytest.raises(ValueError) as info:
        parse_yes_no([("Yes", -0.1)], min_answer_mass=floor)
    assert not isinstance(info.value, ParseError)
