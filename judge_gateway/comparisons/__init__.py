"""Comparative judging's arithmetic, free of I/O: which pairs of a group are compared (schedules),
how the two orders of a pair become one outcome (outcomes), how outcomes become a reward per
sample (aggregate: named, versioned choices), and what is reported on every group (report).

The judge that asks a VLM and runs a group's comparisons is `judges/comparative.py`; this package
is what it computes with, and what config load checks a budget with (`planned_calls`).
"""

from .aggregate import AGGREGATIONS, MemberScore, aggregate
from .outcomes import REFERENCE, Call, PairOutcome, combine_pair
from .report import position_bias, swap_agreement, transitivity
from .schedules import SCHEDULES, SWAP_MODES, Schedule, orders_of, planned_calls, swiss_pairs

__all__ = [
    "AGGREGATIONS",
    "REFERENCE",
    "SCHEDULES",
    "SWAP_MODES",
    "Call",
    "MemberScore",
    "PairOutcome",
    "Schedule",
    "aggregate",
    "combine_pair",
    "orders_of",
    "planned_calls",
    "position_bias",
    "swap_agreement",
    "swiss_pairs",
    "transitivity",
]
