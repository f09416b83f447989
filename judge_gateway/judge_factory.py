"""Builds the configured judges: each kind's judge class, as the kind table names it
(`config.kinds`); a VLM kind's judge gets its backend pool, a head kind's judge starts its worker.

The lookup sits here, above `judges/` and `heads/`, so that neither package imports the other
back: `heads/judge.py` subclasses `judges.base.Judge`, and the GenEval / VideoAlign judges
subclass `heads.judge.HeadJudge`. A judge class is imported only when a judge of its kind is
configured: a gateway without head judges never loads the head side (numpy, workers).
"""

from __future__ import annotations

from .backends import BackendPool
from .config import GatewayConfig, JudgeConfig
from .config.kinds import import_named
from .judges import Judge


def judge_class(cfg: JudgeConfig) -> type[Judge]:
    cls = import_named(cfg.kind_spec.judge)
    assert issubclass(cls, Judge), cls
    return cls


def build_judge(name: str, cfg: JudgeConfig, pools: dict[str, BackendPool]) -> Judge:
    cls = judge_class(cfg)
    if cfg.kind_spec.runs_on == "head":  # local heads: a supervised worker process each
        return cls(name, cfg)  # type: ignore[call-arg]
    assert cfg.backend is not None  # validate_config requires a known backend
    return cls(name, cfg, pools[cfg.backend])  # type: ignore[call-arg]


def build_judges(cfg: GatewayConfig, pools: dict[str, BackendPool]) -> dict[str, Judge]:
    """One Judge per configured entry, in config order."""
    return {name: build_judge(name, jcfg, pools) for name, jcfg in cfg.judges.items()}
