"""Which pairs of a group of n samples are compared, and how many judge calls that costs.

- `all_pairs`: every pair once, n(n-1)/2, each shown lower index first (Pref-GRPO's
  `itertools.combinations` order);
- `circular`: each sample against the next k (indices mod n), n*k pairs while 2k < n (beyond,
  the pairs repeat and are kept once: all pairs);
- `swiss`: `rounds` rounds of floor(n/2) pairs; round 1 pairs neighbours by index, each later
  round pairs samples of close standing (win rate so far, then index) that have not met; a
  sample left without an unmet partner sits the round out;
- `reference`: each sample against the reference image, n pairs.

A pair is compared in one order (`swap = "none"`: the pair's own order, `"random"`: one order
drawn per pair) or in both (`"both"`, the default): calls = pairs x orders. `planned_calls` is
the most a schedule can cost for a group of n, what the budget is checked against at config load.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass

SCHEDULES = ("all_pairs", "circular", "swiss", "reference")
SWAP_MODES = ("both", "random", "none")


@dataclass(frozen=True)
class Schedule:
    """A schedule and its parameter: `k` (circular), `rounds` (swiss)."""

    name: str
    k: int = 2
    rounds: int = 3

    def __post_init__(self) -> None:
        if self.name not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.name!r} (known: {', '.join(SCHEDULES)})")
        if self.k < 1 or self.rounds < 1:
            raise ValueError("circular k and swiss rounds must be at least 1")

    @property
    def adaptive(self) -> bool:
        """Swiss rounds are drawn from the standings so far: one round at a time."""
        return self.name == "swiss"

    @property
    def needs_siblings(self) -> bool:
        """Every schedule but `reference` compares samples with each other (a group of 1 has none)."""
        return self.name != "reference"

    def describe(self) -> dict[str, object]:
        params: dict[str, object] = {"k": self.k} if self.name == "circular" else \
            {"rounds": self.rounds} if self.name == "swiss" else {}
        return {"name": self.name, **params}

    def max_pairs(self, n: int) -> int:
        """The most pairs this schedule compares in a group of n."""
        if n < 1:
            return 0
        if self.name == "reference":
            return n
        every = n * (n - 1) // 2
        if self.name == "all_pairs":
            return every
        if self.name == "circular":
            return min(n * self.k, every) if 2 * self.k < n else every
        return min(self.rounds * (n // 2), every)  # swiss: no pair meets twice

    def static_pairs(self, n: int) -> list[tuple[int, int]]:
        """The pairs of a non-adaptive sibling schedule, each (lower index, higher index), in the
        order they are asked (grouped by their first sample: consecutive calls share its image)."""
        if self.name == "all_pairs":
            return list(itertools.combinations(range(n), 2))
        if self.name == "circular":
            seen: set[tuple[int, int]] = set()
            out = []
            for i in range(n):
                for step in range(1, self.k + 1):
                    j = (i + step) % n
                    pair = (min(i, j), max(i, j))
                    if i != j and pair not in seen:
                        seen.add(pair)
                        out.append(pair)
            return out
        raise ValueError(f"schedule {self.name!r} has no static sibling pairs")


def orders_of(swap: str) -> int:
    """Judge calls per pair under a swap mode."""
    if swap not in SWAP_MODES:
        raise ValueError(f"unknown swap mode {swap!r} (known: {', '.join(SWAP_MODES)})")
    return 2 if swap == "both" else 1


def planned_calls(schedule: Schedule, n: int, swap: str) -> int:
    """The most judge calls `schedule` makes for a group of n under `swap`."""
    return schedule.max_pairs(n) * orders_of(swap)


def swiss_pairs(n: int, standing: Sequence[float], met: set[frozenset[int]]) -> list[tuple[int, int]]:
    """One Swiss round: samples sorted by standing (higher first, then index), each paired with
    the next one below it it has not met yet. Round 1 (equal standings) pairs neighbours by index.
    With an odd count, the sample that sits out is the lowest standing among those that played
    most so far, so no sample sits out twice while another has not sat out."""
    order = sorted(range(n), key=lambda i: (-standing[i], i))
    if n % 2:
        played = [sum(1 for pair in met if i in pair) for i in range(n)]
        most = max(played)
        sits_out = next(i for i in reversed(order) if played[i] == most)
        order.remove(sits_out)
    unpaired = list(order)
    pairs = []
    while len(unpaired) >= 2:
        a = unpaired.pop(0)
        partner = next((b for b in unpaired if frozenset((a, b)) not in met), None)
        if partner is None:
            continue  # a has met everyone left: it sits this round out
        unpaired.remove(partner)
        pairs.append((min(a, partner), max(a, partner)))
    return pairs


def presentation_orders(pair: tuple[int, int], swap: str, rng: random.Random) -> list[tuple[int, int]]:
    """The (first shown, second shown) orders a pair is asked in: its own order, both, or one
    drawn from `rng`."""
    a, b = pair
    if swap == "both":
        return [(a, b), (b, a)]
    if swap == "random":
        return [(a, b)] if rng.random() < 0.5 else [(b, a)]
    return [(a, b)]
