"""parse_final_score: UnifiedReward-style replies ending in `Final Score: x`."""

from __future__ import annotations

import json

import pytest

from judge_gateway.parsers import FinalScoreResult, ParseError, parse_final_score

UNIFIED_REPLY = """\
The image shows a golden retriever puppy sitting in a field of sunflowers at sunset, as the \
caption asks. Alignment: the puppy, the sunflowers and the warm sunset light are all present; \
the caption's "wearing a blue bandana" is satisfied, although the bandana is closer to teal. \
Coherence: the anatomy of the puppy is correct and the depth of field is natural. Style: the \
colours are saturated but pleasant; a score of 5 would need sharper fur detail in the foreground.

Final Score: 4.5
"""


def test_realistic_reply():
    result = parse_final_score(UNIFIED_REPLY)
    assert isinstance(result, FinalScoreResult)
    assert result.score == 4.5
    assert result.scale == (1.0, 5.0)
    assert result.normalized == pytest.approx(0.875)


def test_restated_score_takes_the_last_label():
    reply = "Final Score: 3\nOn reflection the bandana colour is acceptable.\nFinal Score: 4"
    result = parse_final_score(reply)
    assert result.score == 4.0
    assert result.occurrences == 2


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        ("Final Score: 4", 4.0),
        ("Final Score:4.25", 4.25),
        ("**Final Score:** 4", 4.0),
        ("**Final Score**: 3.5", 3.5),
        ("Final Score: **4.5**", 4.5),
        ("Final Score: 4/5", 4.0),
        ("Final Score: 4.5 / 5", 4.5),
        ("Final Score: 4.5 / 5.0", 4.5),
        ("Final Score: 4.5.", 4.5),
        ("Final Score: [3]", 3.0),
        ("Final Score: 2 (weak alignment)", 2.0),
        ("final score: 1", 1.0),
        ("Therefore, my Final Score: 5", 5.0),
        ("## Final Score: 3.75", 3.75),
    ],
)
def test_tolerated_forms(tail, expected):
    assert parse_final_score(f"Good image.\n{tail}\n").score == expected


@pytest.mark.parametrize("value", ["6", "0", "10", "5.5", "-1", "0.9"])
def test_out_of_scale_is_parse_error_not_clamped(value):
    with pytest.raises(ParseError) as info:
        parse_final_score(f"Nice.\nFinal Score: {value}")
    assert info.value.code == "parse_error"
    assert info.value.details["value"] == float(value)


def test_missing_label_is_parse_error():
    with pytest.raises(ParseError) as info:
        parse_final_score("The image is lovely and I would rate it 4.5 out of 5.")
    assert info.value.code == "parse_error"
    assert "Final Score" in str(info.value)


@pytest.mark.parametrize("reply", ["", "I'm sorry, I can't evaluate this image.", None])
def test_empty_or_refusal_is_parse_error(reply):
    with pytest.raises(ParseError):
        parse_final_score(reply)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["N/A", "n/a", "**N/A**", "excellent", "four", "", "4/10"])
def test_non_number_value_is_parse_error(value):
    with pytest.raises(ParseError) as info:
        parse_final_score(f"Some text.\nFinal Score: {value}")
    assert info.value.code == "parse_error"


def test_number_on_a_later_line_not_after_the_label_is_not_taken():
    with pytest.raises(ParseError):
        parse_final_score("Final Score: N/A\nThe alignment alone would be 4.")
    with pytest.raises(ParseError):
        parse_final_score("Final Score: see above\n4")
    with pytest.raises(ParseError):
        parse_final_score("Final Score:\nI would say 4.")


def test_number_alone_on_the_line_after_the_label():
    # The reference regex's `\s*` crosses the newline: keep that.
    assert parse_final_score("Final Score:\n\n  4.5\n").score == 4.5


def test_last_label_decides_even_when_an_earlier_one_is_valid():
    with pytest.raises(ParseError):
        parse_final_score("Final Score: 4\nWait, I cannot judge this.\nFinal Score: N/A")


def test_custom_label_and_scale():
    result = parse_final_score("Overall Score: 7.5/10", label="Overall Score", scale=(0, 10))
    assert result.score == 7.5
    assert result.normalized == pytest.approx(0.75)
    with pytest.raises(ParseError):
        parse_final_score("Final Score: 7.5", label="Overall Score", scale=(0, 10))


def test_crlf():
    assert parse_final_score(UNIFIED_REPLY.replace("\n", "\r\n")).score == 4.5


def test_details_are_json_serialisable():
    details = json.loads(json.dumps(parse_final_score(UNIFIED_REPLY).details()))
    assert details["final_score"] == 4.5
    assert details["scale"] == [1.0, 5.0]
    assert details["normalized"] == pytest.approx(0.875)


@pytest.mark.parametrize(
    ("scale", "label"), [((5, 1), "Final Score"), ((1, 1), "Final Score"), ((1, 5), "  ")]
)
def test_bad_arguments_are_value_errors(scale, label):
    with pytest.raises(ValueError) as info:
        parse_final_score("Final Score: 3", scale=scale, label=label)
    assert not isinstance(info.value, ParseError)
