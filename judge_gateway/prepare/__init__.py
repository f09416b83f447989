"""`judge-gateway prepare`: each judge's environment built, its weights fetched ahead of time, and a
check that it loads and scores a probe (run.py orchestrates; weights.py, probe.py)."""

from .probe import CheckResult, check_judge, check_judges, probe_sample, text_image
from .run import EnvNeed, Options, Row, environment_needs, format_table, plan_prepare, run_prepare
from .weights import WeightRef, WeightStatus, check_weight, judge_weights

__all__ = ["CheckResult", "EnvNeed", "Options", "Row", "WeightRef", "WeightStatus", "check_judge", "check_judges",
           "check_weight", "environment_needs", "format_table", "judge_weights", "plan_prepare", "probe_sample", "run_prepare",
           "text_image"]
