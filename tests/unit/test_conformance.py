"""The conformance table's formula rows that need no model (docs/integrations/conformance.md):
the peers' formulas (tests/support/peer_formulas.py, read from their source) against what the
trainer receives through our protocol code, on the same model outputs (logits, detections,
recognised text, reply text), to a relative 1e-5. The rows on real models are in
tests/integration/test_conformance_heads.py and test_conformance_vlm.py."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from judge_gateway.config import CosmosRLConfig, load_config
from judge_gateway.config.cosmos_rl_toml import UNIFIED_REWARD_PATTERN
from judge_gateway.gateway import Gateway
from judge_gateway.heads.geneval import rules
from judge_gateway.heads.geneval.judge import sample_metadata, verdict_from_detections
from judge_gateway.heads.ocr_text import extract_target_text, ocr_reward
from judge_gateway.heads.videoalign.config import normalize as videoalign_normalize
from judge_gateway.judges import ScoreContext
from judge_gateway.media import ImageMedia, MediaCache
from judge_gateway.parsers import ParseError, parse_yes_no
from judge_gateway.prompts import load_template
from judge_gateway.schema import ErrorCode, JudgeScore, SampleInput
from judge_gateway.server.cosmos_rl.envelope import legacy_lists
from tests.conftest import png_bytes
from tests.support import peer_formulas as peer
from tests.support import peer_source

ROOT = Path(__file__).resolve().parents[2]
REL = 1e-5


def _legacy(name: str, cells: list[JudgeScore], prompts: list[str] | None = None) -> dict[str, Any]:
    cfg = CosmosRLConfig()
    reward = cfg.rewards[name]
    out = legacy_lists(reward, cfg.fill_of(reward), cells, prompts or [""] * len(cells))
    assert out.valid == [True] * len(cells), out.errors
    return out.scores


# ---- cosmos_reason1: prediction, no_score, yes_logit, no_logit -------------------------------

# 20 tokens: vLLM's top-20 lists them all, so "Yes" and "No" are always there
VOCAB = ["Yes", "No", " yes", " no", "YES", "NO", "The", "I", "A", "It", "Video", "There", "In", "This",
         "Based", "After", "From", "My", "Not", "Maybe"]


def _top20(logits: np.ndarray, vocab: list[str]) -> tuple[list[dict[str, Any]], float]:
    log_z = float(np.log(np.exp(logits - logits.max()).sum()) + logits.max())
    top = sorted(({"token": t, "logprob": float(v - log_z)} for t, v in zip(vocab, logits)),
                 key=lambda e: -e["logprob"])[:20]
    return top, log_z


def _logit_rows(n: int = 40) -> list[np.ndarray]:
    rng = np.random.default_rng(19)
    rows = []
    for _ in range(n):
        logits = rng.normal(0.0, 2.0, len(VOCAB))
        logits[:2] += rng.normal(4.0, 3.0, 2)  # "Yes" / "No" ahead, as the reward model answers
        rows.append(logits)
    rows.append(np.array([5.0, 5.0] + [0.0] * (len(VOCAB) - 2)))  # a tie: cosmos-rl says "Good"
    return rows


def test_cosmos_reason1_keys_equal_the_originals_formula_on_the_same_logits():
    """cosmos-rl reads the raw logits of "Yes" and "No" (model/cosmos_reason1.py 216-232);
    vLLM gives log-probabilities: log_softmax(logits) = logits - log Z, the same Z for every token
    of the step. So yes_logit - no_logit, no_score (a softmax over the pair) and prediction are
    cosmos-rl's exactly; yes_logit and no_logit themselves are each less by log Z.
    configs/cosmos_rl.toml's judge must count the model's own "Yes"/"No" tokens: cosmos_reason1@1's
    default answer words, "yes" and "no", never match them (every sample would be answer_missing)."""
    judge = load_config(ROOT / "configs" / "cosmos_rl.toml").judges["cosmos_reason1"]
    assert judge.options.counting == "exact"
    template = load_template(judge.template)
    cells, expected = [], []
    for logits in _logit_rows():
        top, log_z = _top20(logits, VOCAB)
        r = parse_yes_no(top, positive=template.positive, yes_words=template.yes_words, no_words=template.no_words,
                         min_answer_mass=0.0, counting=judge.options.counting)
        cells.append(JudgeScore(judge="cosmos_reason1", reward=r.p_positive, raw=r.p_positive, valid=True,
                                details=r.details()))
        expected.append((peer.cosmos_reason1(float(logits[0]), float(logits[1])), float(logits[0]),
                         float(logits[1]), log_z))
    got = _legacy("cosmos_reason1", cells)
    for i, ((prediction, no_score), yes_logit, no_logit, log_z) in enumerate(expected):
        assert got["prediction"][i] == prediction
        assert got["no_score"][i] == pytest.approx(no_score, rel=REL)
        assert got["yes_logit"][i] - got["no_logit"][i] == pytest.approx(yes_logit - no_logit, rel=REL, abs=1e-9)
        assert got["yes_logit"][i] == pytest.approx(yes_logit - log_z, rel=REL)
        assert got["no_logit"][i] == pytest.approx(no_logit - log_z, rel=REL)


def test_cosmos_reason1_below_the_answer_floor_reports_the_services_softmax():
    """When "Yes" and "No" hold less than half of the first token's mass, configs/cosmos_rl.toml's
    judge (min_answer_mass 0.5) marks the sample invalid (answer_missing): that stays in `valid`,
    `errors` and the JudgeScore. cosmos-rl still reports softmax over the two logits and its label
    (model/cosmos_reason1.py 216-232), so the legacy keys do too (filled_by: peer_value)."""
    judge = load_config(ROOT / "configs" / "cosmos_rl.toml").judges["cosmos_reason1"]
    template = load_template(judge.template)
    rows = [np.array([1.0, 1.0] + [2.5] * (len(VOCAB) - 2)),  # a tie in a spread-out distribution: 0.50 "Good"
            np.array([1.5, 1.0] + [2.0] * (len(VOCAB) - 2))]  # "Yes" ahead: 0.38 "Bad"
    cells, want = [], []
    for logits in rows:
        top, log_z = _top20(logits, VOCAB)
        with pytest.raises(ParseError) as err:
            parse_yes_no(top, positive=template.positive, yes_words=template.yes_words, no_words=template.no_words,
                         min_answer_mass=judge.options.min_answer_mass, counting=judge.options.counting)
        assert err.value.code == "answer_missing" and err.value.details["answer_mass"] < 0.5
        cells.append(JudgeScore.failure("cosmos_reason1", ErrorCode.answer_missing, str(err.value),
                                        details=err.value.details))
        want.append((peer.cosmos_reason1(float(logits[0]), float(logits[1])), float(logits[0]) - log_z,
                     float(logits[1]) - log_z))
    cfg = CosmosRLConfig()
    reward = cfg.rewards["cosmos_reason1"]
    out = legacy_lists(reward, cfg.fill_of(reward), cells, ["p"] * len(cells))
    assert out.valid == [False, False] and out.filled_by == ["peer_value", "peer_value"]
    assert all(e.startswith("answer_missing") for e in out.errors)
    for i, ((prediction, no_score), yes_logit, no_logit) in enumerate(want):
        assert out.scores["prediction"][i] == prediction
        assert out.scores["no_score"][i] == pytest.approx(no_score, rel=REL)
        assert out.scores["yes_logit"][i] == pytest.approx(yes_logit, rel=REL)
        assert out.scores["no_logit"][i] == pytest.approx(no_logit, rel=REL)
    assert [round(v, 2) for v in out.scores["no_score"]] == [0.5, 0.38]
    assert out.scores["prediction"] == ["Good", "Bad"]


def test_cosmos_reason1_answer_outside_the_top_k_is_bounded_not_read():
    """Not reproducible through vLLM: an answer outside its top-20 has no logprob there. The
    cosmos-rl reads its logit; ours bounds its probability by the smallest listed one (which is at
    least its true probability), so our no_score is at most cosmos-rl's and `bounded_answer`
    says so."""
    template = load_template("cosmos_reason1@2")
    vocab = VOCAB + ["Clearly", "Absolutely"]
    logits = np.array([-6.0, 9.0] + [0.5] * (len(vocab) - 2))  # "Yes" last of 22: not listed
    top, _ = _top20(logits, vocab)
    assert "Yes" not in {e["token"] for e in top}
    r = parse_yes_no(top, positive="no", yes_words=template.yes_words, no_words=template.no_words,
                     min_answer_mass=0.0, counting="exact")
    _, no_score = peer.cosmos_reason1(-6.0, 9.0)
    assert r.bounded_answer == "yes" and r.p_positive <= no_score and r.p_positive > 0.999


# ---- dance_grpo: vq_reward, mq_reward, ta_reward, overall_reward ----------------------------


def test_dance_grpo_keys_equal_the_originals_formula_on_the_same_logits():
    rng = np.random.default_rng(5)
    stats = {"VQ_mean": 0.31, "VQ_std": 1.7, "MQ_mean": -0.4, "MQ_std": 0.9, "TA_mean": 1.2, "TA_std": 2.3}
    norm = {d: (stats[f"{d}_mean"], stats[f"{d}_std"]) for d in ("VQ", "MQ", "TA")}
    raws = [dict(zip(("VQ", "MQ", "TA"), map(float, rng.normal(0, 3, 3)))) for _ in range(10)]
    cells = []
    for raw in raws:
        s = videoalign_normalize(raw, norm)  # what the worker reports
        cells.append(JudgeScore(judge="videoalign", reward=s["Overall"], raw=s["Overall"], valid=True,
                                details={"vq": s["VQ"], "mq": s["MQ"], "ta": s["TA"]}))
    got = _legacy("dance_grpo", cells)
    for i, raw in enumerate(raws):
        want = peer.dance_grpo(raw, stats)
        for key, dim in (("vq_reward", "VQ"), ("mq_reward", "MQ"), ("ta_reward", "TA"), ("overall_reward", "Overall")):
            assert got[key][i] == pytest.approx(want[dim], rel=REL)


# ---- the heads' legacy keys from their raw numbers -------------------------------------------


@pytest.mark.parametrize(("name", "judge", "key", "scale"), [
    ("pickscore", "pickscore", "pickscore", 1 / 26),  # cosmos-rl divides the native number by 26
    ("hpsv2", "hpsv2", "hpsv2", 1.0),
    ("hpsv3", "hpsv3", "hpsv3", 1.0),
    ("image_reward", "image_reward", "image_reward", 1.0),
])
def test_head_keys_are_the_originals_number_of_the_heads_raw(name, judge, key, scale):
    """raw is each head's native number (PickScore: exp(logit_scale) x cosine); cosmos-rl
    reports PickScore / 26 and the others' native numbers. The models themselves are compared in
    tests/integration/test_conformance_heads.py and the heads' own modules."""
    raws = [21.3, 19.87, -2.5, 0.0]
    cells = [JudgeScore(judge=judge, reward=r / 26 if name == "pickscore" else r, raw=r, valid=True) for r in raws]
    assert _legacy(name, cells)[key] == [pytest.approx(r * scale, rel=REL) for r in raws]


# ---- ocr: ocr_reward ---------------------------------------------------------------------------


@pytest.mark.parametrize(("prompt", "lines"), [
    ('a sign that says "Hello World"', ["Hello", "World"]),
    ('a sign that says "Hello World"', ["Hallo Wrld"]),
    ('a sign that says "Hello World"', []),
    ('a sign that says "Hello World"', ["xyzxyzxyzxyzxyz"]),
    ("a 'wooden' sign that says \"Open Late\"", ["OPEN LATE"]),  # double quotes win, as split('"')
    ('a banner " Big Sale " on a wall', ["BIG", "SAIL"]),     # the target's blanks count in its length
    ('first "A" then "B"', ["b"]),
    ('a neon sign "24/7 Diner" at night', ["24/7 DINER open"]),  # substring: distance 0
])
def test_ocr_reward_equals_the_originals_formula_on_the_same_recognised_text(prompt, lines):
    """model/ocr.py 41-79: PaddleOCR keeps lines scored >= its drop_score (0.5), our head drops
    below options.min_confidence (0.5): the recognised lines are the same input."""
    target = extract_target_text(prompt)
    assert target is not None
    reward, _ = ocr_reward(target, lines)
    assert reward == pytest.approx(peer.ocr(prompt, [(line, 0.9) for line in lines]), rel=REL, abs=1e-12)


def _ocr_service(monkeypatch: pytest.MonkeyPatch):
    """cosmos-rl's own OcrScorer.__call__ (model/ocr.py 33-80 at 89f2e5b5) on given recognised lines:
    its `self.ocr.ocr` answers PaddleOCR's layout ([[box, (text, confidence)], ...]), and
    `Levenshtein.distance` is python-Levenshtein's unit-cost distance (the oracle's). Else the oracle."""
    import sys
    import types

    found = peer_source.peer_functions(peer_source.COSMOS_RL, f"{peer.COSMOS}/ocr.py", ["OcrScorer.__call__"],
                                       {"np": np, "List": list, "Union": Any,
                                        "logger": types.SimpleNamespace(info=lambda *a: None, error=lambda *a: None)})
    if found is None:
        return (lambda prompt, lines: peer.ocr(prompt, [(t, 0.9) for t in lines])), "oracle"
    monkeypatch.setitem(sys.modules, "Levenshtein", types.SimpleNamespace(distance=peer.levenshtein))

    def run(prompt: str, lines: list[str]) -> float:
        paddle = types.SimpleNamespace(ocr=lambda img: [[[None, (t, 0.9)] for t in lines]] if lines else [[]])
        scorer = types.SimpleNamespace(ocr=paddle)
        return found["OcrScorer.__call__"](scorer, [np.zeros((4, 4, 3), np.uint8)], [prompt])[0]
    return run, "peer"


@pytest.mark.parametrize(("prompt", "lines"), [
    ('a sign that says "Hello World', ["Hello World"]),     # one double quote: the rest of the prompt
    ('a sign that says "Hello World', ["Hello Wor"]),
    ('a sign that says "Hello\tWorld"', ["Hello World"]),  # only ASCII spaces are removed: 0.909
    ('a sign "  " on a wall', ["anything"]),                # spaces only: cosmos-rl's 1.0 (ours: not_applicable)
    ('a sign "" on a wall', []),
    ('a sign that says "Hello World"', ["hello", "world"]),
])
def test_ocr_legacy_value_is_the_services_own_reading(prompt, lines, monkeypatch):
    """The legacy ocr_reward is cosmos-rl's own number wherever its code returns one; a blank target
    stays not_applicable in `valid` and the JudgeScore."""
    from judge_gateway.heads.judge import OcrJudge
    from judge_gateway.judges.base import JudgeFailure

    service, which = _ocr_service(monkeypatch)
    print(f"cosmos-rl's OCR scorer: {which}")
    sample = SampleInput(prompt=prompt, image=ImageMedia.validate(base64.b64encode(png_bytes(3)).decode()))
    try:
        target = OcrJudge._target(None, sample)  # type: ignore[arg-type]
        values, details = OcrJudge._per_frame(None, [{"lines": lines}], target, {})  # type: ignore[arg-type]
        cell = JudgeScore(judge="ocr", reward=values[0], raw=values[0], valid=True, details=details)
    except JudgeFailure as exc:
        cell = JudgeScore.failure("ocr", exc.code, exc.message, details=exc.details)
    cfg = CosmosRLConfig()
    reward = cfg.rewards["ocr"]
    out = legacy_lists(reward, cfg.fill_of(reward), [cell], ["p"])
    assert out.scores["ocr_reward"] == [pytest.approx(service(prompt, lines), rel=REL, abs=1e-12)]
    assert out.valid == [prompt.split('"')[1].strip(" ") != ""]


# ---- gen_eval: gen_eval_score, gen_eval_reward, gen_eval_strict, gen_eval_group ------------

GENEVAL_CASES = [
    ("single_object", [{"class": "dog", "count": 1}]),
    ("two_object", [{"class": "dog", "count": 1}, {"class": "cat", "count": 1}]),
    ("counting", [{"class": "dog", "count": 2}]),
    ("counting", [{"class": "cat", "count": 3}]),
    ("colors", [{"class": "car", "count": 1, "color": "red"}]),
    ("position", [{"class": "dog", "count": 1}, {"class": "cat", "count": 1, "position": ["left of", 0]}]),
    ("position", [{"class": "car", "count": 1}, {"class": "dog", "count": 1, "position": ["below", 0]}]),
    ("color_attr", [{"class": "car", "count": 1, "color": "blue"}, {"class": "dog", "count": 1, "color": "brown"}]),
]


def _random_detections(rng: np.random.Generator) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """The detector's per-class rows [x1, y1, x2, y2, score] and a colour per row."""
    bboxes, colors = {}, {}
    for cls in ("dog", "cat", "car"):
        n = int(rng.integers(0, 5))
        x1, y1 = rng.uniform(0, 400, n), rng.uniform(0, 400, n)
        w, h = rng.uniform(10, 200, n), rng.uniform(10, 200, n)
        score = rng.choice([rng.uniform(0.0, 1.0), 0.95, 0.5], size=n)
        score = score + rng.uniform(0, 1e-3, n)  # no ties
        bboxes[cls] = np.stack([x1, y1, x1 + w, y1 + h, np.minimum(score, 0.999)], axis=1)
        colors[cls] = list(rng.choice(["red", "blue", "brown", "white"], size=n))
    return bboxes, colors


@pytest.mark.parametrize("only_strict", [False, True])
def test_gen_eval_keys_equal_the_originals_formula_on_the_same_detections(only_strict):
    rng = np.random.default_rng(2 + only_strict)
    cells, samples = [], []
    for round_ in range(60):
        tag, include = GENEVAL_CASES[round_ % len(GENEVAL_CASES)]
        bboxes, colors = _random_detections(rng)
        detections = {cls: {"boxes": rows[:, :4].tolist(), "scores": rows[:, 4].tolist(), "colors": colors[cls]}
                      for cls, rows in bboxes.items()}
        meta, strict_flag = sample_metadata({"geneval_tags": [tag], "geneval_includes": include,
                                             "geneval_only_strict": only_strict})
        value, details = verdict_from_detections(meta, strict_flag, "score", detections)
        cells.append(JudgeScore(judge="gen_eval", reward=value, raw=value, valid=True, details=details))
        samples.append({"tag": tag, "include": include, "bboxes": bboxes, "colors": colors})
    got = _legacy("gen_eval", cells)
    want = peer.gen_eval(samples, only_strict=only_strict)
    for key in ("gen_eval_reward", "gen_eval_strict"):
        assert got[key] == want[key], key
    assert got["gen_eval_score"] == [pytest.approx(v, rel=REL, abs=1e-12) for v in want["gen_eval_score"]]
    assert got["gen_eval_group"] == want["gen_eval_group"]
    assert any(v < 0 for v in want["gen_eval_score"])  # cosmos-rl's score goes negative: covered
    assert 0 < sum(want["gen_eval_reward"]) < len(samples) or only_strict


def test_gen_eval_position_failure_appends_zero_then_one_as_cosmos_rl():
    """evaluate_reward (gen_eval.py 305-327): a pair out of relation appends 0.0, and the loop's
    trailing 1.0 is appended too: [count 1.0, count 1.0, 0.0, 1.0] -> 0.75."""
    meta = rules.parse_metadata("position", [{"class": "dog", "count": 1},
                                             {"class": "cat", "count": 1, "position": ["left of", 0]}])
    detections = {"dog": {"boxes": [[0, 0, 50, 50]], "scores": [0.9]}, "cat": {"boxes": [[300, 0, 350, 50]], "scores": [0.9]}}
    v = rules.service_verdict(meta, detections)
    assert (v.score, v.correct, v.strict) == (0.75, False, False)


# ---- unified_reward ----------------------------------------------------------------------------

UNIFIED_REPLIES = [
    "The image matches the caption.\nFinal Score: 4",
    "Alignment is weak.\nFinal Score: 2.5",
    "Final Score: 3.75 (good)",
    "Final Score:\n5",
    "Final Score: 4.2/5",
    "I first thought Final Score: 2, but on reflection\nFinal Score: 4",  # the first counts, as re.search
]
UNIFIED_DIFFERENT = [  # ours is invalid; the service writes 0.0 (no match) or reads a digit of another number
    "No score given.",
    "Final Score: 0.5",
    "Final Score: 10",
]
UNIFIED_OURS_ONLY = [  # the service's pattern misses these (it writes 0.0); ours reads a number
    "**Final Score:** 4",
    "final score: 3",
]
UNIFIED_CASES = [  # our first label is not the service's: the service's own match counts
    "final score: 2\nFinal Score: 4",
    "FINAL SCORE: 1, then Final Score: 3.5",
]


async def _judge_reply(config: str | None, judge_name: str, reply: str, *, edit: bool = False) -> JudgeScore:
    gateway = Gateway(load_config(config))
    judge = gateway.judges[judge_name]

    async def chat(**_: Any) -> dict[str, Any]:
        return {"choices": [{"message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}]}

    judge.pool.chat = chat  # type: ignore[method-assign]
    image = ImageMedia.validate(base64.b64encode(png_bytes(3)).decode())
    sample = SampleInput(prompt="a red car", image=image,
                         condition_images=[ImageMedia.validate(base64.b64encode(png_bytes(4)).decode())] if edit else [])
    try:
        return await judge.score(sample, ScoreContext(media=MediaCache(), request_id="conformance"))
    finally:
        await gateway.aclose()


def _unified_extract():
    """cosmos-rl's own UnifiedReward._extract_scores (model/unified_reward.py 48-60 at 89f2e5b5),
    else its written-out oracle."""
    found = peer_source.peer_functions(peer_source.COSMOS_RL, f"{peer.COSMOS}/unified_reward.py",
                                       ["UnifiedReward._extract_scores"], {"re": __import__("re")})
    if found is not None:
        return (lambda reply: found["UnifiedReward._extract_scores"](None, [reply])[0] / 5.0), "peer"
    return peer.unified_reward, "oracle"


async def test_unified_reward_legacy_value_is_the_services_own_reading():
    """Wherever cosmos-rl's own code matches its pattern, the legacy value is its number (/ 5), also
    where our parse reads another label or calls the reply invalid. Where its pattern matches
    nothing the service writes 0.0, a constant for a reply it cannot read: there ours reads its
    number when it can (a row of the conformance page) and is invalid, with the reward's policy,
    when it cannot."""
    service, which = _unified_extract()
    config = str(ROOT / "configs" / "cosmos_rl.toml")
    cfg = CosmosRLConfig()
    reward = cfg.rewards["unified_reward"]
    print(f"cosmos-rl's reading: {which}")
    for reply in UNIFIED_REPLIES + UNIFIED_DIFFERENT + UNIFIED_OURS_ONLY + UNIFIED_CASES:
        cell = await _judge_reply(config, "unified_reward", reply)
        out = legacy_lists(reward, cfg.fill_of(reward), [cell], ["p"])
        theirs = service(reply)
        assert theirs == pytest.approx(peer.unified_reward(reply), rel=REL)  # the oracle reads as the service
        if re.search(UNIFIED_REWARD_PATTERN, reply):
            assert out.scores["unified_reward"] == [pytest.approx(theirs, rel=REL)], reply
            assert out.filled_by == [None if cell.valid else "peer_value"], reply
        elif cell.valid:  # the service fills 0.0; ours reads the number
            assert theirs == 0.0 and out.scores["unified_reward"] == [pytest.approx(cell.raw / 5, rel=REL)], reply
        else:  # neither reads a number: the reward's invalid policy, never the service's 0.0 as a score
            assert theirs == 0.0 and out.filled_by == ["fill_value"], reply
    assert {r: (await _judge_reply(config, "unified_reward", r)).valid for r in UNIFIED_OURS_ONLY} == \
        dict.fromkeys(UNIFIED_OURS_ONLY, True)


async def test_unified_reward_is_sent_as_the_service_sends_it():
    """model/unified_reward.py 41-46 and 62-85: a PNG as `data:image;base64,...`, then the question;
    temperature 0 and no max_tokens (the server's own limit)."""
    gateway = Gateway(load_config(str(ROOT / "configs" / "cosmos_rl.toml")))
    judge = gateway.judges["unified_reward"]
    sent: dict[str, Any] = {}

    async def chat(**kwargs: Any) -> dict[str, Any]:
        sent.update(kwargs)
        return {"choices": [{"message": {"role": "assistant", "content": "Final Score: 4"}, "finish_reason": "stop"}]}

    judge.pool.chat = chat  # type: ignore[method-assign]
    png = png_bytes(3)
    sample = SampleInput(prompt="a red car", image=ImageMedia.validate(base64.b64encode(png).decode()))
    try:
        await judge.score(sample, ScoreContext(media=MediaCache(), request_id="conformance"))
    finally:
        await gateway.aclose()
    assert "max_tokens" not in sent and "max_completion_tokens" not in sent and sent["temperature"] == 0.0
    (message,) = sent["messages"]
    image, text = message["content"]
    url = image["image_url"]["url"]
    assert url.startswith("data:image;base64,")
    from PIL import Image
    import io
    sent_pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB"))
    assert np.array_equal(sent_pixels, np.asarray(Image.open(io.BytesIO(png)).convert("RGB")))
    assert text == {"type": "text", "text": peer.UNIFIED_REWARD_QUESTION.format(prompt="a red car")}


# ---- Flow-Factory rational_rewards_t2i / rational_rewards_edit -------------------------------

T2I = """# User Request Analysis
A red car.
# Detailed Judgement
1. Text Faithfulness:
## Justification: The car is red.
## Score: {a}
2. Physical and Visual Quality:
## Justification: Fine.
## Score: {b}
3. Text Rendering:
## Justification: No text.
## Score: {c}
# Summary: Good.

# User Request Refinement:
## Refinement Comments: none
## Refined Request: a red car. Score: 1
"""
EDIT = """# User Request Analysis
Make it red.
# Detailed Judgement
1. Text Faithfulness:
## Justification: It is red.
## Score: {a}
2. Image Faithfulness:
## Justification: Kept.
## Score: {b}
3. Physical and Visual Quality:
## Justification: Fine.
## Score: {c}
4. Text Rendering:
## Justification: No text.
## Score: {d}
# Summary: Good.
"""
T2I_VALUES = [("3.5", "2.75", "N/A"), ("4", "4", "4"), ("1.0", "2.0", "3.0"), ("4.5", "0.5", "N/A"),
              ("3.25 (minor flaws)", "2", "N/A"), ("3.5/4", "3", "N/A")]
EDIT_VALUES = [("3.0", "3.5", "2.5", "N/A"), ("4", "1", "2", "3"), ("4.7", "3.2", "2.9", "N/A")]


@pytest.mark.parametrize("values", T2I_VALUES)
async def test_rational_rewards_t2i_equals_flow_factorys_formula_on_the_same_reply(values):
    reply = T2I.format(a=values[0], b=values[1], c=values[2])
    score = await _judge_reply(str(ROOT / "configs" / "flow_factory.toml"), "rational_rewards_t2i", reply)
    assert score.valid, score.error
    assert score.reward == pytest.approx(peer.rational_reward(reply, peer.RATIONAL_T2I_SECTIONS), rel=REL)


@pytest.mark.parametrize("values", EDIT_VALUES)
async def test_rational_rewards_edit_equals_flow_factorys_formula_on_the_same_reply(values):
    reply = EDIT.format(a=values[0], b=values[1], c=values[2], d=values[3])
    score = await _judge_reply(str(ROOT / "configs" / "flow_factory.toml"), "rational_rewards_edit", reply, edit=True)
    assert score.valid, score.error
    assert score.reward == pytest.approx(peer.rational_reward(reply, peer.RATIONAL_EDIT_SECTIONS), rel=REL)


async def test_rational_rewards_without_a_number_is_invalid_where_flow_factory_gives_zero():
    reply = T2I.format(a="N/A", b="N/A", c="N/A")
    assert peer.rational_reward(reply, peer.RATIONAL_T2I_SECTIONS) == 0.0
    score = await _judge_reply(str(ROOT / "configs" / "flow_factory.toml"), "rational_rewards_t2i", reply)
    assert not score.valid and score.error.code.value == "parse_error"


RATIONAL_LAYOUTS = [
    T2I.format(a="3.5", b="2.75", c="N/A"),
    # Flow-Factory's fallback layout: no numbered header lines, the titles with a colon
    "# Detailed Judgement\nText Faithfulness: good.\nScore: 3.5\nPhysical and Visual Quality: fine\nScore: 2\n"
    "Text Rendering: none\nScore: N/A\n# Summary: ok",
    # a bold score: Flow-Factory skips it (the next Score line of the block, else the aspect is absent)
    T2I.format(a="**3.5**", b="3", c="N/A"),
    # bold numbered headers: no line starts with "1.", so Flow-Factory cuts at the titles
    T2I.replace("1. Text Faithfulness:", "**1. Text Faithfulness:**").replace(
        "2. Physical and Visual Quality:", "**2. Physical and Visual Quality:**").replace(
        "3. Text Rendering:", "**3. Text Rendering:**").format(a="4", b="1.5", c="2"),
    T2I.format(a="N/A", b="N/A", c="N/A"),  # no number: Flow-Factory returns 0.0, ours is invalid
]


def _rational_service():
    """Flow-Factory's own parse_scores_from_detailed_judgement + aggregate_aspect_scores and the
    model's 0.0 for a reply they cannot read (rational_rewards_t2i.py 59-204, 414-425 at a0b2bc5);
    else the oracle."""
    import math
    import typing

    names = ["SUPPORTED_ASPECTS", "extract_numeric_score", "_extract_score_from_block",
             "parse_scores_from_detailed_judgement", "aggregate_aspect_scores"]
    found = peer_source.peer_functions(peer_source.FLOW_FACTORY, f"{peer.FLOW}/rational_rewards_t2i.py", names,
                                       {"re": re, "math": math, **{n: getattr(typing, n) for n in (
                                           "Any", "Dict", "List", "Optional", "Sequence", "Tuple", "Union")}})
    if found is None:
        return (lambda text: peer.rational_reward(text, peer.RATIONAL_T2I_SECTIONS)), "oracle"

    def reward(text: str) -> float:
        try:
            return found["aggregate_aspect_scores"](found["parse_scores_from_detailed_judgement"](text),
                                                   found["SUPPORTED_ASPECTS"])
        except (TypeError, ValueError):
            return 0.0
    return reward, "peer"


async def test_rational_rewards_t2i_profile_answers_flow_factorys_own_reading():
    """configs/flow_factory.toml's rational_rewards_t2i profile over HTTP: its `rewards` are
    Flow-Factory's own reading of the reply wherever that reads a number (also where our rubric
    parser reads the layout otherwise, or calls it invalid: `valid` says so); where Flow-Factory
    returns its 0.0 for a reply it cannot read, ours is invalid and the profile's policy fills."""
    from judge_gateway.server import create_app
    import httpx

    service, which = _rational_service()
    print(f"Flow-Factory's reading: {which}")
    gateway = Gateway(load_config(str(ROOT / "configs" / "flow_factory.toml")))
    judge = gateway.judges["rational_rewards_t2i"]
    replies = iter(RATIONAL_LAYOUTS)

    async def chat(**_: Any) -> dict[str, Any]:
        return {"choices": [{"message": {"role": "assistant", "content": next(replies)}, "finish_reason": "stop"}]}

    async def ready() -> tuple[bool, None]:
        return True, None

    judge.pool.chat = chat  # type: ignore[method-assign]
    judge.probe = ready  # type: ignore[method-assign]
    png = base64.b64encode(png_bytes(3)).decode()
    app = create_app(gateway)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
            for reply in RATIONAL_LAYOUTS:
                r = await client.post("/flow-factory/rational_rewards_t2i/compute", json={
                    "prompt": ["a red car"], "image": [png], "video": None, "condition_images": None,
                    "condition_videos": None})
                body = r.json()
                assert r.status_code == 200, body
                theirs = service(reply)
                assert theirs == pytest.approx(peer.rational_reward(reply, peer.RATIONAL_T2I_SECTIONS), rel=REL)
                if reply is RATIONAL_LAYOUTS[-1]:
                    assert theirs == 0.0 and body["valid"] == [False] and body["rewards"] == [0.0]  # fill_value
                else:
                    assert body["rewards"] == [pytest.approx(theirs, rel=REL)], reply
    finally:
        await gateway.aclose()


# ---- Flow-Factory PickScore_Rank ---------------------------------------------------------------


def test_pickscore_rank_equals_flow_factorys_argsort_rank():
    from judge_gateway.combine import group_transform

    rng = np.random.default_rng(8)
    for n in (1, 2, 5, 8, 16):
        raw = rng.normal(20, 1, n).tolist()
        rewards = [r / 26 for r in raw]  # the profile ranks the judge's reward: raw / 26, same order
        got = group_transform(rewards, ["g"] * n, "ordinal_rank")
        assert got == [pytest.approx(v, rel=REL, abs=1e-12) for v in peer.pickscore_rank(raw)]


# ---- what is sent: the peers' requests, byte for byte ------------------------------------------

IMG = {"type": "image_url", "image_url": {"url": "data:image/png;base64,IMG"}}
SRC = {"type": "image_url", "image_url": {"url": "data:image/png;base64,SRC"}}


def test_cosmos_reason1_at_2_sends_the_services_request():
    """model/cosmos_reason1.py 97-108: system = SYSTEM_PROMPT (the model card's, as @1 has it),
    user = [video, the request's prompt]: the caption, not the anomaly question @1 asks."""
    rendered = load_template("cosmos_reason1@2").render("a cat jumps", {"video": [IMG]})
    assert rendered == [{"role": "system", "content": load_template("cosmos_reason1@1").system},
                        {"role": "user", "content": [IMG, {"type": "text", "text": "a cat jumps"}]}]
    assert load_config(ROOT / "configs" / "cosmos_rl.toml").judges["cosmos_reason1"].template == "cosmos_reason1@2"


@pytest.mark.parametrize("version", ["2", "3"])
def test_unified_reward_at_2_and_3_send_the_services_question(version):
    """@3 is @2's question with no max_tokens (the service sends none); configs/cosmos_rl.toml pins @3."""
    rendered = load_template(f"unified_reward@{version}").render("a red car", {"image": [IMG]})
    assert rendered == [{"role": "user", "content": [IMG, {"type": "text",
                                                            "text": peer.UNIFIED_REWARD_QUESTION.format(prompt="a red car")}]}]
    assert not load_template("unified_reward@3").send_max_tokens  # none sent
    assert load_config(ROOT / "configs" / "cosmos_rl.toml").judges["unified_reward"].template == "unified_reward@3"


def test_rational_rewards_t2i_at_3_sends_flow_factorys_request():
    """rational_rewards_t2i.py 270-285: [system], user [text, image, suffix]; the suffix (216-267)
    is the README's text after the image with one more newline in front (three)."""
    three = load_template("rational_rewards_t2i@3").render("a red car", {"image": [IMG]})
    two = load_template("rational_rewards_t2i@2").render("a red car", {"image": [IMG]})
    assert three[0] == two[0] == {"role": "system", "content": peer.RATIONAL_T2I_SYSTEM_PROMPT}
    before, image, suffix = three[1]["content"]
    assert before == {"type": "text", "text": "User Instruction: a red car\nYou are provided with one image:\n"
                                              "1. Generated Image "}
    assert image == IMG and suffix["text"].startswith("\n\n\nTo do this, you must first assess the image")
    assert suffix["text"] == "\n" + two[1]["content"][2]["text"]
    assert suffix["text"].endswith("## Refined Request: [The improved, more specific user request for generation "
                                   "like a standard user instruction]")
    ff = load_config(ROOT / "configs" / "flow_factory.toml")
    assert ff.judges["rational_rewards_t2i"].template == "rational_rewards_t2i@3"
    assert ff.judges["rational_rewards_edit"].template == "rational_rewards_edit@2"


def test_rational_rewards_edit_at_2_sends_flow_factorys_request():
    """rational_rewards_edit.py 213-248: user [head, source, between, edited, guideline]."""
    rendered = load_template("rational_rewards_edit@2").render("make it red", {"image": [IMG], "condition_image": [SRC]})
    assert rendered[0] == {"role": "system", "content": peer.RATIONAL_EDIT_SYSTEM_PROMPT}
    head, source, between, edited, after = rendered[1]["content"]
    assert head["text"] == "User Instruction: make it red\nYou are provided with two images:\n1. Source Image "
    assert (source, between["text"], edited) == (SRC, "\n2. Edited Image ", IMG)
    assert after["text"].startswith("\n\nGive your analysis and judgement following guidelines in the system "
                                    "prompt. \n\nTo do this, you must first assess the image on four critical aspects")
