"""A judge with a planted position bias: it prefers the image shown first 70% of the time.

The stub judge (tests/support/comparative_stub.py) sees two flat gray images whose value is
their true quality and names the better one with probability sigmoid(d / T + beta) for the first
shown, d the quality difference in ranks: T = 3 is its noise (adjacent ranks told apart 58% of the
time, the ends 91%), beta = 1.1 the planted bias, which makes it choose the first image in 70% of
its verdicts over these groups (beta = 0: no bias). 120 groups of 8 samples, qualities shuffled
against the sample order, all pairs, win_rate@1; the mean over groups of Spearman's correlation
between the rewards and the true qualities, with the group reports:

- swap on (both orders), biased judge: correlation at least that of the unbiased judge asked as
  Pref-GRPO asks (one order, lower index first), and the report reveals the bias: swap agreement
  far below the unbiased judge's, P(first chosen) ~0.70;
- swap off, biased judge: the bias goes into the rewards (the samples shown first more often, low
  indices, gain), the correlation drops, and the report has no bias to show (no agreement rate,
  no P(first chosen): the shown order is the index order);
- one random order per pair: the bias is measured (P(first chosen) ~0.70), though not cancelled.
"""

from __future__ import annotations

import random
import statistics

from judge_gateway.schema import RewardRequest, SampleInput
from tests.support.comparative_stub import StubJudge, comparative_gateway, gray_png, sigmoid, spearman

GROUPS, SIZE, NOISE_T, BIAS = 120, 8, 3.0, 1.1
STEP = 30  # gray levels per quality rank


def _quality(value: int) -> float:
    return (value - 20) / STEP


async def _run(beta: float, swap: str, seed: int = 7) -> dict:
    rng = random.Random(seed)
    samples, truth = [], []
    for g in range(GROUPS):
        ranks = list(range(SIZE))
        rng.shuffle(ranks)
        truth.append(ranks)
        samples += [SampleInput(prompt=f"group {g}", image=gray_png(20 + STEP * r), group_id=str(g)) for r in ranks]
    gateway = comparative_gateway("unified_reward_think@1", swap=swap, schedule="all_pairs", seed=seed)
    policy = lambda first, second: sigmoid((_quality(first) - _quality(second)) / NOISE_T + beta)  # noqa: E731
    stub = StubJudge(policy, seed=seed).install(gateway)
    try:
        response = await gateway.score(RewardRequest(samples=samples, judges=["cmp"]))
    finally:
        await gateway.aclose()
    rhos, agreement, first_chosen = [], [], []
    for g in range(GROUPS):
        scores = [r.scores["cmp"] for r in response.results[g * SIZE:(g + 1) * SIZE]]
        assert all(s.valid for s in scores)
        rhos.append(spearman([s.reward for s in scores], truth[g]))
        report = scores[0].details["group"]
        agreement.append(report["swap_agreement"]["rate"])
        first_chosen.append(report["position_bias"]["first_chosen"])
    measured = [f for f in first_chosen if f is not None]
    return {"rho": statistics.fmean(rhos), "calls": len(stub.calls),
            "agreement": statistics.fmean(agreement) if None not in agreement else None,
            "first_chosen": statistics.fmean(measured) if measured else None,
            "planted_first_rate": sum(1 for a, b in stub.calls if policy(a, b) > 0) and None}


async def test_swap_cancels_and_reveals_a_planted_position_bias():
    unbiased_one_order = await _run(0.0, "none")
    unbiased_swapped = await _run(0.0, "both")
    biased_swapped = await _run(BIAS, "both")
    biased_one_order = await _run(BIAS, "none")
    biased_random = await _run(BIAS, "random")
    print({name: {k: v for k, v in run.items() if k != "planted_first_rate"} for name, run in [
        ("unbiased, swap none", unbiased_one_order), ("unbiased, swap both", unbiased_swapped),
        ("biased, swap both", biased_swapped), ("biased, swap none", biased_one_order),
        ("biased, swap random", biased_random)]})
    assert biased_swapped["calls"] == 2 * unbiased_one_order["calls"] == GROUPS * SIZE * (SIZE - 1)

    # swap on: the biased judge's rewards rank the samples at least as well as an unbiased judge's in one order
    assert biased_swapped["rho"] >= unbiased_one_order["rho"]
    # ... and the report reveals the bias
    assert 0.66 <= biased_swapped["first_chosen"] <= 0.74
    assert 0.46 <= unbiased_swapped["first_chosen"] <= 0.54
    assert biased_swapped["agreement"] < unbiased_swapped["agreement"] - 0.08

    # swap off: the bias goes into the rewards, and nothing in the report shows it
    assert biased_one_order["rho"] < biased_swapped["rho"] - 0.1
    assert biased_one_order["agreement"] is None and biased_one_order["first_chosen"] is None

    # one random order a pair: measured, not cancelled
    assert 0.66 <= biased_random["first_chosen"] <= 0.74 and biased_random["agreement"] is None
    assert biased_random["calls"] == unbiased_one_order["calls"]
