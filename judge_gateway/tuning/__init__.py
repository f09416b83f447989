"""Tuning from human preferences: preference data, a score cache, aggregation fitting with
cross-validation, versioned aggregation profiles, and template-version comparison.

Import the submodules directly (`tuning.fit` needs numpy). The profile format itself is
`judge_gateway.aggregation_profiles` (the config loader reads it, so it lives below `tuning/`).
"""

from __future__ import annotations

__all__ = ["cache", "collect", "compare", "features", "fit", "prefs", "report", "run"]
