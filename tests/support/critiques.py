"""Critic replies for tests: one that conforms to cosmos_reason1_critic@1's schema, and ways to
break it (shared by the fake OpenAI server and the unit tests)."""

from __future__ import annotations

import copy
import json
from typing import Any

GOOD_CRITIQUE: dict[str, Any] = {
    "video_analysis": {
        "physical_accuracy": {
            "score": 0.85,
            "violations": [{"label": "gravity_inconsistency", "t_s": 0.5},
                           {"label": "object_vanishes", "t_s": None}],
            "explanation": "The ball hovers for a moment before it falls.",
        },
        "reasoning_chain": {"logical_consistency": 0.92, "causal_relationships": "strong",
                            "temporal_coherence": "maintained"},
        "content_quality": {"visual_coherence": 0.88, "object_permanence": 0.95,
                            "scene_understanding": "excellent"},
    }
}
GOOD_REASONING = "The ball leaves the hand at 0.4 s and stays level until 0.6 s."


def critique(**changes: Any) -> dict[str, Any]:
    """GOOD_CRITIQUE with `section.field=value` changes (value ... deletes the field)."""
    obj = copy.deepcopy(GOOD_CRITIQUE)
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = obj["video_analysis"]
        for key in parents:
            node = node[key]
        if value is ...:
            del node[leaf]
        else:
            node[leaf] = value
    return obj


def reply(obj: Any, reasoning: str | None = None) -> str:
    """A reply text in Cosmos-Reason1's format: optional <think>, then the JSON answer."""
    body = json.dumps(obj)
    return f"<think>\n{reasoning}\n</think>\n\n<answer>\n{body}\n</answer>" if reasoning else body


# What the fake backend answers (see tests/support/fake_openai.py).
FAKE_CRITIC_OK = reply(GOOD_CRITIQUE, GOOD_REASONING)
# Parses as JSON, does not conform: the score is a word and content_quality is missing.
FAKE_CRITIC_NONCONFORMING = json.dumps(
    {"video_analysis": {"physical_accuracy": {"score": "high", "violations": [], "explanation": "fine"},
                        "reasoning_chain": GOOD_CRITIQUE["video_analysis"]["reasoning_chain"]}})
