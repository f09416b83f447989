"""Options of the comparative judge kind (`kind = "comparative"`): a group judged by comparing its
samples, pair by pair (docs/judges/comparative.md). Validated at config load, the budget too: the
schedule's most calls for a group of `max_group_size` must fit `budget`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ..comparisons import AGGREGATIONS, Schedule, orders_of, planned_calls
from .vlm_options import VLMOptions

_SCHEDULES = Literal["all_pairs", "circular", "swiss", "reference"]
_AGGREGATIONS = Literal["win_rate@1", "bradley_terry@1"]
assert set(_AGGREGATIONS.__args__) == set(AGGREGATIONS)  # type: ignore[attr-defined]


class ComparativeOptions(VLMOptions):
    schedule: _SCHEDULES = Field(
        "all_pairs", description="Which pairs of a group are compared: all_pairs (n(n-1)/2), circular (each "
        "sample against the next circular_k), swiss (swiss_rounds rounds of n/2 pairs, paired by standing), "
        "reference (each sample against its reference image, condition_images[reference_index])."
    )
    circular_k: int = Field(2, ge=1, description="schedule = circular: each sample is compared with the next k.")
    swiss_rounds: int = Field(3, ge=1, description="schedule = swiss: the rounds.")
    reference_index: int = Field(
        0, ge=0, description="schedule = reference: which of a sample's condition_images is the reference "
        "image it is compared with (the group's samples share it)."
    )
    swap: Literal["both", "random", "none"] = Field(
        "both", description="both: every pair in both orders, combined into one outcome (position bias "
        "cancelled, and measured); random: one order drawn per pair (bias measured, not cancelled); none: "
        "one order, lower index first (Pref-GRPO's)."
    )
    swap_disagreement: Literal["average", "mask"] = Field(
        "average", description="A pair whose two orders name different winners: average (the mean of its two "
        "verdicts: opposite verdicts are a tie, as MT-Bench counts them) or mask (left out of the aggregation)."
    )
    one_order_failed: Literal["mask", "keep"] = Field(
        "mask", description="swap = both, and one order's call failed: mask the pair (its position bias would "
        "go uncorrected), or keep the one verdict."
    )
    aggregation: _AGGREGATIONS = Field(
        "win_rate@1", description="How outcomes become a reward: win_rate@1 (Pref-GRPO's win rate over the "
        "done comparisons) or bradley_terry@1 (a Bradley-Terry fit: the expected win rate in the group)."
    )
    max_group_size: int = Field(
        16, ge=1, le=256, description="The largest group this judge compares; a request with a larger group is "
        "refused (422) before anything is scored."
    )
    budget: int = Field(
        gt=0, description="Required: the most judge calls one group may cost. Checked at load against the "
        "schedule's calls for a group of max_group_size (pairs x orders)."
    )
    group_deadline_s: float = Field(
        100.0, gt=0, description="A group's comparisons stop at this deadline; the calls still out count as "
        "timed out, and min_coverage decides what is scored. The default is under the 120 s timeout of "
        "Flow-Factory's groupwise client, which sends the group again when it times out."
    )
    min_coverage: float = Field(
        0.5, ge=0.0, le=1.0, description="The fraction of a group's planned calls that must return a valid "
        "verdict; below it every sample of the group is invalid (with the calls' main error code)."
    )
    seed: int = Field(0, description="swap = random: the seed of the orders drawn (mixed with the group's prompt).")
    # read = answer (a generated reply)
    max_tokens: int | None = Field(None, gt=0, description="read = answer: the longest reply (default: the "
                                   "template's, else 2048).")
    temperature: float | None = Field(None, ge=0.0, description="read = answer: sampling temperature (default: "
                                      "the template's, else 0).")
    stop: list[str] | None = Field(None, description="read = answer: stop sequences (default: the template's).")
    # read = logprobs (one token)
    top_logprobs: int = Field(20, ge=1, le=20, description="read = logprobs: vLLM's default --max-logprobs is 20.")
    min_answer_mass: float = Field(
        0.5, ge=0.0, le=1.0, description="read = logprobs: below this listed P(yes)+P(no) the call is answer_missing."
    )
    counting: Literal["variants", "exact"] = Field(
        "variants", description="read = logprobs: how the answer words are counted (as the yes_no kind)."
    )

    def schedule_spec(self) -> Schedule:
        return Schedule(self.schedule, k=self.circular_k, rounds=self.swiss_rounds)

    @model_validator(mode="after")
    def _fits_the_budget(self) -> "ComparativeOptions":
        n = self.max_group_size
        calls = planned_calls(self.schedule_spec(), n, self.swap)
        if calls > self.budget:
            orders = orders_of(self.swap)
            fits = _what_fits(n, self.swap, self.budget)
            raise ValueError(
                f"schedule {self.schedule!r} with swap = {self.swap!r} makes up to {calls} judge calls for a group "
                f"of max_group_size = {n} ({calls // orders} pairs x {orders} order(s)), over budget = "
                f"{self.budget}; {fits}")
        return self


def _what_fits(n: int, swap: str, budget: int) -> str:
    """What the budget allows for groups of n, to say in the error."""
    options = []
    per = orders_of(swap)
    k = max((k for k in range(1, n) if planned_calls(Schedule("circular", k=k), n, swap) <= budget), default=0)
    if k:
        options.append(f"circular with circular_k <= {k}")
    rounds = budget // (per * max(1, n // 2))
    if rounds:
        options.append(f"swiss with swiss_rounds <= {rounds}")
    if planned_calls(Schedule("reference"), n, swap) <= budget:
        options.append("reference")
    allowed = "; it allows " + ", ".join(options) if options else "; no sibling schedule fits it"
    return f"raise the budget, lower max_group_size, or choose a sparser schedule{allowed}"
