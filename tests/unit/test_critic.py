"""The critic judge kind: a JSON reply in the template's schema, or parse_error; timed violations
checked against the clip the judge saw; the reward read from the configured field."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from judge_gateway.config import ConfigError, validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.parsers import ParseError
from judge_gateway.parsers.critique import parse_critique, split_reasoning
from judge_gateway.prompts import load_template, verify_lock
from judge_gateway.schema import RewardRequest
from tests.support.critiques import GOOD_CRITIQUE, GOOD_REASONING, critique, reply

TEMPLATE = load_template("cosmos_reason1_critic@1")
SCHEMA = TEMPLATE.json_schema
VIOLATIONS = "video_analysis.physical_accuracy.violations"


def parse(text: str, duration_s: float | None = 2.0):
    return parse_critique(text, SCHEMA, violations_field=VIOLATIONS, duration_s=duration_s)


def test_template_is_locked_and_declares_the_issue_fields():
    assert verify_lock() == []
    assert TEMPLATE.kind == "critic" and TEMPLATE.media_slots == ("video",)
    sections = SCHEMA["properties"]["video_analysis"]["properties"]
    assert set(sections) == {"physical_accuracy", "reasoning_chain", "content_quality"}
    assert set(sections["physical_accuracy"]["properties"]) == {"score", "violations", "explanation"}
    assert set(sections["reasoning_chain"]["properties"]) == {
        "logical_consistency", "causal_relationships", "temporal_coherence"}
    assert set(sections["content_quality"]["properties"]) == {
        "visual_coherence", "object_permanence", "scene_understanding"}


def test_conforming_reply_keeps_the_object_the_reasoning_and_timed_violations():
    result = parse(reply(GOOD_CRITIQUE, GOOD_REASONING), duration_s=2.0)
    assert result.obj == GOOD_CRITIQUE
    assert result.reasoning == GOOD_REASONING
    assert [v.as_dict() for v in result.violations] == [
        {"label": "gravity_inconsistency", "t_s": 0.5, "valid_time": True},
        {"label": "object_vanishes", "t_s": None, "valid_time": False},
    ]


def test_reasoning_is_split_off_and_never_read_for_numbers():
    # numbers in the reasoning must not leak into the critique
    text = "<think>score 0.1, at 99 s</think><answer>" + json.dumps(GOOD_CRITIQUE) + "</answer>"
    reasoning, body = split_reasoning(text)
    assert reasoning == "score 0.1, at 99 s" and json.loads(body) == GOOD_CRITIQUE
    assert parse(text).obj["video_analysis"]["physical_accuracy"]["score"] == 0.85


@pytest.mark.parametrize("broken, expected", [
    (critique(physical_accuracy__score=...), "missing required field 'score'"),
    (critique(reasoning_chain=...), "missing required field 'reasoning_chain'"),
    (critique(physical_accuracy__score="0.85"), "physical_accuracy.score: expected number, got string"),
    (critique(physical_accuracy__score=1.5), "1.5 is above the maximum 1"),
    (critique(physical_accuracy__violations="none"), "violations: expected array, got string"),
    (critique(physical_accuracy__violations=[{"label": "x", "t_s": "12s"}]), "t_s: expected number or null"),
    (critique(reasoning_chain__causal_relationships="very strong"), "'very strong' is not one of"),
    (critique(content_quality__extra=1), "unexpected field 'extra'"),
])
def test_a_reply_that_does_not_conform_is_a_parse_error(broken, expected):
    with pytest.raises(ParseError) as err:
        parse(reply(broken))
    assert err.value.code == "parse_error"
    assert expected in str(err.value)


@pytest.mark.parametrize("text", ["The video looks fine.", "{\"video_analysis\": ", "[1, 2]", "NaN",
                                  '{"video_analysis": {"physical_accuracy": {"score": NaN}}}'])
def test_a_reply_that_is_not_a_json_object_is_a_parse_error(text):
    with pytest.raises(ParseError) as err:
        parse(text)
    assert err.value.code == "parse_error"


def test_violation_timestamps_are_checked_against_the_clip_duration():
    obj = critique(physical_accuracy__violations=[
        {"label": "at_start", "t_s": 0.0}, {"label": "at_end", "t_s": 1.5},
        {"label": "past_end", "t_s": 1.5001}, {"label": "way_past", "t_s": 12.0}])
    flags = [(v.label, v.valid_time) for v in parse(reply(obj), duration_s=1.5).violations]
    assert flags == [("at_start", True), ("at_end", True), ("past_end", False), ("way_past", False)]
    # no known duration: no time can be vouched for
    assert [v.valid_time for v in parse(reply(obj), duration_s=None).violations] == [False] * 4


# --------------------------------------------------------------------------- the judge, on a fake backend


def frames_video(n: int = 8, fps: float = 8.0) -> dict:
    t = np.arange(n)[:, None, None, None]
    arr = ((np.zeros((n, 32, 32, 3), dtype=np.int64) + t * 20 + np.arange(32)[None, None, :, None] * 4) % 256)
    return {"array": {"shape": list(arr.shape), "dtype": "uint8",
                      "data": base64.b64encode(arr.astype(np.uint8).tobytes()).decode()},
            "fps": fps}


def critic_config(base_url: str, **options) -> dict:
    def backend(model: str) -> dict:
        return {"model": model, "base_urls": [base_url], "timeout_s": 10, "max_retries": 0}

    return {
        "backends": {"ok": backend("fake-critic-ok"), "bad": backend("fake-critic-nonconforming")},
        "judges": {
            "critic": {"kind": "critic", "backend": "ok", "template": "cosmos_reason1_critic@1",
                       "options": options},
            "critic_bad": {"kind": "critic", "backend": "bad", "template": "cosmos_reason1_critic@1"},
        },
    }


async def score(cfg: dict, judges: list[str], n_frames: int = 8, fps: float = 8.0):
    gw = Gateway(validate_config(cfg))
    try:
        request = RewardRequest(samples=[{"prompt": "a ball falls", "video": frames_video(n_frames, fps)}],
                                judges=judges)
        return (await gw.score(request)).results[0].scores
    finally:
        await gw.aclose()


async def test_critic_on_fake_backend_scores_and_fills_the_agreed_details(fake_backend):
    s = (await score(critic_config(fake_backend.base_url), ["critic"]))["critic"]
    assert s.valid and s.raw == pytest.approx(0.85) and s.reward == pytest.approx(0.85)
    d = s.details
    assert d["critique"] == GOOD_CRITIQUE
    assert d["reasoning"] == GOOD_REASONING
    assert d["band"] == "High"
    assert d["clip_duration_s"] == pytest.approx(1.0)  # 8 frames at 8 fps
    assert d["violations"] == [{"label": "gravity_inconsistency", "t_s": 0.5, "valid_time": True},
                               {"label": "object_vanishes", "t_s": None, "valid_time": False}]
    assert d["bad_violation_times"] == 0
    body = fake_backend.counters["bodies"][-1]
    assert body["structured_outputs"] == {"json": SCHEMA}  # the schema went to vLLM as structured outputs


async def test_a_nonconforming_reply_from_the_backend_is_parse_error(fake_backend):
    s = (await score(critic_config(fake_backend.base_url), ["critic_bad"]))["critic_bad"]
    assert not s.valid and s.reward is None
    assert s.error.code.value == "parse_error"
    assert "physical_accuracy.score: expected number, got string" in s.error.message
    assert "missing required field 'content_quality'" in s.error.message
    assert "band" not in s.details and "critique" not in s.details  # never shown as a critique
    assert s.details["rejected_critique"]["video_analysis"]["physical_accuracy"]["score"] == "high"


async def test_a_violation_past_the_clip_is_flagged_or_invalid_as_configured(fake_backend):
    # 8 frames at 32 fps: a 0.25 s clip, so the violation at 0.5 s lies past its end
    flagged = (await score(critic_config(fake_backend.base_url), ["critic"], fps=32.0))["critic"]
    assert flagged.valid and flagged.reward == pytest.approx(0.85)
    assert flagged.details["clip_duration_s"] == pytest.approx(0.25)
    assert flagged.details["violations"][0] == {"label": "gravity_inconsistency", "t_s": 0.5, "valid_time": False}
    assert flagged.details["bad_violation_times"] == 1
    strict = (await score(critic_config(fake_backend.base_url, on_bad_timestamp="invalid"),
                          ["critic"], fps=32.0))["critic"]
    assert not strict.valid and strict.error.code.value == "parse_error"
    assert "gravity_inconsistency@0.5s" in strict.error.message


async def test_reward_field_is_configurable(fake_backend):
    cfg = critic_config(fake_backend.base_url, reward_field="video_analysis.content_quality.object_permanence")
    s = (await score(cfg, ["critic"]))["critic"]
    assert s.valid and s.reward == pytest.approx(0.95)


async def test_structured_outputs_can_be_turned_off_and_the_reply_is_still_checked(fake_backend):
    s = (await score(critic_config(fake_backend.base_url, structured_outputs=False), ["critic"]))["critic"]
    assert s.valid
    assert "structured_outputs" not in fake_backend.counters["bodies"][-1]


@pytest.mark.parametrize("options, message", [
    ({"reward_field": "video_analysis.physical_accuracy.explanation"}, "is not a number field"),
    ({"reward_field": "video_analysis.nothing"}, "is not a number field"),
    ({"share_video_with": "nobody"}, "is not another configured judge"),
    ({"on_bad_timestamp": "ignore"}, "on_bad_timestamp"),
])
def test_critic_options_are_validated_at_load(options, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(critic_config("http://127.0.0.1:1/v1", **options))


def test_share_video_with_takes_the_other_judges_sampling():
    cfg = critic_config("http://127.0.0.1:1/v1", share_video_with="reward")
    cfg["backends"]["cosmos"] = {"model": "x", "base_urls": ["http://127.0.0.1:1/v1"]}
    cfg["judges"]["reward"] = {"kind": "yes_no", "backend": "cosmos", "template": "cosmos_reason1@1",
                               "video": {"max_frames": 16, "max_pixels": 12544}}
    loaded = validate_config(cfg)
    assert loaded.judges["critic"].video == loaded.judges["reward"].video
    assert loaded.judges["critic"].video.max_frames == 16
    cfg["judges"]["critic"]["video"] = {"max_frames": 8}
    with pytest.raises(ConfigError, match="not both"):
        validate_config(cfg)
