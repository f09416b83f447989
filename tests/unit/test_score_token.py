"""VideoScore2's soft scores (parsers/score_token.py, the multi_axis judge with soft_score =
"score_token", template videoscore2@2): the score token found as vs2_inference.py finds it, the
soft score `best * p(best) / sum(p over 1-5)` at the sampling temperature, and every way it can be
unreadable reported, never a 0. The expected numbers are worked out by hand in the comments;
tests/integration/test_videoscore2_own_code.py runs VideoScore2's own functions beside ours."""

from __future__ import annotations

import math

import numpy as np
import pytest

from judge_gateway.media import VideoMedia
from judge_gateway.parsers import TokenLogprobs, soft_score, token_logprobs_of
from judge_gateway.parsers.score_token import score_token_index
from judge_gateway.prompts import load_template
from judge_gateway.schema import SampleInput
from tests.support.scripted_chat import score_scripted

# A reply in VideoScore2's format as a Qwen tokenizer splits it (each digit a token of its own).
PIECES = ["visual", " quality", ":", " ", "4", ";", " \n", "text", "-to", "-video", " alignment", ":", " ", "3", ",",
          " \n", "physical", "/common", "-sense", " consistency", ":", " ", "5", "\n"]
# At each score token: the probabilities listed (the token written first).
AT = {4: {"4": 0.6, "3": 0.2, "5": 0.1, "the": 0.05},
      13: {"3": 0.5, "2": 0.3, "A": 0.1},
      22: {"5": 0.9}}


def completion(pieces=PIECES, at=AT, *, with_bytes=False) -> dict:
    content = []
    for i, piece in enumerate(pieces):
        listed = at.get(i, {piece: 0.99})
        top = [{"token": t, "logprob": math.log(p)} for t, p in listed.items()]
        entry = {"token": piece, "logprob": top[0]["logprob"], "top_logprobs": top}
        if with_bytes:
            entry["bytes"] = list(piece.encode())
        content.append(entry)
    return {"choices": [{"message": {"role": "assistant", "content": "".join(pieces)}, "finish_reason": "stop",
                         "logprobs": {"content": content}}]}


def tokens(pieces=PIECES, at=AT):
    return token_logprobs_of(completion(pieces, at)["choices"][0]["logprobs"]["content"])


def test_the_score_token_is_the_first_digit_after_the_labels_first_occurrence():
    toks = tokens()
    assert score_token_index(toks, "visual quality:") == 4
    assert score_token_index(toks, "Text-to-Video alignment:") == 13  # case-insensitive, as re.IGNORECASE
    assert score_token_index(toks, "physical/common-sense consistency:") == 22
    assert score_token_index(toks, "aesthetics:") is None
    # a digit that does not end its token has no score token (the reference's decode never equals it)
    merged = ["visual quality: ", "4;", "\n"]
    assert score_token_index(tokens(merged, {}), "visual quality:") is None


def test_soft_scores_are_the_best_digit_times_its_share_at_the_temperature():
    toks = tokens()
    # T = 0.7: weights p**(1/0.7): 0.6 -> 0.4818, 0.2 -> 0.1007, 0.1 -> 0.0373; 4 * 0.4818 / 0.6198 = 3.1116
    visual = soft_score(toks, "visual quality:", (1, 5), 0.7)
    assert (visual.value, visual.best, visual.token_index) == (3.1116, 4, 4)
    assert visual.share == pytest.approx(0.7779124196017547)
    assert set(visual.digit_logprobs) == {"3", "4", "5"}  # "the" is no score
    # T = 1 (and greedy, which divides by nothing): 4 * 0.6 / 0.9 = 2.6667
    assert soft_score(toks, "visual quality:", (1, 5), 1.0).value == 2.6667
    assert soft_score(toks, "visual quality:", (1, 5), 0.0).value == 2.6667
    # 3 * 0.5**(1/0.7) / (0.5**(1/0.7) + 0.3**(1/0.7)) = 2.0243; a lone listed digit: its share is 1
    assert soft_score(toks, "text-to-video alignment:", (1, 5), 0.7).value == 2.0243
    assert soft_score(toks, "physical/common-sense consistency:", (1, 5), 0.7).value == 5.0


def test_a_tie_goes_to_the_lower_score_and_unlisted_digits_have_no_soft_score():
    tie = tokens(at={4: {"4": 0.4, "2": 0.4}})
    assert soft_score(tie, "visual quality:", (1, 5), 1.0).value == 1.0  # best 2 (first of 1-5), share 0.5
    none_listed = soft_score(tokens(at={4: {"four": 1.0}}), "visual quality:", (1, 5), 1.0)
    # the chosen token is always counted (vLLM lists it beside the top-K): the lone digit, share 1
    assert none_listed.value == 4.0 and set(none_listed.digit_logprobs) == {"4"}
    toks = [TokenLogprobs(t.token, [{"token": "x", "logprob": -0.1}]) if i == 4 else t for i, t in enumerate(tokens())]
    missing = soft_score(toks, "visual quality:", (1, 5), 1.0)
    assert missing.value is None and "none of the scale's digits" in missing.reason


def test_positions_count_bytes_where_a_token_ends_inside_a_character():
    # "– " split inside the en dash: vLLM lists a placeholder text for the partial bytes
    dash = "\u2013".encode()
    pieces = ["note ", "bytes:\\xe2", "bytes:\\x80\\x93", " visual quality:", " ", "4", "\n"]
    content = completion(pieces, {5: {"4": 0.7, "5": 0.3}})["choices"][0]["logprobs"]["content"]
    content[1]["bytes"], content[2]["bytes"] = list(dash[:1]), list(dash[1:])
    for i in (0, 3, 4, 5, 6):
        content[i]["bytes"] = list(pieces[i].encode())
    toks = token_logprobs_of(content)
    assert score_token_index(toks, "visual quality:") == 5
    assert soft_score(toks, "visual quality:", (1, 5), 1.0).value == round(4 * 0.7, 4)


def test_malformed_logprobs_are_none_not_a_guess():
    assert token_logprobs_of(None) is None
    assert token_logprobs_of([{"logprob": -0.1}]) is None
    # a NaN among the alternatives makes the list unusable, as the yes/no parser reads one: no soft
    # score at that token, with the reason (never a score from the rest of a broken list)
    toks = token_logprobs_of([{"token": "visual quality: "}, {"token": "4", "logprob": -0.1,
                                                              "top_logprobs": [{"token": "3", "logprob": float("nan")}]}])
    broken = soft_score(toks, "visual quality:", (1, 5), 1.0)
    assert broken.value is None and broken.token_index == 1 and "unusable" in broken.reason
    # the token's own logprob counts beside a well-formed list
    toks = token_logprobs_of([{"token": "4", "logprob": -0.1, "top_logprobs": [{"token": "3", "logprob": -2.5}]}])
    assert toks[0].top() == {"4": -0.1, "3": -2.5}


# --------------------------------------------------------------------------- the judge


def config(**options) -> dict:
    return {"backends": {"vs2": {"model": "TIGER-Lab/VideoScore2", "base_urls": ["http://127.0.0.1:9/v1"]}},
            "judges": {"vs2": {"kind": "multi_axis", "backend": "vs2", "template": "videoscore2@2", "options": options}}}


def score(cfg: dict, answer):
    video = VideoMedia.from_array(np.zeros((8, 48, 64, 3), dtype=np.uint8), fps=8)
    sample = SampleInput(prompt="a dog surfing", video=video)
    return score_scripted(cfg, "vs2", sample, lambda _question: answer)


def test_videoscore2_at_2_is_at_1_with_soft_scores():
    one, two = load_template("videoscore2@1"), load_template("videoscore2@2")
    assert (one.user, one.temperature, one.max_tokens, one.occurrence) == (two.user, two.temperature, two.max_tokens,
                                                                         two.occurrence)
    assert (one.soft_score, two.soft_score) == ("none", "score_token")


def test_the_judge_reports_the_soft_scores_and_their_mean():
    result, calls = score(config(), completion())
    assert calls[0]["logprobs"] is True and calls[0]["top_logprobs"] == 20 and calls[0]["temperature"] == 0.7
    assert result.valid
    assert result.details["written_axes"] == {"visual_quality": 4.0, "text_alignment": 3.0,
                                              "physical_consistency": 5.0}
    assert result.details["axes"] == {"visual_quality": 3.1116, "text_alignment": 2.0243,
                                      "physical_consistency": 5.0}
    assert result.details["soft_scores"]["visual_quality"]["token_index"] == 4
    raw = (3.1116 + 2.0243 + 5.0) / 3
    assert result.raw == pytest.approx(raw) and result.reward == pytest.approx(raw / 5)  # [0, 5] onto [0, 1]


def test_an_axis_without_a_soft_score_is_missing_and_the_policy_decides():
    # the alignment digit shares its token with the comma: no score token there
    pieces = PIECES[:13] + ["3,"] + PIECES[15:]
    at = {4: AT[4], 21: AT[22]}
    invalid, _ = score(config(), completion(pieces, at))
    assert not invalid.valid and invalid.error.code == "parse_error"
    assert "text_alignment" in invalid.error.message
    assert invalid.details["soft_scores"]["text_alignment"]["value"] is None
    skipped, _ = score(config(missing_policy="skip"), completion(pieces, at))
    assert skipped.valid and skipped.details["missing"] == ["text_alignment"]
    assert skipped.raw == pytest.approx((3.1116 + 5.0) / 2)


def test_no_logprobs_from_the_backend_is_a_clear_failure_and_soft_can_be_turned_off():
    plain = "visual quality: 4; \ntext-to-video alignment: 3, \nphysical/common-sense consistency: 5\n"
    result, _ = score(config(), plain)
    assert not result.valid and "needs the reply's logprobs" in result.error.message
    off, calls = score(config(soft_score="none"), plain)
    assert off.valid and off.raw == pytest.approx(4.0) and "logprobs" not in calls[0]
