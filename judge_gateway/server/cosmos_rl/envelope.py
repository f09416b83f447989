"""cosmos-rl result envelopes (what a pull answers): legacy score lists from JudgeScores, with the
configured invalid-sample policy, and our per-sample `valid`, `errors`, `filled_by` beside them.

cosmos-rl's trainer (`cosmos_rl/reward/remote_calculator.py`) reads only `scores[key]`, never
`valid`, and never re-enqueues: whatever stands in an invalid sample's place is trained on. The
policy decides what that is (`cosmos_rl.on_invalid`, per reward `on_invalid`):

- `group_mean`: the mean of the valid values of that key among the request's samples with the
  same prompt (the trainer repeats a payload's prompt for each of its completions, so that is the
  GRPO group): the filled sample's advantage is zero. A group with no valid sample gets the
  request's valid mean, and a request with none valid gets `fill_value`: either way one constant
  over the whole group, which also gives zero advantage.
- `value`: `fill_value` (labels: `fill_label`).
- `sentinel`: -1.0, what cosmos-rl's reward service stores for a sample it could not score
  (labels: "Error").

Per-tag keys (`by_tag`, gen_eval_group) give an invalid sample the not-applicable value in every
tag under every policy: it was scored in none.

Before any of that, the peer's own number: a key with a `peer_source` reports what the judge
recorded there (the number cosmos-rl's reward service computes for this sample, e.g. its
two-logit softmax for cosmos_reason1) whenever it is present, even on a sample our judge marks
invalid (`valid` stays false, `filled_by` says `peer_value`): the legacy value equals the peer's
wherever the peer's code returns a number (docs/integrations/conformance.md).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from ...config import (
    SENTINEL_LABEL,
    SENTINEL_VALUE,
    CosmosReward,
    InvalidFill,
    LegacyKey,
)
from ...schema import ErrorCode, JudgeScore


@dataclass
class LegacyLists:
    scores: dict[str, Any]  # key -> list (or, for by_tag keys, tag -> list)
    valid: list[bool]
    errors: list[str | None]
    filled_by: list[str | None]  # None (valid), peer_value, group_mean, request_mean, fill_value, sentinel, not_applicable


def source_value(cell: JudgeScore, source: str) -> Any:
    """`reward`, `raw` or `details.a.b` of one JudgeScore (None when absent)."""
    if source == "reward":
        return cell.reward
    if source == "raw":
        return cell.raw
    value: Any = cell.details
    for part in source.split(".")[1:]:
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _peer_values(cell: JudgeScore, reward: CosmosReward) -> dict[str, float] | None:
    """Every key's number from its `peer_source`, when the judge recorded one for each; else None."""
    values: dict[str, float] = {}
    for key, spec in reward.keys.items():
        value = source_value(cell, spec.peer_source) if spec.peer_source and spec.by_tag is None else None
        if not _number(value) or not math.isfinite(value):
            return None
        values[key] = float(value) * spec.scale
    return values


def _read(cell: JudgeScore, reward: CosmosReward) -> tuple[dict[str, Any], str | None]:
    """The sample's value per key before labelling (tag, value for by_tag keys), or the problem."""
    peer = _peer_values(cell, reward)
    if peer is not None:
        return peer, None
    if not cell.valid:
        return {}, (f"{cell.error.code.value}: {cell.error.message}" if cell.error else "invalid")
    values: dict[str, Any] = {}
    for key, spec in reward.keys.items():
        value = source_value(cell, spec.source)
        if _number(value):
            value = float(value) * spec.scale if math.isfinite(value) else None
        if value is None:
            return {}, f"judge {cell.judge!r} gave no {spec.source} for legacy key {key!r}"
        if spec.by_tag is not None:
            tag = source_value(cell, spec.by_tag.tag)
            if tag not in spec.by_tag.tags:
                return {}, f"judge {cell.judge!r} gave tag {tag!r} for legacy key {key!r}, not one of {spec.by_tag.tags}"
            value = (tag, value)
        values[key] = value
    return values, None


def _label(spec: LegacyKey, value: Any) -> Any:
    return spec.labels[1] if float(value) >= spec.threshold else spec.labels[0]


def _mean(values: list[Any]) -> float | None:
    numbers = [v for v in values if _number(v)]
    return sum(numbers) / len(numbers) if numbers and len(numbers) == len(values) else None


def legacy_lists(reward: CosmosReward, fill: InvalidFill, cells: list[JudgeScore],
                 prompts: list[str]) -> LegacyLists:
    read = [_read(cell, reward) for cell in cells]
    valid = [cell.valid and problem is None for cell, (_, problem) in zip(cells, read)]
    filled_by: list[str | None] = [None] * len(cells)
    scores: dict[str, Any] = {}
    for key, spec in reward.keys.items():
        if spec.by_tag is not None:
            split = spec.by_tag
            scores[key] = {t: [split.not_applicable] * len(cells) for t in split.tags}
            for i, (values, problem) in enumerate(read):
                if problem is None:
                    tag, value = values[key]
                    scores[key][tag][i] = value
            continue
        column: list[Any] = []
        for i, (values, problem) in enumerate(read):
            if problem is None:
                value = values[key]
                column.append(_label(spec, value) if spec.labels is not None else value)
                continue
            value, filled_by[i] = _fill(fill, key, i, read, prompts)
            if spec.labels is not None:  # a label key: the label of the filled number, or the fill's label
                value = (SENTINEL_LABEL if filled_by[i] == "sentinel" else fill.label
                         if filled_by[i] == "fill_value" else _label(spec, value))
            column.append(value)
        scores[key] = column
    filled_by = [None if ok else ("peer_value" if problem is None else (f or "not_applicable"))
                 for ok, f, (_, problem) in zip(valid, filled_by, read)]
    errors = [None if ok else (problem or _problem(cell)) for ok, cell, (_, problem) in zip(valid, cells, read)]
    return LegacyLists(scores, valid, errors, filled_by)


def _problem(cell: JudgeScore) -> str:
    return f"{cell.error.code.value}: {cell.error.message}" if cell.error else "invalid"


def _fill(fill: InvalidFill, key: str, i: int, read: list[tuple[dict[str, Any], str | None]],
          prompts: list[str]) -> tuple[Any, str]:
    """(the number, or label, for invalid sample i's key; where it came from)."""
    if fill.policy == "sentinel":
        return SENTINEL_VALUE, "sentinel"
    if fill.policy == "group_mean":
        group = _mean([v[key] for j, (v, p) in enumerate(read) if p is None and prompts[j] == prompts[i]])
        if group is not None:
            return group, "group_mean"
        request = _mean([v[key] for v, p in read if p is None])
        if request is not None:
            return request, "request_mean"
    return fill.value, "fill_value"


def result_envelope(name: str, reward: CosmosReward, fill: InvalidFill, cells: list[JudgeScore],
                    prompts: list[str], info: dict[str, Any], duration: float, decoded_s: float,
                    notes: list[str] | None = None, ignored: list[str] | None = None) -> dict[str, Any]:
    """The result envelope of cosmos-rl's reward service (`scores`, `input_info`, `duration`,
    `type`), plus per-sample `valid`, `errors`, `filled_by` and JudgeScores, and, when there are any, `notes` (what was asked and not honoured) and `ignored_fields` (request
    fields nothing read).

    cosmos-rl's trainer reads only `scores`: an invalid sample's legacy values there are what
    the reward's invalid policy fills in (legacy_lists), and it trains on them; `valid`,
    `errors` and `filled_by` say which they are for anyone who looks.
    """
    lists = legacy_lists(reward, fill, cells, prompts)
    extra: dict[str, Any] = {}
    if notes:
        extra["notes"] = notes
    if ignored:
        extra["ignored_fields"] = ignored
    return {
        **extra,
        "scores": lists.scores,
        "input_info": info,
        "duration": f"{duration:.2f}",
        "decoded_duration": f"{decoded_s:.2f}",
        "type": name,
        # Ours, next to the legacy keys.
        "status": "done",
        "judge": reward.judge,
        "valid": lists.valid,
        "errors": lists.errors,
        "on_invalid": fill.policy,
        "filled_by": lists.filled_by,
        "fill_value": fill.value,
        # via JSON: pydantic writes inf/nan as null, which the store and the reply can carry
        "judge_scores": [json.loads(c.model_dump_json()) for c in cells],
    }


def failed_envelope(name: str, reward: CosmosReward, fill: InvalidFill, prompts: list[str], reason: str | None,
                    code: str) -> dict[str, Any]:
    """A failed request's pull under on_failed = fill: every sample of the stored entry (one per
    prompt) invalid with its `reason` and error `code`, its legacy values what the reward's
    on_invalid policy fills (one constant per request: zero advantage)."""
    message = f"the request failed: {reason}"
    cell = JudgeScore.failure(reward.judge, ErrorCode(code), message)
    lists = legacy_lists(reward, fill, [cell] * len(prompts), prompts)
    return {
        "scores": lists.scores, "input_info": {}, "duration": "0.00", "decoded_duration": "0.00",
        "type": name, "status": "failed", "reason": reason,
        "message": f"{message}; every sample is invalid, its legacy values filled by on_invalid = {fill.policy}",
        "judge": reward.judge,
        "valid": lists.valid, "errors": lists.errors, "on_invalid": fill.policy,
        "filled_by": lists.filled_by, "fill_value": fill.value, "judge_scores": [],
    }
