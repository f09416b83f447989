"""Judge kinds behind one interface (the VLM kinds here; head kinds in `heads/`).
`registry.build_judges` builds them from config."""

from __future__ import annotations

from .base import Judge, JudgeFailure, ScoreContext, Verdict
from .critic import CriticJudge
from .generative import FinalScoreJudge, RubricJudge
from .yes_no import YesNoJudge

VLM_JUDGE_KINDS: dict[str, type] = {
    "yes_no": YesNoJudge,
    "rubric": RubricJudge,
    "final_score": FinalScoreJudge,
    "critic": CriticJudge,
}


__all__ = ["Judge", "JudgeFailure", "ScoreContext", "Verdict", "VLM_JUDGE_KINDS",
           "YesNoJudge", "RubricJudge", "FinalScoreJudge", "CriticJudge"]
