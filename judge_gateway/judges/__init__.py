"""Judge kinds behind one interface (the VLM kinds here; head kinds in `heads/`).
`registry.build_judges` builds them from config, by the kind table (`config.kinds`)."""

from __future__ import annotations

from .base import Judge, JudgeFailure, ScoreContext, Verdict
from .answer_probability import AnswerProbabilityJudge
from .checklist import ChecklistJudge
from .comparative import ComparativeJudge
from .critic import CriticJudge
from .generative import FinalScoreJudge, RubricJudge
from .multi_axis import MultiAxisJudge
from .yes_no import YesNoJudge

__all__ = ["Judge", "JudgeFailure", "ScoreContext", "Verdict",
           "YesNoJudge", "RubricJudge", "FinalScoreJudge", "CriticJudge", "ComparativeJudge",
           "MultiAxisJudge", "AnswerProbabilityJudge", "ChecklistJudge"]
