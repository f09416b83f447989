"""A group's pair outcomes -> one reward per sample: named, versioned aggregations. A released
name@version never changes what it computes; a different rule is a new version.

- `win_rate@1`, Pref-GRPO's definition (`fastvideo/rewards/unifiedreward_think.py`,
  `_pairwise_win_rate`): a sample's reward = (its wins + half its ties) / its comparisons, over
  the pairs with a `done` outcome; an outcome that is a probability counts as that fraction of a
  win. Unlike Pref-GRPO, a failed or masked comparison is left out (Pref-GRPO counts an
  unparsable reply as a tie, 0.5 each), and the value is not rounded (Pref-GRPO rounds to 3
  decimals).
- `bradley_terry@1`: strengths p_i fitted to the outcomes by the MM algorithm (Hunter 2004,
  "MM algorithms for generalized Bradley-Terry models"), each sample with a prior of half a win
  and half a loss against an anchor of strength 1 (so an unbeaten sample keeps a finite strength
  and a sparse schedule still ranks); reward = the sample's expected win rate against the other
  members, mean over j of p_i / (p_i + p_j) (against the reference, p_i / (p_i + p_ref), under
  the `reference` schedule). `details.strength` = log p_i.

A sample with no `done` outcome has no reward (None): its cell is invalid, never a 0.5.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .outcomes import REFERENCE, PairOutcome


@dataclass
class MemberScore:
    """One sample's aggregate: `reward` None when it has no done comparison."""

    reward: float | None
    compared: int = 0
    wins: float = 0.0  # the win shares it got (a tie: 0.5)
    decisive_wins: int = 0
    ties: int = 0
    losses: int = 0
    extra: dict[str, float] = field(default_factory=dict)


def _tally(n: int, outcomes: Sequence[PairOutcome]) -> list[MemberScore]:
    scores = [MemberScore(reward=None) for _ in range(n)]
    for o in outcomes:
        if not o.done:
            continue
        for i in (o.a, o.b):
            if i == REFERENCE:
                continue
            s = o.score_of(i)
            m = scores[i]
            m.compared += 1
            m.wins += s
            if s > 0.5:
                m.decisive_wins += 1
            elif s < 0.5:
                m.losses += 1
            else:
                m.ties += 1
    return scores


def win_rate(n: int, outcomes: Sequence[PairOutcome]) -> list[MemberScore]:
    scores = _tally(n, outcomes)
    for m in scores:
        m.reward = m.wins / m.compared if m.compared else None
    return scores


BT_PRIOR = 0.5  # bradley_terry@1: virtual wins and losses of each sample against the anchor (strength 1)
BT_MAX_ITERATIONS = 10_000
BT_TOLERANCE = 1e-10


def bradley_terry(n: int, outcomes: Sequence[PairOutcome]) -> list[MemberScore]:
    scores = _tally(n, outcomes)
    players = list(range(n)) + ([REFERENCE] if any(REFERENCE in (o.a, o.b) for o in outcomes) else [])
    wins = {p: 0.0 for p in players}
    games: dict[tuple[int, int], float] = {}
    for o in outcomes:
        if not o.done:
            continue
        wins[o.a] += o.score_of(o.a)
        wins[o.b] += o.score_of(o.b)
        key = (min(o.a, o.b), max(o.a, o.b))
        games[key] = games.get(key, 0.0) + 1.0
    opponents: dict[int, list[tuple[int, float]]] = {p: [] for p in players}
    for (x, y), count in games.items():
        opponents[x].append((y, count))
        opponents[y].append((x, count))
    strength = {p: 1.0 for p in players}
    for _ in range(BT_MAX_ITERATIONS):
        updated = {}
        for p in players:
            denominator = 2 * BT_PRIOR / (strength[p] + 1.0)
            for other, count in opponents[p]:
                denominator += count / (strength[p] + strength[other])
            updated[p] = (wins[p] + BT_PRIOR) / denominator
        change = max(abs(math.log(updated[p] / strength[p])) for p in players)
        strength = updated
        if change < BT_TOLERANCE:
            break
    for i, m in enumerate(scores):
        if not m.compared:
            continue
        p = strength[i]
        if REFERENCE in strength:
            m.reward = p / (p + strength[REFERENCE])
        else:
            others = [strength[j] for j in range(n) if j != i]
            m.reward = sum(p / (p + q) for q in others) / len(others)
        m.extra["strength"] = math.log(p)
    return scores


Aggregation = Callable[[int, Sequence[PairOutcome]], list[MemberScore]]
AGGREGATIONS: dict[str, Aggregation] = {"win_rate@1": win_rate, "bradley_terry@1": bradley_terry}


def aggregate(name: str, n: int, outcomes: Sequence[PairOutcome]) -> list[MemberScore]:
    """The named aggregation of a group of n samples' outcomes."""
    try:
        return AGGREGATIONS[name](n, outcomes)
    except KeyError:
        raise ValueError(f"unknown aggregation {name!r} (known: {', '.join(AGGREGATIONS)})") from None
