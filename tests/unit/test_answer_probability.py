"""The probability of an expected answer (parsers/answer_probability.py) and the answer_probability
judge (GenEval 2's Soft-TIFA): which tokens count, normalisation, the bound for an absent answer,
atoms from the request or a file, and parity with GenEval 2's formulas on scripted distributions
(tests/support/peer_judges.py, a reading of facebookresearch/GenEval2 @ a6e82d2 evaluation.py;
tests/integration/test_geneval2_own_code.py runs that file itself)."""

from __future__ import annotations

import json
import math

import pytest

from judge_gateway.config import ConfigError, validate_config
from judge_gateway.media import ImageMedia
from judge_gateway.parsers import ParseError, atom_means, parse_answer_probability
from judge_gateway.parsers.answer_probability import exact_spellings, numeral_twin
from judge_gateway.schema import SampleInput
from tests.conftest import png_bytes
from tests.support import peer_judges
from tests.support.scripted_chat import down, score_scripted

COUNT = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def lp(pairs):
    """(token, probability) -> (token, logprob), as a server lists them."""
    return [(t, math.log(p)) for t, p in pairs]


def test_variants_count_case_space_and_numerals():
    top = [(" four", 0.5), ("Four", 0.1), ("FOUR", 0.05), ("4", 0.05), (" 4.", 0.04), (" three", 0.2), ("No", 0.02)]
    r = parse_answer_probability(lp(top), "four", COUNT, numerals=True)
    assert r.p_answer == pytest.approx(0.74) and r.probability == pytest.approx(0.74)
    assert r.answer_mass == pytest.approx(0.94) and set(r.matched) == {" four", "Four", "FOUR", "4", " 4."}
    normalised = parse_answer_probability(lp(top), "four", COUNT, numerals=True, normalize="answer_set")
    assert normalised.probability == pytest.approx(0.74 / 0.94)


def test_exact_counts_geneval2_spellings_only_as_their_first_tokens():
    # GenEval 2's list for "four": four, Four, " four", " Four", "4", " 4"; on a Qwen tokenizer " 4"
    # encodes to [" ", "4"], so its first token is a bare space.
    assert exact_spellings("four", numerals=True) == ("four", "Four", " four", " Four", "4", " ")
    assert exact_spellings("ten", numerals=True)[-2:] == ("1", " ")
    # every other question: GenEval 2's fixed 'Yes', 'yes', ' yes', ' Yes' (its answer is "Yes")
    assert set(exact_spellings("Yes", numerals=False)) == {"Yes", "yes", " yes", " Yes"}
    top = [(" four", 0.5), ("FOUR", 0.05), (" ", 0.03), ("4", 0.02), (" three", 0.3)]
    r = parse_answer_probability(lp(top), "four", COUNT, numerals=True, counting="exact")
    assert r.p_answer == pytest.approx(0.55) and "FOUR" not in r.matched


def test_an_absent_answer_is_bounded_and_a_missing_answer_set_is_answer_missing():
    top = [(" three", 0.9), ("two", 0.05), ("The", 0.01)]
    r = parse_answer_probability(lp(top), "four", COUNT, numerals=True)
    assert r.bounded and r.p_answer == pytest.approx(0.01) and r.bound_rule == "min_listed"
    assert 0 < r.probability <= 0.01 + 1e-12  # small, never 0: the judge was sure of another count
    with pytest.raises(ParseError) as err:
        parse_answer_probability(lp([("The", 0.6), ("A", 0.3)]), "four", COUNT, numerals=True)
    assert err.value.code == "answer_missing"
    with pytest.raises(ParseError) as err:  # listed, but under the floor
        parse_answer_probability(lp([("The", 0.6), (" four", 0.1)]), "four", COUNT, numerals=True, min_answer_mass=0.5)
    assert err.value.code == "answer_missing" and err.value.details["answer_mass"] == pytest.approx(0.1)


@pytest.mark.parametrize("bad", [None, [], "four", [("four", 0.5, 1)], [("four", "x")]])
def test_unusable_candidates_are_a_parse_error(bad):
    with pytest.raises(ParseError) as err:
        parse_answer_probability(bad, "four", COUNT, numerals=True)
    assert err.value.code == "parse_error"


def test_numeral_twins_and_means():
    assert (numeral_twin("four"), numeral_twin("4"), numeral_twin("red"), numeral_twin("21")) == ("4", "four", None, None)
    means = atom_means([0.9, 0.5, 0.25])
    assert means["arithmetic"] == pytest.approx(0.55) and means["geometric"] == pytest.approx((0.9 * 0.5 * 0.25) ** (1 / 3))
    assert atom_means([0.9, 0.0])["geometric"] == 0.0


# --------------------------------------------------------------------------- GenEval 2's formulas

# Scripted distributions over a small vocabulary: token -> probability, the whole distribution
# (what GenEval 2 reads from the softmax), its 20 largest entries being what vLLM lists.
ATOMS = [
    ("How many bicycles are in the image?", "four",
     {" four": 0.41, "Four": 0.2, "four": 0.07, " Four": 0.04, "4": 0.05, " ": 0.03, " three": 0.12, "Three": 0.05,
      "No": 0.02, "Yes": 0.01}),
    ("Are the bicycles white?", "Yes",
     {"Yes": 0.62, " Yes": 0.08, "yes": 0.05, " yes": 0.01, "No": 0.2, "no": 0.04}),
    ("Are there any bicycles in the image?", "Yes", {"Yes": 0.97, "No": 0.03}),
    ("How many cows are in the image?", "three",
     {" two": 0.5, "Two": 0.2, " three": 0.15, "3": 0.05, "three": 0.04, "Three": 0.03, "No": 0.03}),
    ("Are the cows plastic?", "Yes", {"No": 0.88, " No": 0.05, "Yes": 0.05, "yes": 0.02}),
]
VOCAB = sorted({t for *_, dist in ATOMS for t in dist} | {"The", "A", "YES"})


def first_token(spelling: str) -> int:
    """A Qwen-like tokenizer's first token of a spelling: digits split, a space before a digit apart."""
    if spelling[:1] == " " and spelling[1:2].isdigit():
        spelling = " "
    elif spelling[:1].isdigit():
        spelling = spelling[0]
    return VOCAB.index(spelling) if spelling in VOCAB else -1


def test_soft_tifa_atoms_and_means_equal_geneval2_formulas():
    ours, theirs = [], []
    for question, answer, dist in ATOMS:
        set_ = COUNT if question.startswith("How many") else ("yes", "no")
        top = sorted(dist.items(), key=lambda kv: -kv[1])[:20]
        r = parse_answer_probability(lp(top), answer, set_, numerals=question.startswith("How many"), counting="exact",
                                     normalize="none", min_answer_mass=0.0)
        ours.append(r.probability)
        theirs.append(peer_judges.geneval2_atom(question, answer, {VOCAB.index(t): p for t, p in dist.items()},
                                                first_token))
    assert ours == pytest.approx(theirs, abs=1e-12)
    assert atom_means(ours) == pytest.approx(peer_judges.geneval2_prompt_scores(theirs), abs=1e-12)
    # GenEval 2's numbers on these distributions, stated: atoms and the prompt's AM / GM
    assert theirs == pytest.approx([0.8, 0.76, 0.97, 0.27, 0.07])
    assert peer_judges.geneval2_prompt_scores(theirs)["arithmetic"] == pytest.approx(0.574)
    assert peer_judges.geneval2_prompt_scores(theirs)["geometric"] == pytest.approx(
        math.exp(sum(map(math.log, [0.8, 0.76, 0.97, 0.27, 0.07])) / 5))


# --------------------------------------------------------------------------- the judge


def judge_config(tmp_path=None, **options) -> dict:
    return {"backends": {"q": {"model": "Qwen/Qwen3-VL-8B-Instruct", "base_urls": ["http://127.0.0.1:9/v1"]}},
            "judges": {"ge": {"kind": "answer_probability", "backend": "q", "template": "geneval2_soft_tifa@1",
                              "options": options}}}


def run(cfg: dict, sample: SampleInput, script):
    return score_scripted(cfg, "ge", sample, script)


def by_question(question_text: str):
    for question, _, dist in ATOMS:
        if question_text.startswith(question):
            return sorted(dist.items(), key=lambda kv: -kv[1])[:20]
    raise AssertionError(f"unexpected question {question_text!r}")


def sample(**metadata) -> SampleInput:
    return SampleInput(prompt="four white bicycles in front of three plastic cows",
                       image=ImageMedia.validate(png_bytes(1)), metadata=metadata)


VQA = [[q, a] for q, a, _ in ATOMS]


def test_the_judge_scores_the_request_atoms_as_geneval2_would():
    result, calls = run(judge_config(), sample(vqa_list=VQA, skills=["count", "attribute", "object", "count",
                                                                     "attribute"]), by_question)
    expected = [0.8, 0.76, 0.97, 0.27, 0.07]
    assert result.valid and [a["probability"] for a in result.details["atoms"]] == pytest.approx(expected)
    gm = math.exp(sum(map(math.log, expected)) / 5)
    assert result.reward == pytest.approx(gm) and result.details["soft_tifa_am"] == pytest.approx(0.574)
    assert [a["answer_set"] for a in result.details["atoms"]] == ["count", "yes_no", "yes_no", "count", "yes_no"]
    assert result.details["atoms"][0]["skill"] == "count" and result.details["atoms_source"] == "metadata"
    # one greedy token per atom, the image first and the question after it, as GenEval 2 asks
    assert len(calls) == 5 and all(c["max_completion_tokens"] == 1 and c["top_logprobs"] == 20 for c in calls)
    content = calls[0]["messages"][0]["content"]
    assert content[0]["type"] == "image_url"
    assert content[1] == {"type": "text", "text": "How many bicycles are in the image? Answer in one word."}
    assert len(calls[0]["messages"]) == 1  # no system turn
    am, _ = run(judge_config(mean="arithmetic"), sample(vqa_list=VQA), by_question)
    assert am.reward == pytest.approx(0.574)


def test_atoms_come_from_the_file_by_prompt(tmp_path):
    data = tmp_path / "geneval2_data.jsonl"
    line = {"prompt": "four white bicycles in front of three plastic cows", "atom_count": 7, "vqa_list": VQA,
            "skills": ["count", "attribute", "object", "count", "attribute"]}
    data.write_text(json.dumps(line) + "\n" + json.dumps({**line, "prompt": "two metal toys"}) + "\n")
    result, _ = run(judge_config(atoms_file=str(data)), sample(), by_question)
    assert result.valid and result.details["atoms_source"] == "atoms_file" and len(result.details["atoms"]) == 5
    other = SampleInput(prompt="a prompt not in the file", image=ImageMedia.validate(png_bytes(1)))
    missing, calls = run(judge_config(atoms_file=str(data)), other, by_question)
    assert not missing.valid and missing.error.code == "bad_input" and "not in geneval2_data.jsonl" in missing.error.message
    assert calls == []  # nothing asked for a sample that can never be scored


@pytest.mark.parametrize("content, says", [
    ('{"prompt": "p", "vqa_list": []}\n', "must be a non-empty list"),
    ('{"prompt": "p", "vqa_list": [["q?", "a"]]}\n{"prompt": "p", "vqa_list": [["q?", "a"]]}\n', "listed twice"),
    ('{"prompt": "p", "vqa_list": [["q?"]]}\n', "must be [question, answer]"),
    ("not json\n", "not JSON"),
])
def test_a_broken_atoms_file_is_refused_at_load_with_its_line(tmp_path, content, says):
    data = tmp_path / "atoms.jsonl"
    data.write_text(content)
    with pytest.raises(ConfigError, match=r"atoms_file: atoms file .*atoms\.jsonl:\d+: .*" + __import__("re").escape(says)):
        validate_config(judge_config(atoms_file=str(data)))


def test_bad_request_atoms_are_bad_input():
    result, calls = run(judge_config(), sample(vqa_list=[["How many cats?"]]), by_question)
    assert not result.valid and result.error.code == "bad_input" and calls == []


def test_an_atom_without_an_answer_fails_the_sample_or_is_skipped_as_configured():
    def script(question: str):
        if question.startswith("Are the cows plastic?"):
            return [("The", 0.7), ("A", 0.2)]  # no yes/no at all
        if question.startswith("Are the bicycles white?"):
            return down()
        return by_question(question)
    strict, _ = run(judge_config(), sample(vqa_list=VQA), script)
    assert not strict.valid and strict.error.code in ("answer_missing", "backend_unavailable")
    assert [a["valid"] for a in strict.details["atoms"]] == [True, False, True, True, False]
    lenient, _ = run(judge_config(on_atom_failure="skip"), sample(vqa_list=VQA), script)
    assert lenient.valid and lenient.details["skipped_atoms"] == [1, 4]
    assert lenient.details["atoms"][4]["error"]["code"] == "answer_missing"
    assert lenient.details["atoms"][1]["error"]["code"] == "backend_unavailable"
    assert lenient.reward == pytest.approx(math.exp((math.log(0.8) + math.log(0.97) + math.log(0.27)) / 3))
