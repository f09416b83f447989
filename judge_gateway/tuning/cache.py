"""A JSONL cache of judge scores keyed by (sample content, judge, template sha256, model).

Re-tuning reads the cache instead of re-querying the judges. Rows are appended; a later row for
the same key wins. Transient failures (timeouts, unreachable or failing backends) are never
cached: the next run retries them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config import GatewayConfig
from ..exceptions import InvalidInput
from ..schema import TRANSIENT_ERRORS, JudgeScore

TRANSIENT_CODES = frozenset(code.value for code in TRANSIENT_ERRORS)


class ScoreCacheError(InvalidInput):
    """An unreadable cache file; the message names `file:line`."""


@dataclass(frozen=True)
class CacheKey:
    sample: str
    judge: str
    template_sha256: str
    model: str


@dataclass
class CachedScore:
    """The parts of a JudgeScore that tuning needs."""

    valid: bool
    reward: float | None = None
    raw: float | None = None
    error_code: str | None = None
    error_message: str | None = None
    # Rubric, multi-axis and checklist judges: per-part scores (None = N/A) and parts absent from the reply, kept even
    # when the judge's own aggregation failed, because another aggregation may still use them.
    aspects: dict[str, float | None] | None = None
    missing: list[str] = field(default_factory=list)

    @classmethod
    def from_score(cls, score: JudgeScore) -> CachedScore:
        details = score.details or {}
        # rubric: aspect_scores; multi_axis: axes; checklist: probe_scores (P(good) per answered probe)
        aspects = next((details[k] for k in ("aspect_scores", "axes", "probe_scores", "aspects") if k in details), None)
        return cls(
            valid=score.valid, reward=score.reward, raw=score.raw,
            error_code=score.error.code.value if score.error else None,
            error_message=score.error.message if score.error else None,
            aspects=dict(aspects) if isinstance(aspects, dict) else None,
            missing=list(details.get("missing") or []),
        )

    @property
    def transient(self) -> bool:
        return not self.valid and self.error_code in TRANSIENT_CODES


def judge_identity(cfg: GatewayConfig, judge: str) -> tuple[str, str]:
    """(template sha256, model) of a configured judge, as the cache key uses them.

    VLM judges: the pinned template's sha256 and the backend's model. Other judges (local heads)
    have no template ("-") and name their model in `options.model`, else by their kind.
    """
    from ..prompts import load_template

    jcfg = cfg.judges[judge]
    sha = load_template(jcfg.template, jcfg.template_dirs).sha256 if jcfg.template else "-"
    if jcfg.backend and jcfg.backend in cfg.backends:
        model = cfg.backends[jcfg.backend].model
    else:
        # As written in the config (a kind's default model is not filled in): cache files keyed
        # before options were typed keep matching.
        opts = jcfg.options
        written = getattr(opts, "model", None) if "model" in opts.model_fields_set else None
        model = str(written or jcfg.kind)
    return sha, model


class ScoreCache:
    """Load once, look up in memory, append new rows to the file (if any)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._rows: dict[CacheKey, CachedScore] = {}
        if self.path is not None and self.path.exists():
            self._load(self.path)

    def __len__(self) -> int:
        return len(self._rows)

    def _load(self, path: Path) -> None:
        fields = {f for f in CachedScore.__dataclass_fields__}
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                obj = json.loads(line)
                key = CacheKey(**{k: obj.pop(k) for k in ("sample", "judge", "template_sha256", "model")})
                row = CachedScore(**{k: v for k, v in obj.items() if k in fields})
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                raise ScoreCacheError(f"{where}: not a score cache row ({type(err).__name__}: {err})") from None
            if row.valid and not isinstance(row.reward, (int, float)):
                raise ScoreCacheError(f"{where}: a valid row needs a numeric reward")
            self._rows[key] = row

    def get(self, key: CacheKey) -> CachedScore | None:
        return self._rows.get(key)

    def put(self, key: CacheKey, score: CachedScore) -> None:
        if score.transient:
            return
        self._rows[key] = score
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            row: dict[str, Any] = {**asdict(key), **asdict(score)}
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\n")
