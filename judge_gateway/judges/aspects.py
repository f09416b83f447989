"""The weighted mean over named parts of a reply, shared by the rubric (aspects), multi-axis (axes)
and checklist (probes) kinds: weights from the template, the judge's options or a tuned
aggregation profile (never code), an N/A policy and a missing policy, each reported in details.
"""

from __future__ import annotations

from typing import Any

from ..config import AspectWeightOptions
from ..prompts import Template
from ..schema import ErrorCode
from .base import JudgeFailure


class AspectWeights:
    """What one judge's reward does with its parts' values (on the template's scale)."""

    def __init__(self, template: Template, options: AspectWeightOptions, *, missing_default: str = "invalid") -> None:
        self.aspects = [a.name for a in template.aspects]
        template_weights = {a.name: a.weight for a in template.aspects}
        self.weights: dict[str, float] = {**template_weights, **(options.aspect_weights or {})}
        self.na_policy: str = options.na_policy
        self.na_value = options.na_value
        # What a part absent from the reply does: the option, else the template's default.
        self.missing_policy: str = options.missing_policy or template.missing_policy or missing_default
        self.aggregation_profile = None
        if options.aggregation_profile:
            # A tuned aggregation profile (validated by the config loader) replaces weights and N/A policy.
            from ..aggregation_profiles import load_aggregation_profile

            self.aggregation_profile = load_aggregation_profile(
                options.aggregation_profile, sha256=options.aggregation_profile_sha256)
            self.weights = {a: self.aggregation_profile.weights.get(a, 0.0) for a in self.aspects}
            self.na_policy = self.aggregation_profile.na_policy
            self.na_value = self.aggregation_profile.na_value

    def aggregate(self, scores: dict[str, float | None], missing: list[str]) -> tuple[float, dict[str, float]]:
        """Weighted mean of the parts' values, per the configured policies; the weights used."""
        relevant_missing = [m for m in missing if self.weights.get(m, 0.0) > 0]
        if relevant_missing and self.missing_policy == "invalid":
            raise JudgeFailure(
                ErrorCode.parse_error,
                f"no score for aspect(s) {', '.join(relevant_missing)} in the reply",
                details={"aspects": scores, "missing": missing},
            )
        total = weight_sum = 0.0
        used: dict[str, float] = {}
        for aspect in self.aspects:
            weight = self.weights.get(aspect, 0.0)
            if weight <= 0 or aspect not in scores:
                continue
            value = scores[aspect]
            if value is None:  # N/A
                if self.na_policy == "skip":
                    continue
                assert self.na_value is not None
                value = self.na_value
            total += weight * value
            weight_sum += weight
            used[aspect] = weight
        if weight_sum <= 0:
            raise JudgeFailure(
                ErrorCode.parse_error,
                "no weighted aspect has a score (all N/A or missing)",
                details={"aspects": scores, "missing": missing},
            )
        return total / weight_sum, used

    def details(self, used: dict[str, float]) -> dict[str, Any]:
        out: dict[str, Any] = {"weights": used, "na_policy": self.na_policy, "missing_policy": self.missing_policy}
        if self.aggregation_profile is not None:
            out["aggregation_profile"] = self.aggregation_profile.details()
        return out
