"""Tuning from human preferences: preference data, a score cache, aggregation fitting with
cross-validation, versioned aggregation profiles, and template-version comparison.

Import the submodules directly (`tuning.fit` needs numpy; `tuning.profile` does not and is what
the config loader uses).
"""

from __future__ import annotations

__all__ = ["cache", "collect", "commands", "compare", "features", "fit", "prefs", "profile", "report", "run"]
