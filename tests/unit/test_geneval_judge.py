"""The `gen_eval` judge kind through the gateway, its detector output injected at the worker
boundary (a stub in place of the worker process; no detector option exists for that), and its
config validation and cosmos-rl mapping."""

from __future__ import annotations

import json
from typing import Any

import pytest

from judge_gateway.config import ConfigError, validate_config
from judge_gateway.heads.geneval.judge import GenEvalJudge, sample_metadata
from judge_gateway.judges.base import JudgeFailure


OPTIONS = {"detector_checkpoint": "/models/mask2former.pth", "clip_pretrained": "openai"}


class StubWorker:
    """Stands in for HeadSupervisor: answers each infer with the next canned detections."""

    def __init__(self, detections: dict[str, Any]) -> None:
        self.detections = detections
        self.requests: list[dict[str, Any]] = []
        self.info = {"model": "stub", "pid": 0}

    def ensure_started(self) -> None:
        pass

    def readiness(self) -> tuple[bool, str | None]:
        return True, None

    async def infer(self, frames, prompt: str) -> list[dict[str, Any]]:
        self.requests.append(json.loads(prompt))
        return [{"detections": self.detections} for _ in range(len(frames))]

    async def aclose(self) -> None:
        pass


def box(cx, cy, s=10):
    return [cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2]


async def score(detections, metadata, options=None, prompt="a photo"):
    from judge_gateway.gateway import Gateway
    from judge_gateway.schema import RewardRequest
    from tests.conftest import png_bytes

    gw = Gateway(validate_config({"judges": {"ge": {"kind": "gen_eval", "options": {**OPTIONS, **(options or {})}}}}))
    judge = gw.judges["ge"]
    assert isinstance(judge, GenEvalJudge)
    stub = StubWorker(detections)
    judge.worker = stub  # type: ignore[assignment]
    try:
        response = await gw.score(RewardRequest(samples=[{"prompt": prompt, "image": png_bytes(1),
                                                          "metadata": metadata}]))
        return response.results[0].scores["ge"], stub
    finally:
        await gw.aclose()


def dogs(n, score_=0.95):
    return {"dog": {"boxes": [box(20 + 30 * i, 50) for i in range(n)], "scores": [score_] * n}}


async def test_counting_through_the_gateway():
    meta = {"tag": "counting", "include": [{"class": "dog", "count": 2}]}
    s, stub = await score(dogs(2), meta)
    assert s.valid and s.raw == 1.0 and s.reward == 1.0
    assert s.details["correct"] == 1.0 and s.details["strict"] == 1.0 and s.details["score"] == 1.0
    assert s.details["group"]["counting"] == 1.0 and s.details["group"]["colors"] is None
    assert s.details["detections"]["dog"]["count"] == 2
    assert stub.requests == [{"color_classes": [], "threshold": 0.9}]

    s, _ = await score(dogs(3), meta, {"reward": "correct"})
    assert s.valid and s.raw == 0.0 and s.details["correct"] == 0.0 and s.details["strict"] == 0.0
    assert s.details["reward_from"] == "correct" and 0 < s.details["score"] < 1


async def test_colors_failure_is_named_and_colour_classes_requested():
    meta = {"tag": "colors", "include": [{"class": "car", "count": 1, "color": "red"}]}
    det = {"car": {"boxes": [box(50, 50)], "scores": [0.8], "colors": ["blue"]}}
    s, stub = await score(det, meta, {"reward": "correct"})
    assert s.valid and s.raw == 0.0 and s.details["correct"] == 0.0
    check = s.details["checks"][0]
    assert check["passed"] is False and "include[0] (1 x red car)" in check["reason"]
    assert s.details["reasons"] == [check["reason"]]
    assert stub.requests == [{"color_classes": ["car"], "threshold": 0.3}]


async def test_cosmos_rl_metadata_names_and_only_strict():
    meta = {"geneval_tags": "counting", "geneval_includes": [{"class": "dog", "count": 2}],
            "geneval_only_strict": True}
    s, _ = await score(dogs(3), meta)  # reward option "score", but only_strict picks strict
    assert s.valid and s.raw == 0.0 and s.details["reward_from"] == "strict"
    assert s.details["group"] == {"single_object": None, "two_object": None, "counting": 0.0,
                                  "colors": None, "position": None, "color_attr": None}


@pytest.mark.parametrize("metadata, fragment", [
    ({}, "needs the sample's metadata"),
    ({"include": [{"class": "dog"}]}, "no tag"),
    ({"tag": "counting"}, "no include list"),
    ({"tag": "painting", "include": [{"class": "dog"}]}, "tag must be one of"),
    ({"tag": "colors", "include": [{"class": "car", "color": "teal"}]}, "include[0].color"),
    ({"tag": "counting", "include": "[{"}, "not JSON"),
    ({"tag": "counting", "include": [{"class": "dog"}], "geneval_only_strict": "yes"}, "geneval_only_strict"),
])
async def test_bad_metadata_is_bad_input(metadata, fragment):
    s, stub = await score(dogs(2), metadata)
    assert not s.valid and s.error.code.value == "bad_input" and fragment in s.error.message
    assert stub.requests == []  # refused before the detector


INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize("value", [INF, -INF, NAN], ids=["inf", "-inf", "nan"])
@pytest.mark.parametrize("metadata, fragment", [
    ({"tag": "counting", "include": [{"class": "dog", "count": "V"}]}, "include[0].count"),
    ({"tag": "position", "include": [{"class": "dog"}, {"class": "cat", "position": ["left of", "V"]}]},
     "include[1].position index"),
    ({"tag": "single_object", "include": [{"class": "dog"}], "exclude": [{"class": "cat", "count": "V"}]},
     "exclude[0].count"),
], ids=["count", "position", "exclude"])
async def test_non_finite_numbers_in_metadata_are_bad_input(metadata, fragment, value):
    """inf (JSON's 1e400 parses to it) and nan are refused as bad input, not a backend_error
    with a traceback in the log (int() of them raised before)."""
    filled = json.loads(json.dumps(metadata).replace('"V"', "999"))
    text = json.dumps(filled).replace("999", {INF: "Infinity", -INF: "-Infinity"}.get(value, "NaN"))
    s, stub = await score(dogs(2), json.loads(text))
    assert not s.valid and s.error.code.value == "bad_input" and fragment in s.error.message, s.error
    assert stub.requests == []
    as_text = {**filled, "include": json.dumps(filled["include"]).replace("999", "1e400")}
    if "1e400" in as_text["include"]:  # the JSON text form: 1e400 parses to inf
        s, _ = await score(dogs(2), as_text)
        assert s.error.code.value == "bad_input" and fragment in s.error.message


async def test_bad_detector_output_is_a_head_error():
    s, _ = await score({"dog": {"boxes": [box(1, 1)], "scores": []}}, {"tag": "single_object",
                                                                         "include": [{"class": "dog"}]})
    assert not s.valid and s.error.code.value == "head_error"


def test_metadata_as_json_text_and_single_element_tag_list():
    meta, strict = sample_metadata({"geneval_tags": ["position"], "geneval_includes": json.dumps(
        [{"class": "dog", "count": 1}, {"class": "cat", "count": 1, "position": ["left of", 0]}])})
    assert meta.tag == "position" and meta.includes[1].position == ("left of", 0) and not strict
    with pytest.raises(JudgeFailure):
        sample_metadata(None)


def test_gen_eval_config_validated_naming_the_key():
    ok = validate_config({"judges": {"ge": {"kind": "gen_eval", "options": OPTIONS}}})
    assert ok.judge_options("ge").reward == "score"
    cases = [
        ({"clip_pretrained": "openai"}, "judges.h.options.detector_checkpoint"),
        ({"detector_checkpoint": "x"}, "judges.h.options.clip_pretrained"),
        ({**OPTIONS, "reward": "mean"}, "judges.h.options.reward"),
        ({**OPTIONS, "detector": "synthetic"}, "judges.h.options.detector"),
    ]
    for options, key in cases:
        with pytest.raises(ConfigError) as err:
            validate_config({"judges": {"h": {"kind": "gen_eval", "options": options}}})
        assert key in str(err.value), (key, str(err.value))


async def test_cosmos_rl_gen_eval_keys_read_what_the_judge_emits():
    """cosmos-rl's keys hold the service's own numbers (details.cosmos_rl), whichever number
    `options.reward` makes raw: gen_eval_score = its partial score, gen_eval_reward = GenEval's
    correct over the includes (no exclude: 3 dogs for "2 dogs" is correct there), gen_eval_strict =
    exact counts; gen_eval_group = the six tags' lists, correct in the sample's tag, -10.0 in the
    others. Three dogs for "2 dogs": gen_eval_reward is the service's 1.0, not the exactly-N verdict
    (0.0) that details.correct keeps."""
    from judge_gateway.config import protocols as protocol_config
    from judge_gateway.server.cosmos_rl.envelope import legacy_lists

    reward = protocol_config.CosmosReward.model_validate(protocol_config.DEFAULT_COSMOS_REWARDS["gen_eval"])
    fill = protocol_config.InvalidFill(policy="group_mean", value=0.0, label="Invalid")
    assert reward.judge == "gen_eval"
    meta = {"tag": "counting", "include": [{"class": "dog", "count": 2}]}
    for option in ("score", "correct", "strict"):
        s, _ = await score(dogs(3), meta, {"reward": option})
        assert s.details["correct"] == 0.0  # GenEval's own verdict (exactly two) stays in details
        got = legacy_lists(reward, fill, [s], [""]).scores
        assert got["gen_eval_score"] == [0.5], (option, got)  # 1 - |2 - 3| / 2
        assert got["gen_eval_reward"] == [1.0] and got["gen_eval_strict"] == [0.0], (option, got)
        assert got["gen_eval_group"] == {"single_object": [-10.0], "two_object": [-10.0], "counting": [1.0],
                                         "colors": [-10.0], "position": [-10.0], "color_attr": [-10.0]}