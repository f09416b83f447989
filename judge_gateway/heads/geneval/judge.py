"""The `gen_eval` judge kind: GenEval's rules (rules.py) over a detector head worker.

Per sample the metadata (`SampleInput.metadata`) says what the image must show:
    {"tag": "counting", "include": [{"class": "dog", "count": 2}], "exclude"?: [...]}
cosmos-rl's names are accepted too: `geneval_tags`, `geneval_includes`, `geneval_only_strict`.
The worker (model.py: mmdet Mask2Former + open_clip colours) returns per-class boxes,
scores and colours; the rules run here, on the gateway side, without torch.

raw = reward input = `score` (partial), `correct` or `strict` per `options.reward` (a sample's
`geneval_only_strict: true` picks `strict`); details: correct, strict, score, group (the six tags,
null where they do not apply), checks (per include, with the reason it failed), detections, and
`cosmos_rl`: {score, correct, strict} as cosmos-rl's reward service computes them
(rules.ServiceVerdict), which its legacy keys report.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ...json_body import parse_json
from ...judges.base import JudgeFailure, ScoreContext, Verdict
from ...schema import ErrorCode
from ..judge import HeadJudge
from ..supervisor import HeadError
from . import rules

if TYPE_CHECKING:
    from ...schema import SampleInput

_TAG_KEYS = ("tag", "geneval_tags", "geneval_tag")
_INCLUDE_KEYS = ("include", "includes", "geneval_includes")
_EXCLUDE_KEYS = ("exclude", "excludes", "geneval_excludes")
_STRICT_KEYS = ("geneval_only_strict", "only_strict")


def _first(md: dict[str, Any], keys: tuple[str, ...]) -> tuple[str | None, Any]:
    for k in keys:
        if k in md and md[k] is not None:
            return k, md[k]
    return None, None


def sample_metadata(metadata: Any) -> tuple[rules.Metadata, bool]:
    """(parsed GenEval metadata, only_strict) of one sample; JudgeFailure(bad_input) if unusable."""
    if not isinstance(metadata, dict) or not metadata:
        raise JudgeFailure(ErrorCode.bad_input,
                           "gen_eval needs the sample's metadata {tag, include: [{class, count, color?, "
                           "position?}]} (or cosmos-rl's geneval_tags / geneval_includes); it has none")
    tag_key, tag = _first(metadata, _TAG_KEYS)
    inc_key, include = _first(metadata, _INCLUDE_KEYS)
    _, exclude = _first(metadata, _EXCLUDE_KEYS)
    if tag_key is None:
        raise JudgeFailure(ErrorCode.bad_input, f"gen_eval metadata has no tag (one of {', '.join(_TAG_KEYS)})")
    if inc_key is None:
        raise JudgeFailure(ErrorCode.bad_input,
                           f"gen_eval metadata has no include list (one of {', '.join(_INCLUDE_KEYS)})")
    if isinstance(tag, list) and len(tag) == 1:  # a batch of one sent as a list
        tag = tag[0]
    if isinstance(include, str):  # GenEval's metadata files hold JSON; some clients send it as text
        try:
            include = parse_json(include)  # safe on deep nesting / huge ints (a ValueError)
        except ValueError:
            raise JudgeFailure(ErrorCode.bad_input, f"gen_eval metadata {inc_key}: not JSON: {include[:200]!r}") from None
    try:
        meta = rules.parse_metadata(tag, include, exclude)
    except rules.GenEvalInputError as exc:
        raise JudgeFailure(ErrorCode.bad_input, f"gen_eval metadata: {exc}") from None
    _, only_strict = _first(metadata, _STRICT_KEYS)
    if only_strict is not None and not isinstance(only_strict, bool):
        raise JudgeFailure(ErrorCode.bad_input, f"geneval_only_strict must be true or false, got {only_strict!r}")
    return meta, bool(only_strict)


def verdict_from_detections(meta: rules.Metadata, only_strict: bool, reward: str,
                            detections: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """The judge's number and details from one image's detections (all classes, raw scores)."""
    try:
        result = rules.evaluate(meta, detections)
        service = rules.service_verdict(meta, detections, only_strict)
        summary = rules.detections_summary(detections, result.threshold)
    except rules.GenEvalInputError as exc:
        raise JudgeFailure(ErrorCode.head_error, f"gen_eval detector output: {exc}") from None
    which = "strict" if only_strict else reward
    value = {"score": result.score, "correct": float(result.correct), "strict": float(result.strict)}[which]
    details = {
        "tag": meta.tag,
        "correct": float(result.correct),
        "strict": float(result.strict),
        "score": result.score,
        "reward_from": which,
        "group": result.group(value),
        "checks": result.checks,
        "reasons": result.reasons,
        "box_threshold": result.threshold,
        "detections": summary,
        "cosmos_rl": service.as_dict(),
    }
    if result.excludes:
        details["excludes"] = result.excludes
    return value, details


class GenEvalJudge(HeadJudge):
    async def evaluate(self, sample: "SampleInput", ctx: ScoreContext) -> Verdict:
        meta, only_strict = sample_metadata(sample.metadata)
        if sample.image is None:
            raise JudgeFailure(ErrorCode.bad_input, "gen_eval scores an image (the sample has none)")
        frames, facts = self._frames(sample)
        color_classes = sorted({inc.cls for inc in meta.includes if inc.color})
        request = json.dumps({"color_classes": color_classes, "threshold": rules.threshold_for(meta.tag)})
        try:
            outputs = await self.worker.infer(frames, request)
        except HeadError as exc:
            raise JudgeFailure(ErrorCode.head_error, str(exc), details=facts) from None
        detections = outputs[0].get("detections") if outputs else None
        if not isinstance(detections, dict):
            raise JudgeFailure(ErrorCode.head_error, "gen_eval worker returned no detections", details=facts)
        value, details = verdict_from_detections(meta, only_strict, self.options.reward, detections)
        return Verdict(raw=value, details={**facts, **details, **self._model_facts()})
