"""Tuning from human preferences: synthetic preference sets with known aspect/judge weights.

The sets are built here: tiny distinct PNGs, per-sample aspect scores drawn at random, labels
drawn from a Bradley-Terry model of the true weights (with label noise and ties). Scores go into
a cache file; the config's backend is a dead port, so any attempt to score would fail.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from judge_gateway.aggregation_profiles import (
    AggregationProfileError,
    load_aggregation_profile,
)
from judge_gateway.cli import main
from judge_gateway.config import ConfigError, validate_config
from judge_gateway.tuning.cache import CachedScore, CacheKey, ScoreCache, judge_identity
from judge_gateway.tuning.fit import (
    Aggregation,
    PairSet,
    best_tie_threshold,
    pair_accuracy,
)
from judge_gateway.tuning.prefs import PreferenceDataError, load_preferences
from tests.conftest import png_bytes

ASPECTS = ("Text Faithfulness", "Physical and Visual Quality", "Text Rendering")
TRUE_WEIGHTS = np.array([0.6, 0.3, 0.1])
DEAD = "http://127.0.0.1:9/v1"


def rubric_config(extra_options: dict | None = None) -> dict:
    return {
        "backends": {"rr": {"model": "RationalRewards-8B-T2I", "base_urls": [DEAD], "max_retries": 0,
                            "connect_timeout_s": 1}},
        "judges": {"rr": {"kind": "rubric", "backend": "rr", "template": "rational_rewards_t2i@1",
                          "options": extra_options or {}}},
    }


def write_toml(path: Path, doc: dict) -> Path:
    lines = []
    for section in ("backends", "judges"):
        for name, body in doc[section].items():
            lines.append(f'[{section}."{name}"]')
            for k, v in body.items():
                lines.append(f"{k} = {json.dumps(v)}" if not isinstance(v, dict) else
                             f"{k} = {{ {', '.join(f'{json.dumps(a)} = {json.dumps(b)}' for a, b in v.items())} }}")
    if "combine" in doc:
        lines.append("[combine]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in doc["combine"].items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def make_pairs(tmp: Path, n: int, label_fn, *, seed: int = 0) -> tuple[Path, list[tuple[str, str]]]:
    """n pairs of distinct tiny PNGs; label_fn(i) -> label. Returns the JSONL and the image paths."""
    img = tmp / "img"
    img.mkdir(exist_ok=True)
    lines, paths = [], []
    for i in range(n):
        a, b = img / f"{i}a.png", img / f"{i}b.png"
        a.write_bytes(png_bytes(seed * 100_000 + 2 * i, (4, 4)))
        b.write_bytes(png_bytes(seed * 100_000 + 2 * i + 1, (4, 4)))
        lines.append(json.dumps({"id": f"p{i}", "prompt": f"prompt {i}", "a": f"img/{a.name}",
                                 "b": {"image": f"img/{b.name}"}, "label": label_fn(i)}))
        paths.append((str(a), str(b)))
    prefs = tmp / "prefs.jsonl"
    prefs.write_text("\n".join(lines) + "\n")
    return prefs, paths


def bt_label(d: float, rng: np.random.Generator, beta: float = 10.0, tie_band: float = 0.02) -> str:
    """Bradley-Terry label with noise; near-equal samples are labelled ties."""
    if abs(d) < tie_band:
        return "tie"
    return "a" if rng.random() < 1 / (1 + math.exp(-beta * d)) else "b"


@pytest.fixture(scope="module")
def rubric_set(tmp_path_factory):
    """A synthetic rubric preference set and a complete score cache for judge `rr`."""
    tmp = tmp_path_factory.mktemp("rubric")
    rng = np.random.default_rng(42)
    n = 360
    scores = rng.integers(2, 9, size=(n, 2, 3)) / 2.0            # 1.0 .. 4.0 in 0.5 steps
    na = rng.random((n, 2)) < 0.3                                 # Text Rendering N/A
    norm = (scores - 1) / 3

    def agg(v: np.ndarray, na_flag: bool) -> float:
        w = TRUE_WEIGHTS.copy()
        if na_flag:
            w[2] = 0.0
        return float(v @ w / w.sum())

    labels = [bt_label(agg(norm[i, 0], na[i, 0]) - agg(norm[i, 1], na[i, 1]), rng) for i in range(n)]
    prefs, _ = make_pairs(tmp, n, lambda i: labels[i])
    cfg_doc = rubric_config()
    cfg = validate_config(cfg_doc)
    sha, model = judge_identity(cfg, "rr")
    data = load_preferences(prefs)
    cache_path = tmp / "scores.jsonl"
    cache = ScoreCache(cache_path)
    for i, pair in enumerate(data.pairs):
        for side, sample in enumerate((pair.a, pair.b)):
            aspects = {a: float(scores[i, side, j]) for j, a in enumerate(ASPECTS)}
            if na[i, side]:
                aspects["Text Rendering"] = None
            cache.put(CacheKey(sample.key, "rr", sha, model),
                      CachedScore(valid=True, reward=0.5, raw=2.5, aspects=aspects))
    # A few unusable scores: excluded and counted, never turned into numbers.
    bad = data.pairs[0].a.key
    cache.put(CacheKey(bad, "rr", sha, model), CachedScore(valid=False, error_code="parse_error",
                                                           error_message="no rubric"))
    config_path = write_toml(tmp / "config.toml", cfg_doc)
    return {"tmp": tmp, "prefs": prefs, "cache": cache_path, "config": config_path, "n": n}


def test_tune_rubric_recovers_weights_and_beats_default_from_cache_only(rubric_set, capsys):
    out_dir = rubric_set["tmp"] / "profiles"
    rc = main(["tune", "rubric", "--config", str(rubric_set["config"]), "--judge", "rr",
               "--data", str(rubric_set["prefs"]), "--cache", str(rubric_set["cache"]), "--cache-only",
               "--out-dir", str(out_dir), "--no-progress", "--folds", "5"])
    out = capsys.readouterr().out
    print(out)
    assert rc == 0
    assert "0 scored now" in out and "parse_error x1" in out
    profile_path = out_dir / "rr@1.json"
    profile = load_aggregation_profile(profile_path)
    w = profile.weights
    # The ranking of the true weights is recovered.
    assert w["Text Faithfulness"] > w["Physical and Visual Quality"] > w["Text Rendering"]
    cv = profile.body["cv"]["summary"]
    # On held-out folds, tuned beats the default equal weights (no ties and with ties).
    assert cv["tuned"]["acc_no_ties"] > cv["default"]["acc_no_ties"] + 0.02
    assert cv["tuned"]["acc_with_ties"] > cv["default"]["acc_with_ties"]
    assert len(profile.body["cv"]["folds"]) == 5
    assert profile.body["data"]["excluded"] == {"rr: parse_error": 1}
    assert profile.body["data"]["used"] == rubric_set["n"] - 1
    assert profile.body["created_from"]["template"]["id"] == "rational_rewards_t2i"
    assert profile.body["data"]["sha256"] == load_preferences(rubric_set["prefs"]).sha256
    assert profile.na_policy in ("skip", "value")
    png = out_dir / "rr@1.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # A second run is a new version; the first is never overwritten.
    before = profile_path.read_bytes()
    assert main(["tune", "rubric", "--config", str(rubric_set["config"]), "--judge", "rr",
                 "--data", str(rubric_set["prefs"]), "--cache", str(rubric_set["cache"]),
                 "--out-dir", str(out_dir), "--no-progress", "--folds", "3"]) == 0
    assert (out_dir / "rr@2.json").exists() and profile_path.read_bytes() == before


def test_rubric_judge_uses_profile_and_names_it(rubric_set, fake_backend, tmp_path):
    out_dir = tmp_path / "profiles"
    assert main(["tune", "rubric", "--config", str(rubric_set["config"]), "--judge", "rr",
                 "--data", str(rubric_set["prefs"]), "--cache", str(rubric_set["cache"]), "--cache-only",
                 "--out-dir", str(out_dir), "--no-progress", "--folds", "3"]) == 0
    profile = load_aggregation_profile(out_dir / "rr@1.json")
    from judge_gateway.gateway import Gateway

    doc = rubric_config({"aggregation_profile": str(out_dir / "rr@1.json"),
                         "aggregation_profile_sha256": profile.sha256})
    doc["backends"]["rr"] = {"model": "fake-rubric-ok", "base_urls": [fake_backend.base_url]}
    gw = Gateway(validate_config(doc))
    judge = gw.judges["rr"]
    raw, _used = judge.weighting.aggregate({"Text Faithfulness": 4.0, "Physical and Visual Quality": 1.0,
                                 "Text Rendering": 1.0}, [])
    w = profile.weights
    assert raw == pytest.approx((4 * w["Text Faithfulness"] + w["Physical and Visual Quality"]
                                 + w["Text Rendering"]) / sum(w.values()))

    import asyncio

    from judge_gateway.schema import RewardRequest

    async def go():
        try:
            return await gw.score(RewardRequest(samples=[{"prompt": "a bicycle", "image": png_bytes(1)}]))
        finally:
            await gw.aclose()

    score = asyncio.run(go()).results[0].scores["rr"]
    assert score.valid, score.error
    assert score.details["aggregation_profile"]["sha256"] == profile.sha256
    assert score.details["aggregation_profile"]["name"] == "rr"


def test_profile_reference_is_validated_at_load(rubric_set, tmp_path):
    out_dir = tmp_path / "p"
    assert main(["tune", "rubric", "--config", str(rubric_set["config"]), "--judge", "rr",
                 "--data", str(rubric_set["prefs"]), "--cache", str(rubric_set["cache"]), "--cache-only",
                 "--out-dir", str(out_dir), "--no-progress", "--folds", "2"]) == 0
    path = out_dir / "rr@1.json"
    with pytest.raises(ConfigError, match="sha256 is"):
        validate_config(rubric_config({"aggregation_profile": str(path), "aggregation_profile_sha256": "0" * 64}))
    with pytest.raises(ConfigError, match="not both"):
        validate_config(rubric_config({"aggregation_profile": str(path), "aspect_weights": {"Text Rendering": 1}}))
    with pytest.raises(ConfigError, match="cannot read"):
        validate_config(rubric_config({"aggregation_profile": str(out_dir / "rr@7.json")}))
    # A profile tuned for another template family is refused.
    doc = json.loads(path.read_text())
    doc["created_from"]["template"]["id"] = "rational_rewards_edit"
    doc["version"] = 9
    other = out_dir / "rr@9.json"
    other.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="tuned for template family"):
        validate_config(rubric_config({"aggregation_profile": str(other)}))
    # Relative paths resolve next to the config file.
    cfg_path = write_toml(out_dir / "c.toml", rubric_config({"aggregation_profile": "rr@1.json"}))
    from judge_gateway.config import load_config

    assert load_config(cfg_path).judges["rr"].options.aggregation_profile == str(path.resolve())
    with pytest.raises(AggregationProfileError, match="named <name>@<version>.json"):
        load_aggregation_profile(out_dir / "c.toml")


def test_cache_only_refuses_missing_cells(rubric_set, tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    rc = main(["tune", "rubric", "--config", str(rubric_set["config"]), "--judge", "rr",
               "--data", str(rubric_set["prefs"]), "--cache", str(empty), "--cache-only", "--no-progress"])
    assert rc == 2
    assert "lacks 720 of 720" in capsys.readouterr().err


def test_tune_weights_recovers_judge_mix(tmp_path, capsys):
    """Three yes/no judges' cached rewards; humans follow 0.7 * good + 0.3 * mid, not `noise`."""
    rng = np.random.default_rng(3)
    n = 300
    r = rng.random((n, 2, 3))
    truth = r[:, :, 0] * 0.7 + r[:, :, 1] * 0.3
    labels = [bt_label(truth[i, 0] - truth[i, 1], rng, beta=12) for i in range(n)]
    prefs, _ = make_pairs(tmp_path, n, lambda i: labels[i], seed=1)
    names = ["good", "mid", "noise"]
    doc = {"backends": {"b": {"model": "m", "base_urls": [DEAD]}},
           "judges": {j: {"kind": "yes_no", "backend": "b", "template": "image_quality@1"} for j in names},
           "combine": {"on_invalid": "skip"}}
    cfg = validate_config(doc)
    data = load_preferences(prefs)
    cache = ScoreCache(tmp_path / "c.jsonl")
    for i, pair in enumerate(data.pairs):
        for side, sample in enumerate((pair.a, pair.b)):
            for j, name in enumerate(names):
                sha, model = judge_identity(cfg, name)
                if name == "mid" and i % 25 == 0:  # a few invalid cells: skipped per combine.on_invalid
                    row = CachedScore(valid=False, error_code="answer_missing")
                else:
                    row = CachedScore(valid=True, reward=float(r[i, side, j]), raw=float(r[i, side, j]))
                cache.put(CacheKey(sample.key, name, sha, model), row)
    cfg_path = write_toml(tmp_path / "c.toml", doc)
    rc = main(["tune", "weights", "--config", str(cfg_path), "--judges", ",".join(names), "--data", str(prefs),
               "--cache", str(tmp_path / "c.jsonl"), "--cache-only", "--out-dir", str(tmp_path / "p"),
               "--no-progress"])
    out = capsys.readouterr().out
    print(out)
    assert rc == 0 and "[judges.good] weight =" in out
    prof = load_aggregation_profile(tmp_path / "p" / "judge_weights@1.json")
    assert prof.kind == "judge_weights" and prof.na_policy == "skip"
    assert prof.weights["good"] > prof.weights["mid"] > prof.weights["noise"]
    cv = prof.body["cv"]["summary"]
    assert cv["tuned"]["acc_no_ties"] > cv["default"]["acc_no_ties"]
    assert "mid: answer_missing" in out


def test_preference_loader_errors_name_file_and_line(tmp_path):
    (tmp_path / "a.png").write_bytes(png_bytes(1))
    (tmp_path / "b.png").write_bytes(png_bytes(2))
    good = '{"prompt": "x", "a": "a.png", "b": "b.png", "label": "a"}'
    cases = {
        "{not json": "not JSON",
        '{"prompt": "x", "a": "a.png", "b": "b.png", "label": "A"}': "label must be one of",
        '{"prompt": "x", "a": "a.png", "b": "nope.png", "label": "a"}': "does not exist",
        '{"prompt": "x", "a": "a.png", "label": "a"}': "missing sample `b`",
        '{"prompt": "x", "a": "a.png", "b": "b.png", "winner": "a"}': "unknown key",
        '{"prompt": "x", "a": {"image": "a.png", "video": "b.png"}, "b": "b.png"}': "exactly one of",
        '{"prompt": "x", "a": "a.txt", "b": "b.png"}': "does not exist",
    }
    for bad, reason in cases.items():
        path = tmp_path / "p.jsonl"
        path.write_text(good + "\n\n" + bad + "\n")
        with pytest.raises(PreferenceDataError, match=reason) as err:
            load_preferences(path)
        assert str(err.value).startswith(f"{path}:3:")
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "u", "prompt": "x", "a": "a.png", "b": "b.png"}\n')
    assert load_preferences(path).pairs[0].label is None
    with pytest.raises(PreferenceDataError, match=r"p.jsonl:1: no `label`"):
        load_preferences(path, require_labels=True)
    # The content key follows the bytes, not the path.
    k1 = load_preferences(path).pairs[0].a.key
    (tmp_path / "a.png").write_bytes(png_bytes(3))
    assert load_preferences(path).pairs[0].a.key != k1


def test_cache_keys_and_transient_failures(tmp_path):
    path = tmp_path / "c.jsonl"
    cache = ScoreCache(path)
    key = CacheKey("s", "j", "t", "m")
    cache.put(key, CachedScore(valid=False, error_code="timeout"))
    assert cache.get(key) is None and not path.exists()  # transient: retried next time
    cache.put(key, CachedScore(valid=True, reward=0.7))
    cache.put(CacheKey("s", "j", "t2", "m"), CachedScore(valid=True, reward=0.1))
    again = ScoreCache(path)
    assert again.get(key).reward == 0.7 and again.get(CacheKey("s", "j", "t2", "m")).reward == 0.1
    assert again.get(CacheKey("s", "j", "t", "other-model")) is None
    path.write_text(path.read_text() + "{oops\n")
    with pytest.raises(ValueError, match=r"c.jsonl:3:"):
        ScoreCache(path)


def test_accuracy_with_and_without_ties():
    d = np.array([0.5, -0.2, 0.01, 0.0, np.nan])
    labels = ["a", "a", "tie", "b", "a"]
    acc = pair_accuracy(d, labels, tie_threshold=0.0)
    assert acc["excluded"] == 1 and acc["pairs_no_ties"] == 3
    assert acc["acc_no_ties"] == pytest.approx((1 + 0 + 0.5) / 3)
    t = best_tie_threshold(d, labels)
    assert 0.01 <= t < 0.2
    assert pair_accuracy(d, labels, t)["acc_with_ties"] == pytest.approx(2 / 4)
    agg = Aggregation(("x", "y"), (1.0, 1.0), "skip")
    s = agg.scores(np.array([[1.0, np.nan], [np.nan, np.nan], [0.0, 1.0]]))
    assert s[0] == 1.0 and np.isnan(s[1]) and s[2] == 0.5
    inv = Aggregation(("x", "y"), (1.0, 1.0), "invalidate").scores(np.array([[1.0, np.nan]]))
    assert np.isnan(inv[0])
    ps = PairSet(np.zeros((1, 2)), np.zeros((1, 2)), ["a"])
    assert len(ps) == 1


def test_a_head_judges_cache_identity_is_its_written_model_else_its_kind():
    """The cache key's model of a judge without a backend: `options.model` as the config wrote it,
    else the kind (the kind's default model is not filled in, so cache files written before the
    options were typed keep matching)."""
    cfg = validate_config({"judges": {"c": {"kind": "clip"}, "h": {"kind": "hpsv2"},
                                      "p": {"kind": "pickscore", "options": {"model": "my/pickscore"}}}})
    assert [judge_identity(cfg, n) for n in ("c", "h", "p")] == [("-", "clip"), ("-", "hpsv2"), ("-", "my/pickscore")]
