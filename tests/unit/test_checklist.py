"""The checklist judge: N yes/no probes on one medium, each in details, the reward the weighted mean
of P(good) over the answered probes; a probe fails alone unless configured otherwise; every
probe's request starts with the same media so vLLM reuses the prefix; VisionReward's score
(THUDM/VisionReward @ 511960d inference-video.py `score`) reported beside it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from judge_gateway.aggregation_profiles import load_aggregation_profile
from judge_gateway.cli import main
from judge_gateway.config import ConfigError, validate_config
from judge_gateway.media import ImageMedia, VideoMedia
from judge_gateway.prompts import load_template
from judge_gateway.schema import JudgeScore, SampleInput
from judge_gateway.tuning.cache import CachedScore, CacheKey, ScoreCache, judge_identity
from judge_gateway.tuning.prefs import load_preferences
from tests.conftest import png_bytes
from tests.support import peer_judges
from tests.support.scripted_chat import down, score_scripted

# P(yes) per question of image_checklist@1 (the rest of each top-20 is No and other tokens)
P_YES = {"Is the main subject prominent?": 0.9, "Is the image rich?": 0.2, "Is the image clear?": 0.7,
         "Does the image avoid being blurry?": 0.6, "Are the colors bright?": 0.5, "Are the colors not ugly?": 0.8,
         "Are the image details very exquisite?": 0.1, "Does the image avoid being hard to recognize?": 0.95,
         "Does the image avoid being fragmented?": 0.85, "Can the image evoke a very positive emotional response?": 0.3}


def answer(question: str):
    probe = question.removesuffix(" Please answer yes or no.")
    p = P_YES[probe]
    return [("Yes", p * 0.9), ("No", (1 - p) * 0.9), ("The", 0.05)]


def config(template: str = "image_checklist@1", **options) -> dict:
    return {"backends": {"q": {"model": "Qwen/Qwen3-VL-8B-Instruct", "base_urls": ["http://127.0.0.1:9/v1"]}},
            "judges": {"ck": {"kind": "checklist", "backend": "q", "template": template, "options": options}}}


def run(cfg: dict, script=answer, sample: SampleInput | None = None):
    return score_scripted(cfg, "ck", sample or SampleInput(prompt="a fox", image=ImageMedia.validate(png_bytes(2))),
                          script)


def test_each_probe_is_in_details_and_the_reward_is_their_weighted_mean():
    result, _ = run(config())
    probes = result.details["probes"]
    assert result.valid and len(probes) == 10 and result.details["answered"] == 10
    assert {p["question"]: p["p_positive"] for p in probes.values()} == pytest.approx(P_YES)
    assert result.reward == pytest.approx(sum(P_YES.values()) / 10)
    weights = {"clear": 3.0, "rich": 0.5}
    weighted, _ = run(config(aspect_weights=weights))
    w = {name: weights.get(name, 1.0) for name in probes}
    expected = sum(w[n] * probes[n]["p_positive"] for n in probes) / sum(w.values())
    assert weighted.reward == pytest.approx(expected) and weighted.details["weights"] == w


def test_every_probe_shares_the_media_prefix_and_asks_one_token():
    _, calls = run(config())
    assert len(calls) == 10
    firsts = [c["messages"][0]["content"][0] for c in calls]
    assert all(f == firsts[0] and f["type"] == "image_url" for f in firsts)  # one encode, the same bytes first
    assert all(len(c["messages"]) == 1 for c in calls)  # no system turn before the image
    assert {c["messages"][0]["content"][1]["text"] for c in calls} == {f"{q} Please answer yes or no." for q in P_YES}
    assert all(c["max_completion_tokens"] == 1 and c["temperature"] == 0.0 and c["logprobs"] for c in calls)
    assert len({c["affinity"] for c in calls}) == 1  # one replica for the whole checklist


def test_a_probe_weighted_zero_is_not_asked():
    result, calls = run(config(aspect_weights={"rich": 0.0, "clear": 1.0}))
    assert len(calls) == 9 and "rich" not in result.details["probes"]


def test_a_failed_probe_fails_alone_unless_configured():
    def script(question: str):
        if question.startswith("Is the image rich?"):
            return [("The", 0.8), ("A", 0.1)]  # no answer at all
        if question.startswith("Is the image clear?"):
            return down()
        return answer(question)
    result, _ = run(config(), script)
    assert result.valid and result.details["missing"] == ["rich", "clear"] and result.details["answered"] == 8
    assert result.details["probes"]["rich"]["error"]["code"] == "answer_missing"
    assert result.details["probes"]["clear"]["error"]["code"] == "backend_unavailable"
    kept = {q: p for q, p in P_YES.items() if q not in ("Is the image rich?", "Is the image clear?")}
    assert result.reward == pytest.approx(sum(kept.values()) / 8)  # not pulled towards 0 by the failures
    strict, _ = run(config(missing_policy="invalid"), script)
    assert not strict.valid and strict.error.code == "answer_missing" and "rich" in strict.error.message
    floor, _ = run(config(min_answered=9), script)
    assert not floor.valid and floor.error.code == "answer_missing" and "8 of 10" in floor.error.message


def test_every_probe_failing_the_same_way_is_that_error():
    result, _ = run(config(), lambda q: down())
    assert not result.valid and result.error.code == "backend_unavailable"
    assert len(result.details["probes"]) == 10


def test_visionreward_checklist_is_its_questions_and_weights_and_its_score_is_reported():
    template = load_template("visionreward_video@1")
    assert len(template.aspects) == 29 and template.media_slots == ("video",)
    first = template.aspects[0]
    assert first.question == 'Does the video meet all the requirements stated in the text "{prompt}"?'
    assert first.weight == pytest.approx(0.9543901856422174)
    # sure answers (P(yes) 0.999 or 0.001): the soft score is VisionReward's hard one, near enough
    answers = [0.999 if i % 3 else 0.001 for i in range(29)]

    def script(question: str):
        i = next(i for i, a in enumerate(template.aspects)
                 if a.question.replace("{prompt}", "a dog surfing") == question)
        return [("Yes", answers[i]), ("No", 1 - answers[i])]
    video = VideoMedia.from_array(np.zeros((8, 48, 64, 3), dtype=np.uint8), fps=8)
    result, calls = run(config("visionreward_video@1", top_logprobs=5), script,
                        SampleInput(prompt="a dog surfing", video=video))
    assert result.valid and len(calls) == 29
    assert calls[0]["messages"][0]["content"][1]["text"] == \
        'Does the video meet all the requirements stated in the text "a dog surfing"?'
    weights = [a.weight for a in template.aspects]
    soft = sum(w * (2 * p - 1) for w, p in zip(weights, answers)) / 29
    assert result.details["signed_score"] == pytest.approx(soft)
    hard = peer_judges.visionreward_score([p > 0.5 for p in answers], weights)
    assert result.details["signed_score"] == pytest.approx(hard, abs=0.002 * max(weights))
    # the reward maps the same weighted answers onto [0, 1]
    assert result.reward == pytest.approx(sum(w * p for w, p in zip(weights, answers)) / sum(weights))


def test_probe_weights_of_unknown_probes_are_refused_at_load():
    with pytest.raises(ConfigError, match="aspect_weights.sharp: not an aspect of image_checklist@1"):
        validate_config(config(aspect_weights={"sharp": 1.0}))


def test_probe_weights_are_tuned_from_preferences_into_a_profile_the_judge_loads(tmp_path, capsys):
    """`judge-gateway tune rubric` fits a checklist's probe weights (from cached per-probe P(yes),
    read as a checklist score's details carry them) like rubric aspects; the judge then loads the
    profile and names it."""
    probes = [a.name for a in load_template("image_checklist@1").aspects]
    true = np.array([3.0 if name == "clear" else 0.2 for name in probes])
    rng = np.random.default_rng(7)
    n = 240
    p = rng.random((n, 2, len(probes)))
    (tmp_path / "img").mkdir()
    lines = []
    for i in range(n):
        for side in "ab":
            (tmp_path / "img" / f"{i}{side}.png").write_bytes(png_bytes(10_000 + 2 * i + (side == "b"), (4, 4)))
        d = float(p[i, 0] @ true / true.sum() - p[i, 1] @ true / true.sum())
        label = "a" if rng.random() < 1 / (1 + math.exp(-12 * d)) else "b"
        lines.append(json.dumps({"id": f"p{i}", "prompt": f"prompt {i}", "a": f"img/{i}a.png", "b": f"img/{i}b.png",
                                 "label": label}))
    prefs = tmp_path / "prefs.jsonl"
    prefs.write_text("\n".join(lines) + "\n")
    (tmp_path / "config.toml").write_text(
        '[backends.q]\nmodel = "Qwen/Qwen3-VL-8B-Instruct"\nbase_urls = ["http://127.0.0.1:9/v1"]\n'
        '[judges.ck]\nkind = "checklist"\nbackend = "q"\ntemplate = "image_checklist@1"\n')
    cfg = validate_config(config())
    sha, model = judge_identity(cfg, "ck")
    cache = ScoreCache(tmp_path / "scores.jsonl")
    for i, pair in enumerate(load_preferences(prefs).pairs):
        for side, s in enumerate((pair.a, pair.b)):
            score = JudgeScore(judge="ck", reward=0.5, raw=0.5, valid=True,
                               details={"probe_scores": dict(zip(probes, p[i, side].tolist())), "missing": []})
            cache.put(CacheKey(s.key, "ck", sha, model), CachedScore.from_score(score))
    out = tmp_path / "profiles"
    assert main(["tune", "rubric", "--config", str(tmp_path / "config.toml"), "--judge", "ck", "--data", str(prefs),
                 "--cache", str(tmp_path / "scores.jsonl"), "--cache-only", "--out-dir", str(out),
                 "--no-progress", "--folds", "3"]) == 0
    capsys.readouterr()
    profile = load_aggregation_profile(out / "ck@1.json")
    assert max(profile.weights, key=profile.weights.get) == "clear"
    assert profile.body["created_from"]["template"]["id"] == "image_checklist"
    tuned, _ = run(config(aggregation_profile=str(out / "ck@1.json")))
    assert tuned.valid and tuned.details["aggregation_profile"]["name"] == "ck"
    assert tuned.details["weights"] == pytest.approx(profile.weights)
