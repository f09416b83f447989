"""Builds the configured judges: a VLM kind's judge on its backend pool, a head kind's judge with
its worker.

The factories sit here, above `judges/` and `heads/`, so that neither package imports the other
back: `heads/judge.py` subclasses `judges.base.Judge`, and the GenEval / VideoAlign judges
subclass `heads.judge.HeadJudge`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .backends import BackendPool
from .config import GatewayConfig, JudgeConfig
from .head_options import HEAD_KINDS
from .judges import VLM_JUDGE_KINDS, Judge

if TYPE_CHECKING:
    from .heads.judge import HeadJudge


def build_head_judge(name: str, cfg: JudgeConfig) -> HeadJudge:
    """The judge of a head kind: most use HeadJudge; gen_eval runs GenEval's rules on the gateway
    side, videoalign scores whole videos."""
    # Imported here: a gateway without head judges never loads the head side (numpy, workers).
    if cfg.kind == "gen_eval":
        from .heads.geneval.judge import GenEvalJudge

        return GenEvalJudge(name, cfg)
    if cfg.kind == "videoalign":
        from .heads.videoalign.judge import VideoAlignJudge

        return VideoAlignJudge(name, cfg)
    from .heads.judge import HeadJudge

    return HeadJudge(name, cfg)


def build_judges(cfg: GatewayConfig, pools: dict[str, BackendPool]) -> dict[str, Judge]:
    """One Judge per configured entry, in config order."""
    judges: dict[str, Judge] = {}
    for name, jcfg in cfg.judges.items():
        if jcfg.kind in HEAD_KINDS:  # local heads: a supervised worker process each
            judges[name] = build_head_judge(name, jcfg)
            continue
        kind = VLM_JUDGE_KINDS.get(jcfg.kind)
        if kind is None:  # validate_config rejects unknown kinds first
            raise ValueError(f"judges.{name}.kind: unknown kind {jcfg.kind!r}")
        assert jcfg.backend is not None
        judges[name] = kind(name, jcfg, pools[jcfg.backend])
    return judges
