"""One judge call's verdict, and a pair's one outcome from the calls of its orders.

A call shows two images and returns P(first shown is better): 1 or 0 for a named winner, 0.5
for a tie the template allows, a probability for a verdict read from logprobs; or it failed,
with its error code (parse_error, timeout, ...). A failed call is never a tie.

A pair (a, b) gets one outcome, `score_a` = a's share of the win in [0, 1] (b's is 1 - score_a):

- both orders valid and agreeing (the same winner, or both a tie; for probabilities, both on the
  same side of 0.5): their mean;
- both valid and disagreeing: their mean (`swap_disagreement = "average"`: opposite verdicts
  are then a tie, as MT-Bench counts an inconsistent pair) or masked (`"mask"`);
- one order valid, the other failed: masked (`one_order_failed = "mask"`: its position bias
  would go uncorrected) or that one verdict (`"keep"`);
- one order asked (swap off or random) and valid: that verdict;
- no valid call: failed, with the calls' error codes.

`done` outcomes count in the aggregation; `masked` and `failed` ones do not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

REFERENCE = -1  # the reference image's index in a pair of the `reference` schedule


@dataclass(frozen=True)
class Call:
    """One judge call: `first` and `second` are the indices shown in that order (REFERENCE for
    the reference image); `p_first` is P(first shown is better), None when the call failed."""

    first: int
    second: int
    p_first: float | None
    error: str | None = None  # the schema's error code of a failed call
    message: str | None = None

    def __post_init__(self) -> None:
        if (self.p_first is None) == (self.error is None):
            raise ValueError("a call has either a verdict or an error code")
        if self.p_first is not None and not 0.0 <= self.p_first <= 1.0:
            raise ValueError(f"p_first must be in [0, 1], got {self.p_first}")

    @property
    def valid(self) -> bool:
        return self.p_first is not None

    def score_of(self, a: int) -> float:
        """a's share of the win in this call (a is one of the two shown)."""
        assert self.p_first is not None
        return self.p_first if self.first == a else 1.0 - self.p_first


def _side(score: float) -> int:
    return (score > 0.5) - (score < 0.5)


@dataclass(frozen=True)
class PairOutcome:
    """A pair's one outcome: `done` with `score_a`, or `masked` / `failed` with the reason."""

    a: int
    b: int
    status: str  # "done" | "masked" | "failed"
    score_a: float | None = None
    calls: int = 0  # calls asked for this pair
    valid_calls: int = 0
    agreed: bool | None = None  # both orders valid: whether they named the same winner
    reason: str | None = None
    codes: tuple[str, ...] = field(default=())  # error codes of the failed calls

    @property
    def done(self) -> bool:
        return self.status == "done"

    def score_of(self, i: int) -> float:
        assert self.score_a is not None
        return self.score_a if i == self.a else 1.0 - self.score_a


def combine_pair(a: int, b: int, calls: Sequence[Call], *, swap_disagreement: str = "average",
                 one_order_failed: str = "mask") -> PairOutcome:
    """The one outcome of pair (a, b) from the calls of its orders (see the module's rules)."""
    if swap_disagreement not in ("average", "mask") or one_order_failed not in ("mask", "keep"):
        raise ValueError("swap_disagreement is 'average' or 'mask'; one_order_failed is 'mask' or 'keep'")
    valid = [c for c in calls if c.valid]
    codes = tuple(c.error for c in calls if c.error is not None)
    common = {"calls": len(calls), "valid_calls": len(valid), "codes": codes}
    if not valid:
        why = ", ".join(sorted(set(codes))) or "no call was made"
        return PairOutcome(a, b, "failed", reason=f"no valid verdict ({why})", **common)
    scores = [c.score_of(a) for c in valid]
    if len(calls) >= 2 and len(valid) < len(calls) and one_order_failed == "mask":
        return PairOutcome(a, b, "masked", reason="one order failed "
                           f"({', '.join(sorted(set(codes)))}): its position bias would go uncorrected", **common)
    agreed = None
    if len(valid) >= 2:
        agreed = len({_side(s) for s in scores}) == 1
        if not agreed and swap_disagreement == "mask":
            return PairOutcome(a, b, "masked", agreed=False,
                               reason="the two orders named different winners", **common)
    return PairOutcome(a, b, "done", score_a=sum(scores) / len(scores), agreed=agreed, **common)
