from __future__ import annotations

import pytest

from judge_gateway.combine import combine_sample, group_transform
from judge_gateway.config import CombineConfig, NormalizeConfig
from judge_gateway.schema import ErrorCode, JudgeScore


def ok(name: str, reward: float) -> JudgeScore:
    return JudgeScore(judge=name, reward=reward, raw=reward, valid=True)


def bad(name: str) -> JudgeScore:
    return JudgeScore.failure(name, ErrorCode.timeout, "late")


def test_weighted_mean_and_sum():
    scores = {"a": ok("a", 1.0), "b": ok("b", 0.0)}
    w = {"a": 3.0, "b": 1.0}
    assert combine_sample(scores, w, CombineConfig(policy="weighted_mean"))[0] == pytest.approx(0.75)
    assert combine_sample(scores, w, CombineConfig(policy="sum"))[0] == pytest.approx(3.0)


@pytest.mark.parametrize("on_invalid, expected", [("invalidate", None), ("skip", 1.0), ("fill", 0.5)])
def test_invalid_policies_always_flag(on_invalid, expected):
    scores = {"a": ok("a", 1.0), "b": bad("b")}
    reward, valid, invalid = combine_sample(scores, {"a": 1.0, "b": 1.0},
                                            CombineConfig(on_invalid=on_invalid, fill_value=0.0))
    assert valid is False and invalid == ["b"]
    assert reward == (pytest.approx(expected) if expected is not None else None)


def test_all_invalid_gives_no_number_even_when_skipping():
    assert combine_sample({"a": bad("a")}, {"a": 1.0}, CombineConfig(on_invalid="skip"))[0] is None


def test_rank_and_zscore_within_groups():
    rewards = [0.1, 0.9, 0.5, 0.3, None, 0.7]
    groups = ["g1", "g1", "g1", "g2", "g2", None]
    rank = group_transform(rewards, groups, "rank")
    assert rank[:3] == [0.0, 1.0, 0.5]
    assert rank[3] == 0.5  # alone among the valid members of g2
    assert rank[4] is None and rank[5] is None
    z = group_transform(rewards, groups, "zscore")
    assert sum(z[:3]) == pytest.approx(0.0)
    assert z[1] > z[2] > z[0]
    assert z[3] == 0.0
    assert group_transform(rewards, groups, "none") == [None] * 6


def test_rank_ties_share_the_mean_rank():
    assert group_transform([0.5, 0.5, 1.0], ["g"] * 3, "rank") == [0.25, 0.25, 1.0]


def test_ordinal_rank_is_flow_factory_pickscore_rank():
    # PickScore_Rank: scores.argsort().argsort() / n (values checked against torch 2.13 on the CPU)
    assert group_transform([0.5, 0.2, 0.5, 0.2, 0.9], ["g"] * 5, "ordinal_rank") == [0.4, 0.0, 0.6, 0.2, 0.8]
    # the same values under `rank`: average ranks / (n - 1)
    assert group_transform([0.5, 0.2, 0.5, 0.2, 0.9], ["g"] * 5, "rank") == [0.625, 0.125, 0.625, 0.125, 1.0]


def test_ordinal_rank_breaks_ties_by_position():
    assert group_transform([1.0, 1.0, 1.0], ["g"] * 3, "ordinal_rank") == [0.0, 1 / 3, 2 / 3]
    assert group_transform([3.0, 1.0, 3.0, 2.0], ["g"] * 4, "ordinal_rank") == [0.5, 0.0, 0.75, 0.25]


def test_ordinal_rank_counts_valid_members_only():
    rewards = [0.9, None, 0.1, 0.5, 0.3]
    groups = ["g", "g", "g", "h", None]
    assert group_transform(rewards, groups, "ordinal_rank") == [0.5, None, 0.0, 0.0, None]


def test_normalize_kinds():
    assert NormalizeConfig(kind="affine", scale=1 / 26).apply(26.0) == pytest.approx(1.0)
    assert NormalizeConfig(kind="minmax", min=1, max=4).apply(2.5) == pytest.approx(0.5)
    assert NormalizeConfig(kind="identity", clip=(0, 1)).apply(1.7) == 1.0
    with pytest.raises(ValueError):
        NormalizeConfig(kind="minmax", min=4, max=1)
