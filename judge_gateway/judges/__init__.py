"""Judge kinds behind one interface, and the registry that builds them from config."""

from __future__ import annotations

from ..backends import BackendPool
from ..config import GatewayConfig
from ..heads.options import HEAD_KINDS
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


def build_judges(cfg: GatewayConfig, pools: dict[str, BackendPool]) -> dict[str, Judge]:
    """One Judge per configured entry, in config order."""
    judges: dict[str, Judge] = {}
    for name, jcfg in cfg.judges.items():
        if jcfg.kind in HEAD_KINDS:  # local heads: a supervised worker process each
            from ..heads.judge import build_head_judge

            judges[name] = build_head_judge(name, jcfg)
            continue
        kind = VLM_JUDGE_KINDS.get(jcfg.kind)
        if kind is None:  # validate_config rejects unknown kinds first
            raise ValueError(f"judges.{name}.kind: unknown kind {jcfg.kind!r}")
        assert jcfg.backend is not None
        judges[name] = kind(name, jcfg, pools[jcfg.backend])
    return judges


__all__ = ["Judge", "JudgeFailure", "ScoreContext", "Verdict", "build_judges", "VLM_JUDGE_KINDS",
           "YesNoJudge", "RubricJudge", "FinalScoreJudge", "CriticJudge"]
