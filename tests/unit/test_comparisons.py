"""Comparative judging's arithmetic (judge_gateway/comparisons/), its verdict parser and its
template files: schedules and their costs, the budget checked at config load, how a pair's two
orders become one outcome, the aggregations, and the consistency report."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from judge_gateway.comparisons import (
    REFERENCE,
    Call,
    Schedule,
    aggregate,
    combine_pair,
    planned_calls,
    position_bias,
    swap_agreement,
    swiss_pairs,
    transitivity,
)
from judge_gateway.comparisons.schedules import presentation_orders
from judge_gateway.config import ConfigError, validate_config
from judge_gateway.parsers import ParseError, parse_answer_verdict
from judge_gateway.prompts import TemplateError, load_template
from judge_gateway.prompts.parse import read_template_file

# -- schedules ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 5, 8, 16])
def test_all_pairs_is_every_pair_once_lower_index_first(n):
    pairs = Schedule("all_pairs").static_pairs(n)
    assert pairs == list(itertools.combinations(range(n), 2))  # Pref-GRPO's order
    assert Schedule("all_pairs").max_pairs(n) == len(pairs) == n * (n - 1) // 2


@pytest.mark.parametrize("n,k", [(8, 1), (8, 2), (8, 3), (8, 4), (5, 2), (4, 2), (3, 5), (16, 2)])
def test_circular_pairs_each_sample_with_its_next_k_once(n, k):
    s = Schedule("circular", k=k)
    pairs = s.static_pairs(n)
    assert len(set(pairs)) == len(pairs) == s.max_pairs(n)
    expected = {(min(i, (i + d) % n), max(i, (i + d) % n)) for i in range(n) for d in range(1, k + 1) if (i + d) % n != i}
    assert set(pairs) == expected
    if 2 * k < n:
        assert len(pairs) == n * k
        assert all(sum(i in p for p in pairs) == 2 * k for i in range(n))  # every sample compared 2k times


@pytest.mark.parametrize("n", [2, 5, 8, 9, 16])
def test_swiss_rounds_never_repeat_a_pair_and_nobody_sits_out_twice_first(n):
    rng = random.Random(n)
    met: set[frozenset[int]] = set()
    sat_out = [0] * n
    wins = [0.0] * n
    for _ in range(3):
        pairs = swiss_pairs(n, wins, met)
        assert len(pairs) <= n // 2
        seen = [i for p in pairs for i in p]
        assert len(seen) == len(set(seen))  # one comparison per sample per round
        for a, b in pairs:
            assert frozenset((a, b)) not in met
            met.add(frozenset((a, b)))
            wins[a if rng.random() < 0.5 else b] += 1
        for i in set(range(n)) - set(seen):
            sat_out[i] += 1
    if n % 2 and n > 5:
        assert max(sat_out) == 1  # with enough samples, nobody sits out twice in 3 rounds
    assert Schedule("swiss", rounds=3).max_pairs(n) == min(3 * (n // 2), n * (n - 1) // 2)


def test_swiss_round_one_pairs_neighbours_and_later_rounds_pair_by_standing():
    assert swiss_pairs(6, [0.0] * 6, set()) == [(0, 1), (2, 3), (4, 5)]
    met = {frozenset(p) for p in [(0, 1), (2, 3), (4, 5)]}
    # winners 1, 3, 5 meet each other first
    assert swiss_pairs(6, [0, 1, 0, 1, 0, 1], met) == [(1, 3), (0, 5), (2, 4)]


def test_swap_modes_ask_the_orders_they_say():
    rng = random.Random(0)
    assert presentation_orders((2, 5), "both", rng) == [(2, 5), (5, 2)]
    assert presentation_orders((2, 5), "none", rng) == [(2, 5)]
    drawn = [presentation_orders((2, 5), "random", rng)[0] for _ in range(400)]
    assert 150 < drawn.count((2, 5)) < 250 and set(drawn) == {(2, 5), (5, 2)}


@pytest.mark.parametrize("schedule,swap,n,calls", [
    (Schedule("all_pairs"), "both", 8, 56), (Schedule("all_pairs"), "none", 8, 28),
    (Schedule("circular", k=2), "both", 8, 32), (Schedule("swiss", rounds=3), "both", 8, 24),
    (Schedule("reference"), "both", 8, 16), (Schedule("reference"), "random", 8, 8),
    (Schedule("all_pairs"), "both", 16, 240),
])
def test_planned_calls_are_pairs_times_orders(schedule, swap, n, calls):
    assert planned_calls(schedule, n, swap) == calls


VLM = {"vlm": {"model": "m", "base_urls": ["http://127.0.0.1:9/v1"]}}


def _config(**options):
    return {"backends": VLM, "judges": {"cmp": {"kind": "comparative", "backend": "vlm",
                                                "template": "pairwise_yes_no@1", "options": options}}}


def test_the_budget_is_checked_at_config_load_against_the_group_size():
    cfg = validate_config(_config(budget=56, max_group_size=8))
    assert cfg.judges["cmp"].options.budget == 56
    with pytest.raises(ConfigError) as err:
        validate_config(_config(budget=100))  # 16 samples, all pairs, both orders: 240 calls
    text = str(err.value)
    assert "judges.cmp.options" in text and "240 judge calls" in text and "budget = 100" in text
    assert "circular with circular_k <= 3" in text and "swiss with swiss_rounds <= 6" in text
    validate_config(_config(budget=100, schedule="circular", circular_k=3))  # 96 calls fit
    with pytest.raises(ConfigError, match="budget"):
        validate_config(_config())  # the budget is required: nobody compares without one


def test_config_load_refuses_a_reference_shown_as_the_source_a_pointwise_profile_and_a_shadow_use():
    data = {"backends": VLM, "judges": {"cmp": {"kind": "comparative", "backend": "vlm",
                                                "template": "edit_pairwise_yes_no@1",
                                                "options": {"budget": 32, "schedule": "reference"}}}}
    with pytest.raises(ConfigError, match="reference_index: condition_images\\[0\\] is shown"):
        validate_config(data)
    data["judges"]["cmp"]["options"]["reference_index"] = 1
    validate_config(data)
    data["flow_factory"] = {"profiles": {"cmp": {"judges": {"cmp": 1.0}}}}
    with pytest.raises(ConfigError, match='flow_factory.profiles.cmp.mode: .*set mode = "groupwise"'):
        validate_config(data)
    data["flow_factory"]["profiles"]["cmp"]["mode"] = "groupwise"
    validate_config(data)
    data["judges"]["q"] = {"kind": "yes_no", "backend": "vlm", "template": "image_quality@1"}
    data["watch"] = {"enabled": True, "shadows": {"q": ["cmp"]}}
    with pytest.raises(ConfigError, match="watch.shadows: judge 'cmp' compares whole groups"):
        validate_config(data)


# -- one outcome per pair ----------------------------------------------------------------------------


def _call(first, second, p=None, error=None):
    return Call(first, second, p, error)


def test_two_agreeing_orders_are_one_outcome_and_disagreeing_ones_average_or_mask():
    agree = [_call(0, 1, 1.0), _call(1, 0, 0.0)]  # 0 wins shown first and shown second
    o = combine_pair(0, 1, agree)
    assert o.done and o.score_a == 1.0 and o.agreed and o.score_of(1) == 0.0
    disagree = [_call(0, 1, 1.0), _call(1, 0, 1.0)]  # "the first shown is better" both times
    o = combine_pair(0, 1, disagree)
    assert o.done and o.score_a == 0.5 and o.agreed is False  # a tie, as MT-Bench counts it
    o = combine_pair(0, 1, disagree, swap_disagreement="mask")
    assert o.status == "masked" and o.score_a is None and "different winners" in o.reason
    soft = [_call(0, 1, 0.9), _call(1, 0, 0.3)]  # P(0 better) 0.9 and 0.7: agree
    o = combine_pair(0, 1, soft)
    assert o.agreed and math.isclose(o.score_a, 0.8)


def test_a_failed_call_is_never_a_tie():
    o = combine_pair(0, 1, [_call(0, 1, error="parse_error"), _call(1, 0, error="timeout")])
    assert o.status == "failed" and o.score_a is None and set(o.codes) == {"parse_error", "timeout"}
    half = [_call(0, 1, 1.0), _call(1, 0, error="timeout")]
    o = combine_pair(0, 1, half)
    assert o.status == "masked" and "one order failed" in o.reason
    o = combine_pair(0, 1, half, one_order_failed="keep")
    assert o.done and o.score_a == 1.0 and o.agreed is None
    assert combine_pair(0, 1, [_call(1, 0, 1.0)]).score_a == 0.0  # one order asked: its verdict


def test_a_call_has_a_verdict_or_an_error_never_both():
    with pytest.raises(ValueError):
        Call(0, 1, None)
    with pytest.raises(ValueError):
        Call(0, 1, 0.5, "timeout")
    with pytest.raises(ValueError):
        Call(0, 1, 1.5)


# -- aggregation -------------------------------------------------------------------------------------


def _done(a, b, score_a):
    return combine_pair(a, b, [_call(a, b, score_a)])


def test_win_rate_is_wins_plus_half_ties_over_done_comparisons_and_none_without_any():
    outcomes = [_done(0, 1, 1.0), _done(0, 2, 0.5), _done(1, 2, 0.0),
                combine_pair(0, 3, [_call(0, 3, error="timeout")]), combine_pair(1, 3, [_call(1, 3, error="timeout")])]
    scores = aggregate("win_rate@1", 4, outcomes)
    assert [s.reward for s in scores] == [0.75, 0.0, 0.75, None]
    assert (scores[0].compared, scores[0].decisive_wins, scores[0].ties) == (2, 1, 1)


def test_bradley_terry_recovers_the_order_of_a_sparse_schedule_and_keeps_unbeaten_finite():
    n = 8
    truth = list(range(n))  # strength order
    pairs = Schedule("circular", k=2).static_pairs(n)
    outcomes = [_done(a, b, 1.0 if truth[a] > truth[b] else 0.0) for a, b in pairs]
    scores = aggregate("bradley_terry@1", n, outcomes)
    rewards = [s.reward for s in scores]
    assert sorted(range(n), key=lambda i: rewards[i]) == sorted(range(n), key=lambda i: truth[i])
    assert all(0 < r < 1 and math.isfinite(s.extra["strength"]) for r, s in zip(rewards, scores))
    # the win rate of circular k=2 ties samples 2..5 (each beats two, loses to two); BT's fit orders them
    assert [s.reward for s in aggregate("win_rate@1", n, outcomes)] == [0.0, 0.25, 0.5, 0.5, 0.5, 0.5, 0.75, 1.0]


def test_bradley_terry_against_a_reference_is_the_chance_to_beat_it():
    outcomes = [_done(REFERENCE, 0, 0.0), _done(REFERENCE, 1, 1.0), _done(REFERENCE, 2, 0.5)]
    scores = aggregate("bradley_terry@1", 3, outcomes)
    assert scores[0].reward > 0.5 > scores[1].reward and math.isclose(scores[2].reward, 0.5, abs_tol=0.05)
    assert [s.reward for s in aggregate("win_rate@1", 3, outcomes)] == [1.0, 0.0, 0.5]


def test_an_unknown_aggregation_is_refused():
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate("mean@1", 2, [])


# -- the report ----------------------------------------------------------------------------------------


def test_swap_agreement_position_bias_and_three_cycles():
    outcomes = [combine_pair(0, 1, [_call(0, 1, 1.0), _call(1, 0, 0.0)]),  # agree: 0 > 1
                combine_pair(1, 2, [_call(1, 2, 1.0), _call(2, 1, 1.0)]),  # disagree: first shown wins
                combine_pair(0, 2, [_call(0, 2, 0.0)])]  # one order: 2 > 0
    assert swap_agreement(outcomes) == {"rate": 0.5, "pairs": 2, "agreed": 1}
    calls = [_call(0, 1, 1.0), _call(1, 0, 0.0), _call(1, 2, 1.0), _call(2, 1, 1.0), _call(0, 2, error="timeout")]
    assert position_bias(calls, "both") == {"first_chosen": 0.75, "verdicts": 4}
    assert position_bias(calls, "none")["first_chosen"] is None  # the index order, not a position
    cycle = [_done(0, 1, 1.0), _done(1, 2, 1.0), _done(0, 2, 0.0), _done(2, 3, 1.0), _done(1, 3, 1.0)]
    t = transitivity(cycle)
    assert t["triads"] == 2 and t["cycles"] == 1 and t["rate"] == 0.5  # 0>1>2>0; 1>2>3 with 1>3 is a ranking
    assert transitivity([_done(0, 1, 0.5), _done(1, 2, 1.0), _done(0, 2, 1.0)])["triads"] == 0  # a tie decides nothing


# -- the verdict parser and the template files -------------------------------------------------------------

THINK = dict(first=["Image 1 is better"], second=["Image 2 is better"])


@pytest.mark.parametrize("reply,winner", [
    ("<think>1. ...</think>\n<answer>Image 1 is better</answer>", "first"),
    ("<answer> Image 2 is better. </answer>", "second"),
    ("<answer>Image 2 is better</answer> <answer>Image 1 is better</answer>", "second"),  # the first tag
])
def test_the_answer_tag_names_the_winner(reply, winner):
    assert parse_answer_verdict(reply, **THINK).winner == winner


@pytest.mark.parametrize("reply,says", [
    ("<think>...</think> Image 1 is better", "no <answer>"),
    ("<answer>Both are equally good</answer>", "names no image"),
    ("<answer>Image 1 is better", "no <answer>"),
])
def test_an_answer_naming_no_image_is_a_parse_error_not_a_tie(reply, says):
    with pytest.raises(ParseError, match=says) as err:
        parse_answer_verdict(reply, **THINK)
    assert err.value.code == "parse_error"
    assert parse_answer_verdict("<answer>Tie</answer>", **THINK, tie=["Tie"]).p_first == 0.5


def test_the_shipped_comparative_templates():
    think = load_template("unified_reward_think@1")
    assert think.kind == "comparative" and think.media_slots == ("image", "image") and think.max_tokens == 4096
    assert think.verdict.read == "answer" and think.verdict.first == ("Image 1 is better",)
    one = load_template("pairwise_yes_no@1")
    assert one.verdict.read == "logprobs" and one.verdict.yes_means == "second" and one.yes_words == ("yes",)
    edit = load_template("edit_pairwise_yes_no@1")
    assert edit.media_slots == ("condition_image", "image", "image")


def _file(text: str):
    from pathlib import Path
    return read_template_file(Path("draft/1.toml"), "draft", "1", text.encode())


HEAD = 'id = "draft"\nversion = "1"\ndescription = "d"\nkind = "comparative"\n'


@pytest.mark.parametrize("body,says", [
    ("user = '<image>Which is better? Answer Image 1 or Image 2.'\n[verdict]\nread = 'answer'\n"
     "first = ['Image 1']\nsecond = ['Image 2']\n", "exactly two <image>"),
    ("user = '<image><image>Answer Image 1 or Image 2.'\n[verdict]\nread = 'answer'\n"
     "first = ['Image 1 wins']\nsecond = ['Image 2']\n", "phrase 'Image 1 wins' does not appear"),
    ("user = '<image><image>Is 2 better?'\nmax_tokens = 5\n[verdict]\nread = 'logprobs'\nyes_means = 'second'\n",
     "no request defaults"),
    ("user = '<image><image>Is 2 better? Really?'\n[verdict]\nread = 'logprobs'\nyes_means = 'second'\n",
     "one question"),
    ("user = '<image><image>Is 2 better?'\n[verdict]\nread = 'logprobs'\n", "needs yes_means"),
    ("user = '<video><image><image>Is 2 better?'\n[verdict]\nread = 'logprobs'\nyes_means = 'first'\n",
     "no <video> marker"),
])
def test_a_comparative_template_file_is_checked(body, says):
    with pytest.raises(TemplateError, match=says):
        _file(HEAD + body)


def test_a_closed_tag_in_a_prompt_is_not_a_media_marker():
    t = _file(HEAD + "user = '<image><image>Think in <think></think>, answer in <answer>Image 1</answer> or "
              "<answer>Image 2</answer>.'\n[verdict]\nread = 'answer'\nfirst = ['Image 1']\nsecond = ['Image 2']\n")
    assert t.verdict.tag == "answer"
    with pytest.raises(TemplateError, match="unknown media marker '<img>'"):
        _file(HEAD + "user = '<image><img>Is 2 better?'\n[verdict]\nread = 'logprobs'\nyes_means = 'first'\n")
