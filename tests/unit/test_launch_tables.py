"""Every shipped config, and cosmos-rl's rewards.toml mapping, says how each VLM judge's server is
started (issue 33): a launch table per backend (preset, GPUs), and a context and media limits that
hold what the judge's conformant template sends: its media, its visual budget (the judge's
video.total_pixels / image.max_pixels in 28 x 28 tokens, two frames a token), its text and its
reply. So `prepare --config X` builds the vLLM environment and fetches each model, and
`up --config X` starts every server."""

from __future__ import annotations

import pytest

from judge_gateway.config import load_config, validate_config
from judge_gateway.config.cosmos_rl_toml import map_rewards_toml
from judge_gateway.prompts.registry import load_template

SHIPPED = ("default", "cosmos_rl", "flow_factory")
PATCH = 28 * 28  # pixels per visual token (a 14 px patch, merged 2 x 2)
CHARS_PER_TOKEN = 3  # a low estimate for English prompt text: over-counts its tokens


def _needs(judge, template) -> tuple[dict[str, int], int]:
    """(media counts, the most context tokens one request of the judge takes, images of no set
    budget aside)."""
    slots = template.media_slots
    media = {"image": sum(s in ("image", "condition_image") for s in slots),
             "video": sum(s in ("video", "condition_video") for s in slots)}
    tokens = (len(template.system or "") + len(template.user)) // CHARS_PER_TOKEN + 64  # chat markup
    if media["video"] and judge.video.total_pixels:
        tokens += media["video"] * judge.video.total_pixels // (PATCH * 2)
    if media["image"] and judge.image.max_pixels:
        tokens += media["image"] * judge.image.max_pixels // PATCH
    reply = getattr(judge.options, "max_tokens", None) or template.max_tokens or 1
    return media, tokens + reply


def _check(cfg) -> list[str]:
    checked = []
    for name, judge in cfg.judges.items():
        if judge.kind_spec.runs_on != "vlm":
            continue
        launch = cfg.backends[judge.backend].launch
        assert launch is not None, f"{name}: backend {judge.backend!r} has no launch table"
        assert launch.preset and launch.gpus >= 1 and launch.max_model_len and launch.limit_mm_per_prompt, launch
        template = load_template(judge.template)
        media, tokens = _needs(judge, template)
        for medium, count in media.items():
            assert launch.limit_mm_per_prompt.get(medium, 0) >= count, (name, medium, count, launch)
        assert tokens <= launch.max_model_len, (name, tokens, launch.max_model_len)
        checked.append(name)
    return checked


@pytest.mark.parametrize("name", SHIPPED)
def test_each_vlm_judge_of_a_shipped_config_has_a_launch_table_that_holds_its_template(name):
    checked = _check(load_config(name))
    assert checked, name


def test_the_cosmos_reason1_budget_is_cosmos_rls():
    """cosmos-rl's reward service: 9216 visual tokens over the clip (its _process_video_inputs,
    reward_service/cosmos_rl_reward/model/cosmos_reason1.py): the judge's total_pixels, held by a
    16384-token context."""
    cfg = load_config("cosmos_rl")
    judge = cfg.judges["cosmos_reason1"]
    assert judge.video.total_pixels == 9216 * PATCH * 2 and judge.video.max_frames == 160
    assert cfg.backends["cosmos_reason1"].launch.max_model_len == 16384


def test_the_rewards_toml_mapping_gives_local_vlm_servers_launch_tables_and_remote_ones_none():
    mapped = map_rewards_toml({"reward_args": [
        {"reward_type": "cosmos_reason1"},
        {"reward_type": "unified_reward", "endpoint_url": "http://10.0.0.7:9000/v1"}]})
    cfg = validate_config(mapped.data)
    assert _check(validate_config({**mapped.data, "backends": {"cosmos_reason1": mapped.data["backends"]["cosmos_reason1"]},
                                   "judges": {"cosmos_reason1": mapped.data["judges"]["cosmos_reason1"]}})) == [
        "cosmos_reason1"]
    launch = cfg.backends["cosmos_reason1"].launch
    assert launch.preset == "cosmos_reason1" and launch.model is None  # the preset's model is model_path's default
    assert cfg.backends["unified_reward"].launch is None
    said = "\n".join(mapped.lines)
    assert "backends.cosmos_reason1.launch: `judge-gateway up` serves nvidia/Cosmos-Reason1-7B-Reward" in said
    assert "http://10.0.0.7:9000/v1 is another host's server -> no launch table" in said

    local = map_rewards_toml({"reward_args": [
        {"reward_type": "cosmos_reason1", "model_path": "/models/cr1"},
        {"reward_type": "unified_reward", "model_path": "CodeGoat24/UnifiedReward-7b-v1.5"}]})
    cfg = validate_config(local.data)
    assert _check(cfg) == ["cosmos_reason1", "unified_reward"]
    assert cfg.backends["cosmos_reason1"].launch.model == "/models/cr1"
    assert cfg.backends["cosmos_reason1"].model == "/models/cr1"  # the served name is the backend's model
    unified = cfg.backends["unified_reward"]
    assert unified.launch.model == "CodeGoat24/UnifiedReward-7b-v1.5" and unified.model == "UnifiedReward-7b-v1.5"
