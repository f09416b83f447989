"""`judge-gateway eval LABELS.jsonl --judge NAME` on labelled sets the tests build, scored by a
fake VLM whose P(Yes) is the image's gray level / 255 (so every score is chosen here)."""

from __future__ import annotations

import json

import numpy as np
from PIL import Image

from judge_gateway.cli import main as cli_main
from tests.support.cli_configs import vlm_config, write_config

# (chosen reward, label): 12 samples, not separable at 0.5
BINARY = [(0.05, 0), (0.15, 0), (0.25, 1), (0.35, 0), (0.45, 0), (0.55, 1), (0.65, 0), (0.75, 1), (0.85, 1),
          (0.95, 1), (0.62, 1), (0.30, 0)]


def _gray(path, p: float) -> float:
    """A flat gray PNG whose fake-judge reward is p (to the nearest gray level); the exact reward."""
    v = round(255 * p)
    Image.fromarray(np.full((24, 32, 3), v, dtype=np.uint8)).save(path)
    return v / 255


def _config(tmp_path, base_url: str, model: str = "fake-p-from-image", **sections: dict) -> str:
    return write_config(tmp_path, vlm_config(base_url, model, {"quality": "image_quality@1"}, **sections))


def _expected(rewards, labels, t):
    s, y = np.array(rewards), np.array(labels)
    pred = s >= t
    pos, neg = s[y == 1], s[y == 0]
    auc = sum((a > b) + 0.5 * (a == b) for a in pos for b in neg) / (len(pos) * len(neg))
    return {"acc": float((pred == y).mean()), "auc": auc, "tp": int((pred & (y == 1)).sum()),
            "fp": int((pred & (y == 0)).sum()), "fn": int((~pred & (y == 1)).sum()), "tn": int((~pred & (y == 0)).sum())}


def _binary_set(tmp_path):
    rewards, labels, lines = [], [], []
    for i, (p, label) in enumerate(BINARY):
        rewards.append(_gray(tmp_path / f"s{i}.png", p))
        labels.append(label)
        lines.append(json.dumps({"id": f"s{i}", "prompt": "a photo", "image": f"s{i}.png", "label": label}))
    (tmp_path / "labels.jsonl").write_text("\n".join(lines) + "\n")
    return rewards, labels


def test_eval_binary_labels_prints_figures_and_writes_the_calibration_png(tmp_path, fake_backend, capsys):
    rewards, labels = _binary_set(tmp_path)
    e = _expected(rewards, labels, 0.5)
    assert (e["tp"], e["fp"], e["fn"], e["tn"]) == (5, 1, 1, 5) and round(e["auc"], 4) == 0.8333
    rc = cli_main(["eval", str(tmp_path / "labels.jsonl"), "--judge", "quality", "--config",
                   _config(tmp_path, fake_backend.base_url), "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "judge quality: 12 labelled samples, 12 scored" in out
    assert f"accuracy at threshold 0.5: {e['acc']:.4f}" in out and "0.8333" in out
    assert f"ROC-AUC: {e['auc']:.4f}" in out
    assert "  label good          5         1" in out and "  label bad           1         5" in out
    png = tmp_path / "labels.calibration.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(png) as im:
        assert im.size[0] > 300 and im.size[1] > 300
    report = json.loads((tmp_path / "labels.calibration.json").read_text())
    by_low = {round(b["low"], 1): b for b in report["bins"]}
    # reward bin [0.6, 0.7): 0.62 (good) and 0.65 (bad)
    assert by_low[0.6]["n"] == 2 and by_low[0.6]["fraction_good"] == 0.5
    ece = sum(b["n"] / 12 * abs(b["mean_reward"] - b["fraction_good"]) for b in report["bins"])
    assert f"expected calibration error (10 bins): {ece:.4f}" in out


def test_eval_threshold_from_the_config_and_the_flag(tmp_path, fake_backend, capsys):
    rewards, labels = _binary_set(tmp_path)
    cfg = _config(tmp_path, fake_backend.base_url, eval={"thresholds": {"quality": 0.6}})
    assert cli_main(["eval", str(tmp_path / "labels.jsonl"), "--judge", "quality", "--config", cfg,
                     "--no-progress", "--plot", str(tmp_path / "cal.png")]) == 0
    out = capsys.readouterr().out
    e = _expected(rewards, labels, 0.6)
    assert e["acc"] == 0.75 and f"accuracy at threshold 0.6: {e['acc']:.4f}" in out
    assert (tmp_path / "cal.png").exists()
    cache = str(tmp_path / "cache.jsonl")
    assert cli_main(["eval", str(tmp_path / "labels.jsonl"), "--judge", "quality", "--config", cfg,
                     "--no-progress", "--cache", cache]) == 0
    capsys.readouterr()
    before = fake_backend.counters["requests"]
    assert cli_main(["eval", str(tmp_path / "labels.jsonl"), "--judge", "quality", "--config", cfg,
                     "--no-progress", "--threshold", "0.9", "--cache", cache]) == 0
    assert fake_backend.counters["requests"] == before  # every score came from the cache
    out = capsys.readouterr().out
    e = _expected(rewards, labels, 0.9)
    assert "scores: 12 from the cache, 0 scored now" in out
    assert f"accuracy at threshold 0.9: {e['acc']:.4f}" in out


def test_eval_pairwise_preferences(tmp_path, fake_backend, capsys):
    pairs = [(0.8, 0.2, "a"), (0.3, 0.7, "b"), (0.6, 0.4, "b"), (0.9, 0.1, "a"), (0.5, 0.52, "tie")]
    lines = []
    for i, (pa, pb, label) in enumerate(pairs):
        _gray(tmp_path / f"a{i}.png", pa)
        _gray(tmp_path / f"b{i}.png", pb)
        lines.append(json.dumps({"id": f"p{i}", "prompt": "x", "a": f"a{i}.png", "b": f"b{i}.png", "label": label}))
    (tmp_path / "pairs.jsonl").write_text("\n".join(lines) + "\n")
    assert cli_main(["eval", str(tmp_path / "pairs.jsonl"), "--judge", "quality", "--config",
                     _config(tmp_path, fake_backend.base_url), "--no-progress"]) == 0
    out = capsys.readouterr().out
    # 3 of the 4 untied pairs are ordered as labelled; the tie threshold |0.5 - 0.52| calls the tie.
    assert "pairwise accuracy without ties: 0.7500 (4 pairs)" in out
    assert "pairwise accuracy with ties: 0.8000 (5 pairs, tie threshold 0.0196" in out


def test_eval_refuses_bad_labels(tmp_path, fake_backend, capsys):
    _gray(tmp_path / "x.png", 0.5)
    (tmp_path / "l.jsonl").write_text(json.dumps({"image": "x.png", "label": "good"}) + "\n")
    cfg = _config(tmp_path, fake_backend.base_url)
    assert cli_main(["eval", str(tmp_path / "l.jsonl"), "--judge", "quality", "--config", cfg]) == 2
    assert "label must be 1/0 or true/false" in capsys.readouterr().err
    assert cli_main(["eval", str(tmp_path / "l.jsonl"), "--judge", "nope", "--config", cfg]) == 2
    assert "unknown judge 'nope'" in capsys.readouterr().err


def test_eval_pairwise_exits_1_when_no_pair_is_valid(tmp_path, fake_backend, capsys):
    lines = []
    for i in range(3):
        _gray(tmp_path / f"a{i}.png", 0.2 + 0.1 * i)
        _gray(tmp_path / f"b{i}.png", 0.7)
        lines.append(json.dumps({"id": f"p{i}", "prompt": "x", "a": f"a{i}.png", "b": f"b{i}.png", "label": "b"}))
    (tmp_path / "pairs.jsonl").write_text("\n".join(lines) + "\n")
    cfg = _config(tmp_path, fake_backend.base_url, model="fake-no-answer")  # every score: answer_missing
    assert cli_main(["eval", str(tmp_path / "pairs.jsonl"), "--judge", "quality", "--config", cfg,
                     "--no-progress"]) == 1
    captured = capsys.readouterr()
    # 4 distinct images (the three b's are one file's bytes), every one answer_missing
    assert "3 labelled pairs, 3 left out (a side invalid: answer_missing=4)" in captured.out
    assert "no pair has a valid score on both sides" in captured.err


def test_eval_json_has_null_not_nan(tmp_path, fake_backend, capsys):
    """Every sample labelled good: ROC-AUC is undefined. JSON has no NaN: it is written as null."""
    lines = []
    for i, p in enumerate((0.2, 0.6, 0.9)):
        _gray(tmp_path / f"s{i}.png", p)
        lines.append(json.dumps({"id": f"s{i}", "prompt": "a photo", "image": f"s{i}.png", "label": 1}))
    (tmp_path / "labels.jsonl").write_text("\n".join(lines) + "\n")
    assert cli_main(["eval", str(tmp_path / "labels.jsonl"), "--judge", "quality", "--config",
                     _config(tmp_path, fake_backend.base_url), "--no-progress"]) == 0
    text = (tmp_path / "labels.calibration.json").read_text()
    assert "NaN" not in text
    report = json.loads(text)
    assert report["auc"] is None and report["accuracy"] == 2 / 3 and report["tp"] == 2


def test_calibration_is_refused_for_rewards_outside_0_1():
    import math

    from judge_gateway.evaluation import binary_report

    report = binary_report("head", [-1.5, 0.2, 2.5, 0.9], [0, 0, 1, 1], [None] * 4, threshold=0.5)
    assert report.bins == [] and report.ece is None
    assert report.calibration_refused.startswith("2 of 4 rewards lie outside [0, 1] (min -1.5, max 2.5)")
    assert "calibration: not computed: 2 of 4 rewards" in report.render()
    assert report.accuracy == 1.0 and report.auc == 1.0  # rank figures hold on any scale
    assert not math.isnan(report.accuracy)
