"""One group's comparisons, run to its deadline: the schedule's pairs (round by round for Swiss
rounds, which pair by the standings so far), each in the orders the swap mode asks for, every call
of a round at once; then one outcome per pair, the aggregation, and the report each member's
score carries (comparisons/report.py says what its numbers mean).

A call that has not answered at the group's deadline is cancelled and counts as failed
(`timeout`): a group always ends by its deadline, whatever one pair's judge does. The coverage
(valid verdicts / calls the schedule asked for) below `min_coverage` makes every member invalid.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..comparisons import (
    REFERENCE,
    Call,
    MemberScore,
    PairOutcome,
    Schedule,
    aggregate,
    combine_pair,
    planned_calls,
    position_bias,
    swap_agreement,
    swiss_pairs,
    transitivity,
)
from ..comparisons.schedules import orders_of, presentation_orders
from ..schema import ErrorCode

Ask = Callable[[int, int], Awaitable[Call]]  # (first shown, second shown) -> the call's verdict


@dataclass(frozen=True)
class GroupPlan:
    """How one group is compared: the judge's options, for a group of `n`."""

    n: int
    schedule: Schedule
    swap: str
    swap_disagreement: str
    one_order_failed: str
    aggregation: str
    budget: int
    min_coverage: float
    deadline_s: float


@dataclass
class GroupOutcome:
    members: list[MemberScore]
    outcomes: list[PairOutcome]
    calls: list[Call]
    report: dict[str, Any]
    below_coverage: bool
    codes_by_member: list[Counter[str]] = field(default_factory=list)  # failed calls' codes per member

    def main_code(self, member: int | None = None) -> str:
        """The commonest error code of the failed calls (of one member's pairs, or the group's)."""
        codes: Counter[str] = Counter()
        if member is None:
            codes.update(c.error for c in self.calls if c.error is not None)
        else:
            codes = self.codes_by_member[member]
        if not codes:
            return ErrorCode.answer_missing.value  # verdicts came back, but every one was masked
        order = [code.value for code in ErrorCode]
        return min(codes, key=lambda code: (-codes[code], order.index(code) if code in order else len(order)))


def _timed_out(first: int, second: int, deadline_s: float) -> Call:
    return Call(first, second, None, ErrorCode.timeout.value,
                f"no verdict before the group's deadline (group_deadline_s = {deadline_s:g})")


async def _ask_all(orders: list[tuple[int, int]], ask: Ask, deadline: float, deadline_s: float) -> tuple[list[Call], bool]:
    """Every order asked at once; what has not answered by `deadline` is cancelled (timeout)."""
    tasks = [asyncio.ensure_future(ask(first, second)) for first, second in orders]
    if not tasks:
        return [], False
    try:
        _, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))
    except BaseException:  # the group was abandoned (every member's cell cancelled)
        for task in tasks:
            task.cancel()
        raise
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
    calls = []
    for (first, second), task in zip(orders, tasks):
        if task in pending or task.cancelled():
            calls.append(_timed_out(first, second, deadline_s))
        elif task.exception() is not None:  # `ask` answers every fault as a failed Call; kept for safety
            calls.append(Call(first, second, None, ErrorCode.backend_error.value, repr(task.exception())))
        else:
            calls.append(task.result())
    return calls, bool(pending)


def _standing(n: int, outcomes: list[PairOutcome]) -> list[float]:
    members = aggregate("win_rate@1", n, outcomes)
    return [m.reward if m.reward is not None else 0.0 for m in members]


async def run_group(plan: GroupPlan, ask: Ask, rng: random.Random, deadline: float) -> GroupOutcome:
    """Compare a group per `plan`, asking through `ask`; ends by `deadline` (time.monotonic())."""
    started = time.monotonic()
    n, schedule = plan.n, plan.schedule
    per_pair = orders_of(plan.swap)
    calls: list[Call] = []
    outcomes: list[PairOutcome] = []
    met: set[frozenset[int]] = set()
    scheduled = 0
    timed_out = False
    rounds = schedule.rounds if schedule.adaptive else 1
    for round_no in range(rounds):
        if schedule.name == "reference":
            pairs = [(REFERENCE, i) for i in range(n)]  # the reference is shown first in its own order
        elif schedule.adaptive:
            pairs = swiss_pairs(n, _standing(n, outcomes), met)
        else:
            pairs = schedule.static_pairs(n)
        if not pairs:
            break
        orders = [(pair, order) for pair in pairs for order in presentation_orders(pair, plan.swap, rng)]
        scheduled += len(orders)
        answered, timed_out = await _ask_all([order for _, order in orders], ask, deadline, plan.deadline_s)
        by_pair: dict[tuple[int, int], list[Call]] = {pair: [] for pair in pairs}
        for (pair, _), call in zip(orders, answered):
            by_pair[pair].append(call)
        for (a, b), pair_calls in by_pair.items():
            outcomes.append(combine_pair(a, b, pair_calls, swap_disagreement=plan.swap_disagreement,
                                         one_order_failed=plan.one_order_failed))
            met.add(frozenset((a, b)))
        calls += answered
        if timed_out:
            # the rounds the deadline left unasked count as planned and missing
            scheduled += (rounds - round_no - 1) * (n // 2) * per_pair
            break
    members = aggregate(plan.aggregation, n, outcomes)
    valid = sum(1 for c in calls if c.valid)
    coverage = valid / scheduled if scheduled else 0.0
    failed_codes = Counter(c.error for c in calls if c.error is not None)
    codes_by_member: list[Counter[str]] = [Counter() for _ in range(n)]
    for c in calls:
        if c.error is not None:
            for i in (c.first, c.second):
                if i != REFERENCE:
                    codes_by_member[i][c.error] += 1
    status = Counter(o.status for o in outcomes)
    report = {
        "size": n,
        "schedule": schedule.describe(),
        "swap": plan.swap,
        "aggregation": plan.aggregation,
        "budget": plan.budget,
        "calls_planned": planned_calls(schedule, n, plan.swap),
        "calls": {"asked": scheduled, "made": len(calls), "valid": valid, "failed": dict(failed_codes)},
        "comparisons": {"done": status["done"], "masked": status["masked"], "failed": status["failed"]},
        "coverage": coverage,
        "min_coverage": plan.min_coverage,
        "swap_agreement": swap_agreement(outcomes),
        "position_bias": position_bias(calls, plan.swap),
        "transitivity": transitivity(outcomes),
        "deadline_s": plan.deadline_s,
        "timed_out": timed_out,
        "elapsed_ms": (time.monotonic() - started) * 1000.0,
    }
    return GroupOutcome(members, outcomes, calls, report, below_coverage=coverage < plan.min_coverage,
                        codes_by_member=codes_by_member)
