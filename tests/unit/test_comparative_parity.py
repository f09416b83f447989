"""Parity with Pref-GRPO: on frozen groups with scripted UnifiedReward-Think replies, the
comparative judge with `unified_reward_think@1`, all pairs, swap off and `win_rate@1` gives each
sample Pref-GRPO's own win rate.

The peer: Pref-GRPO commit 3e787f6dd5a3051b40d61f07e9578468ac26130a,
`fastvideo/rewards/unifiedreward_think.py`, `_pairwise_win_rate` (with `_extract_answer`), run
on the same replies (tests/support/pref_grpo_peer.py reads its source from a clone of the
repository at test time and runs it under an interpreter with torch). Where no clone or no torch
is here, the values it gave once on these groups (FROZEN below, from that run) stand in.

Pref-GRPO rounds each win rate to 3 decimals and returns float32 tensors; ours keeps the exact
fraction, which rounded the same way is Pref-GRPO's number exactly. Where Pref-GRPO reads an
unparsable reply as a tie (0.5 to each), ours leaves the comparison out: the last test shows our
rewards are then Pref-GRPO's aggregation over the replies that parse, and not its number.
"""

from __future__ import annotations

import functools
import itertools
import random

import numpy as np
import pytest

from judge_gateway.schema import RewardRequest, SampleInput
from tests.support.comparative_stub import StubJudge, comparative_gateway, gray_png
from tests.support.pref_grpo_peer import PREF_GRPO_COMMIT, pref_grpo_repo, run_pref_grpo, torch_python

SIZES = (2, 4, 5, 8, 16)
FORMS = [  # how a reply may spell its verdict; Pref-GRPO and ours read each the same way
    "<think>\n1. Semantic consistency: \n    Image 1 (8/10) - ...\n</think>\n<answer>{verdict}</answer>",
    "<answer>{verdict}</answer>",
    "<think>...</think>\n<answer> {verdict}. </answer>\n",
]
UNPARSABLE = ["<think>both are fine</think>", "<answer>Both images are equally good</answer>"]


def _value(index: int) -> int:
    return 5 + 15 * index  # the gray level of sample `index`'s image


def frozen_groups(unparsable: bool = False) -> list[dict]:
    """Groups of scripted replies for every pair (lower index first), seeded: a hidden quality
    per sample, the better one named 80% of the time; with `unparsable`, one reply in six has no
    verdict Pref-GRPO or we can read."""
    rng = random.Random(35 + unparsable)
    groups = []
    for n in SIZES:
        quality = [rng.random() for _ in range(n)]
        responses = []
        for i, j in itertools.combinations(range(n), 2):
            better_first = (quality[i] > quality[j]) == (rng.random() < 0.8)
            text = rng.choice(FORMS).format(verdict=f"Image {1 if better_first else 2} is better")
            if unparsable and rng.random() < 1 / 6:
                text = rng.choice(UNPARSABLE)
            responses.append({"first_index": i, "second_index": j, "model_output": text})
        groups.append({"n": n, "responses": responses})
    return groups


# Pref-GRPO's `overall_reward` on frozen_groups(), from one run of its code at the commit above.
FROZEN = [
    [0.0, 1.0],
    [0.333, 1.0, 0.333, 0.333],
    [0.25, 0.75, 0.25, 0.25, 1.0],
    [0.429, 0.429, 0.857, 0.857, 0.429, 0.571, 0.0, 0.429],
    [0.533, 0.6, 0.733, 0.267, 0.8, 0.667, 0.6, 0.4, 0.2, 0.333, 0.667, 0.0, 0.8, 0.8, 0.267, 0.333],
]


async def our_win_rates(groups: list[dict]) -> list[list[float | None]]:
    """Each group through the gateway: the judge's replies are the script's for the pair shown."""
    script = {}
    for g, group in enumerate(groups):
        for r in group["responses"]:
            script[(g, _value(r["first_index"]), _value(r["second_index"]))] = r["model_output"]
    samples = [SampleInput(prompt=f"prompt {g}", image=gray_png(_value(i)), group_id=f"g{g}")
               for g, group in enumerate(groups) for i in range(group["n"])]
    group_of = [g for g, group in enumerate(groups) for _ in range(group["n"])]
    gateway = comparative_gateway("unified_reward_think@1", swap="none", schedule="all_pairs", aggregation="win_rate@1")

    def reply(first: int, second: int, text: str) -> str:
        g = int(text.split("「prompt ", 1)[1].split("」", 1)[0])  # the caption names the group
        return script[(g, first, second)]

    stub = StubJudge(lambda a, b: 0.5, reply=reply).install(gateway)
    try:
        response = await gateway.score(RewardRequest(samples=samples, judges=["cmp"]))
    finally:
        await gateway.aclose()
    assert all(first < second for first, second in stub.calls)  # lower index first, as Pref-GRPO asks
    assert len(stub.calls) == sum(n * (n - 1) // 2 for n in SIZES)
    out: list[list[float | None]] = [[] for _ in groups]
    for result, g in zip(response.results, group_of):
        out[g].append(result.scores["cmp"].reward)
    return out


def _readable(groups: list[dict]) -> list[dict]:
    return [{"n": g["n"], "responses": [r for r in g["responses"] if "is better" in r["model_output"]]}
            for g in groups]


@functools.cache
def _peer() -> dict[str, list[dict]] | None:
    """Pref-GRPO's results on the three sets of groups (one run of its code: torch loads once)."""
    repo, python = pref_grpo_repo(), torch_python()
    if repo is None or python is None:
        return None
    sets = {"frozen": frozen_groups(), "unparsable": frozen_groups(unparsable=True),
            "readable": _readable(frozen_groups(unparsable=True))}
    results = run_pref_grpo(repo, python, [g for groups in sets.values() for g in groups])
    out, start = {}, 0
    for name, groups in sets.items():
        out[name] = results[start:start + len(groups)]
        start += len(groups)
    return out


async def test_win_rate_with_swap_off_and_all_pairs_is_pref_grpos():
    groups = frozen_groups()
    ours = await our_win_rates(groups)
    peer = None if _peer() is None else _peer()["frozen"]
    expected = [p["overall_reward"] for p in peer] if peer is not None else FROZEN
    if peer is not None:
        assert expected == FROZEN, f"Pref-GRPO@{PREF_GRPO_COMMIT[:7]} gives other values than frozen here"
        assert {p["dtype"] for p in peer} == {"torch.float32"}
    for our_group, peer_group in zip(ours, expected):
        assert [round(r, 3) for r in our_group] == peer_group  # exactly, after Pref-GRPO's rounding
    if peer is not None:  # and Pref-GRPO's float32 rewards, to the bit
        for our_group, p in zip(ours, peer):
            assert [float(np.float32(round(r, 3))) for r in our_group] == p["overall"]


async def test_an_unparsable_reply_is_left_out_where_pref_grpo_counts_a_tie():
    groups = frozen_groups(unparsable=True)
    ours = await our_win_rates(groups)
    readable = _readable(groups)
    if _peer() is None:
        pytest.skip("no clone of Pref-GRPO or no interpreter with torch here: the peer cannot run")
    peer_all, peer_readable = _peer()["unparsable"], _peer()["readable"]
    dropped = sum(len(g["responses"]) - len(r["responses"]) for g, r in zip(groups, readable))
    assert dropped >= 5
    for our_group, group, masked in zip(ours, readable, peer_readable):
        compared = [sum(i in (r["first_index"], r["second_index"]) for r in group["responses"])
                    for i in range(group["n"])]
        # a sample with no readable comparison is invalid here (Pref-GRPO's 0.0 for it is no win rate)
        assert [None if r is None else round(r, 3) for r in our_group] == \
            [v if c else None for v, c in zip(masked["overall_reward"], compared)]
    differ = sum(round(o, 3) != p for og, pg in zip(ours, peer_all) for o, p in zip(og, pg["overall_reward"])
                 if o is not None)
    assert differ >= 3  # Pref-GRPO's 0.5 per unparsable reply moves these samples' rewards
