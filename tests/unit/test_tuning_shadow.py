"""Shadow scoring: a candidate template scored next to the pinned one, reported in details only;
template versions shown and refused exactly."""

from __future__ import annotations

import asyncio

import pytest

from judge_gateway.cli import main
from judge_gateway.config import ConfigError, validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.prompts import load_template
from judge_gateway.schema import RewardRequest
from judge_gateway.tuning.cache import CachedScore
from judge_gateway.tuning.compare import compare_scores
from judge_gateway.tuning.prefs import load_preferences
from tests.conftest import png_bytes


def cfg(url: str, model: str = "fake-yes", **options) -> dict:
    return {"backends": {"b": {"model": model, "base_urls": [url]}},
            "judges": {"align": {"kind": "yes_no", "backend": "b", "template": "vqa_alignment@1",
                                 "options": options}}}


def score(doc: dict):
    gw = Gateway(validate_config(doc))

    async def go():
        try:
            return await gw.score(RewardRequest(samples=[{"prompt": "a cat", "image": png_bytes(5)}]))
        finally:
            await gw.aclose()

    return asyncio.run(go()).results[0]


def test_shadow_score_goes_to_details_never_to_reward(fake_backend):
    plain = score(cfg(fake_backend.base_url))
    shadowed = score(cfg(fake_backend.base_url, shadow_template="vqa_alignment@2"))
    s = shadowed.scores["align"]
    assert s.valid and s.reward == plain.scores["align"].reward and shadowed.reward == plain.reward
    assert s.template.version == "1"
    shadow = s.details["shadow"]
    assert shadow["valid"] and shadow["error"] is None and 0 <= shadow["reward"] <= 1
    assert shadow["template"] == {"id": "vqa_alignment", "version": "2",
                                  "sha256": load_template("vqa_alignment@2").sha256}
    assert "p_yes" in shadow["details"] and "image" not in shadow["details"]


def test_invalid_shadow_never_invalidates_the_primary(fake_backend):
    # The shadow fails (its own deadline is the judge's); here: a backend answering neither yes nor no.
    res = score(cfg(fake_backend.base_url, model="fake-no-answer", shadow_template="vqa_alignment@2"))
    s = res.scores["align"]
    assert not s.valid and s.details["shadow"]["valid"] is False
    assert s.details["shadow"]["error"]["code"] == "answer_missing"


@pytest.mark.parametrize("ref, reason", [
    ("vqa_alignment", "pin"),
    ("vqa_alignment@9", "available versions"),
    ("vqa_alignment@1", "the judge's own template"),
    ("rational_rewards_t2i@1", "'rubric' template"),
])
def test_shadow_template_validated_at_load(ref, reason):
    with pytest.raises(ConfigError, match=reason):
        validate_config(cfg("http://127.0.0.1:9/v1", shadow_template=ref))


def test_prompts_show_prints_exact_bytes_and_sha(capsys):
    assert main(["prompts", "show", "vqa_alignment@2"]) == 0
    out = capsys.readouterr().out
    t = load_template("vqa_alignment@2")
    assert out.startswith(t.path.read_text()) and f"sha256:{t.sha256}" in out
    assert main(["prompts", "show", "vqa_alignment"]) == 2
    assert "pin" in capsys.readouterr().err


def test_compare_scores_agreement_figures(tmp_path):
    for i in range(6):
        (tmp_path / f"{i}.png").write_bytes(png_bytes(i))
    lines = [f'{{"id": "p{i}", "prompt": "x", "a": "{2 * i}.png", "b": "{2 * i + 1}.png", "label": "a"}}'
             for i in range(3)]
    (tmp_path / "p.jsonl").write_text("\n".join(lines) + "\n")
    data = load_preferences(tmp_path / "p.jsonl")
    rewards_a = [0.9, 0.1, 0.8, 0.3, 0.2, 0.6]
    rewards_b = [0.7, 0.2, 0.9, 0.1, 0.6, 0.5]   # same order for pairs 0, 1; pair 2 flips
    table = {}
    for i, key in enumerate(data.samples()):
        table[(key, "A")] = CachedScore(valid=True, reward=rewards_a[i])
        table[(key, "B")] = CachedScore(valid=True, reward=rewards_b[i])
    rep = compare_scores(data, table, ("A", "B"))
    assert rep.pairs_compared == 3 and rep.flips == 1
    assert rep.accuracy["A"]["acc_no_ties"] == pytest.approx(2 / 3)
    assert rep.accuracy["B"]["acc_no_ties"] == 1.0  # B prefers a in all three labelled pairs
    assert -1 <= rep.spearman <= 1 and "flip rate: 0.3333" in rep.render()
    # An invalid score removes the sample from the agreement, and is counted.
    table[(next(iter(data.samples())), "B")] = CachedScore(valid=False, error_code="parse_error")
    rep = compare_scores(data, table, ("A", "B"))
    assert rep.invalid == {"A": 0, "B": 1} and rep.valid_both == 5 and rep.pairs_compared == 2
