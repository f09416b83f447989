"""Aggregation profiles live in `judge_gateway.profiles` (read at run time by config and the rubric
judge, which must not import `tuning/`); these names stay importable from here."""

from ..profiles import (  # noqa: F401
    FORMAT,
    FORMAT_VERSION,
    KINDS,
    AggregationProfile,
    ProfileError,
    load_profile,
    next_version,
    write_profile,
)
