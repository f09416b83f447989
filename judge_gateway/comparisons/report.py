"""What every group reports about its judge's consistency:

- swap agreement: of the pairs asked in both orders with both verdicts valid, the fraction whose
  two verdicts name the same winner. A judge without position bias agrees as often as its own
  noise allows; a judge that prefers a position disagrees whenever the preference outweighs the
  images' difference. Null when no pair was asked in both orders (swap off or random).
- position bias: the fraction of valid verdicts that chose the image shown first (a tie counts
  half; a verdict read from logprobs counts its P(first)). With both orders, or one random order,
  each pair is seen first as often as second, so an unbiased judge is near 0.5. Null with swap
  off: the shown order is the index order, so the rate mixes position with index.
- transitivity: the 3-cycles of the pairwise majority (a beats b, b beats c, c beats a) among the
  triads whose three pairs all have a decisive done outcome. A cycle means the group's order is
  not one ranking: rewards over it rest on the schedule that was drawn.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from .outcomes import REFERENCE, Call, PairOutcome


def swap_agreement(outcomes: Sequence[PairOutcome]) -> dict[str, Any]:
    both = [o for o in outcomes if o.agreed is not None]
    agreed = sum(1 for o in both if o.agreed)
    return {"rate": agreed / len(both) if both else None, "pairs": len(both), "agreed": agreed}


def position_bias(calls: Sequence[Call], swap: str) -> dict[str, Any]:
    valid = [c.p_first for c in calls if c.p_first is not None]
    if swap == "none" or not valid:
        return {"first_chosen": None, "verdicts": len(valid)}
    return {"first_chosen": sum(valid) / len(valid), "verdicts": len(valid)}


def transitivity(outcomes: Sequence[PairOutcome]) -> dict[str, Any]:
    beats: dict[tuple[int, int], bool] = {}  # (x, y) -> x beat y, for decisive done pairs
    members: set[int] = set()
    for o in outcomes:
        if not o.done or REFERENCE in (o.a, o.b) or o.score_a == 0.5:
            continue
        assert o.score_a is not None
        beats[(o.a, o.b)] = o.score_a > 0.5
        beats[(o.b, o.a)] = o.score_a < 0.5
        members.update((o.a, o.b))
    triads = cycles = 0
    for x, y, z in itertools.combinations(sorted(members), 3):
        if (x, y) in beats and (y, z) in beats and (x, z) in beats:
            triads += 1
            # a 3-cycle: x>y>z>x or x<y<z<x
            if beats[(x, y)] == beats[(y, z)] == beats[(z, x)]:
                cycles += 1
    return {"triads": triads, "cycles": cycles, "rate": cycles / triads if triads else None}
