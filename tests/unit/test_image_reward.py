"""image_reward head, the parts that need no torch: options, config errors naming the key, the
cosmos-rl reward-name mapping. The model itself: tests/integration/test_image_reward.py."""

from __future__ import annotations

import pytest

from judge_gateway.config import ConfigError, validate_config
from judge_gateway.config import (
    HEAD_KIND_OPTIONS,
    HEAD_KINDS,
    ImageRewardOptions,
)
from judge_gateway.config import CosmosRLConfig


def test_image_reward_is_a_head_kind_with_the_released_defaults():
    assert "image_reward" in HEAD_KINDS and HEAD_KIND_OPTIONS["image_reward"] is ImageRewardOptions
    opts = ImageRewardOptions.model_validate({})
    assert opts.checkpoint == "THUDM/ImageReward/ImageReward.pt"
    assert opts.med_config == "THUDM/ImageReward/med_config.json"
    assert opts.tokenizer == "bert-base-uncased"  # the name the package hard-codes
    assert opts.vit is None  # the package's ViT-L/16
    assert opts.max_batch_size == 16 and opts.device == "cpu" and opts.dtype == "fp32"


def test_local_paths_and_a_tiny_vision_tower():
    cfg = validate_config({"judges": {"ir": {"kind": "image_reward", "options": {
        "python": ".venv-imagereward/bin/python", "checkpoint": "/m/ImageReward.pt", "med_config": "/m/med.json",
        "tokenizer": "/m/tok", "vit": {"embed_dim": 32, "depth": 2, "num_heads": 2}, "max_batch_size": 64}}}})
    opts = cfg.judge_options("ir")
    assert opts.vit is not None and opts.vit.patch_size == 16 and opts.vit.embed_dim == 32
    # what the worker receives
    assert opts.model_dump(mode="json")["vit"] == {"embed_dim": 32, "depth": 2, "num_heads": 2, "patch_size": 16}


@pytest.mark.parametrize("options, key, words", [
    ({"max_batch_size": 0}, "judges.ir.options.max_batch_size", "greater than or equal"),
    ({"checkpoint": 3}, "judges.ir.options.checkpoint", "string"),
    ({"med_cfg": "/x.json"}, "judges.ir.options.med_cfg", "Extra inputs"),
    ({"vit": {"embed_dim": 32, "depth": 0, "num_heads": 2}}, "judges.ir.options.vit.depth", "greater than"),
    ({"vit": {"embed_dim": 30, "depth": 2, "num_heads": 4}}, "judges.ir.options.vit", "does not divide embed_dim"),
    ({"vit": {"embed_dim": 32, "depth": 2, "num_heads": 2, "patch_size": 15}}, "judges.ir.options.vit",
     "does not divide the 224 px input"),
    ({"vit": {"embed_dim": 32, "depth": 2}}, "judges.ir.options.vit.num_heads", "Field required"),
    ({"vit": "base"}, "judges.ir.options.vit", "valid dictionary"),
    ({"dtype": "int8"}, "judges.ir.options.dtype", "fp32"),
])
def test_bad_options_name_their_key(options, key, words):
    with pytest.raises(ConfigError) as err:
        validate_config({"judges": {"ir": {"kind": "image_reward", "options": options}}})
    assert key in str(err.value) and words in str(err.value), str(err.value)


def test_a_backend_or_template_is_refused_for_the_head():
    with pytest.raises(ConfigError, match=r"judges\.ir\.template: not used by head kind 'image_reward'"):
        validate_config({"judges": {"ir": {"kind": "image_reward", "template": "vqa_alignment@1"}}})


def test_cosmos_rl_image_reward_name_reads_the_heads_raw_z_score():
    """cosmos-rl's `image_reward` reward: judge `image_reward`, legacy key `image_reward` = raw
    (the head's raw is ImageReward's z-normalised score, what cosmos-rl's reward service reported)."""
    spec = CosmosRLConfig().rewards["image_reward"]
    assert spec.judge == "image_reward" and list(spec.keys) == ["image_reward"]
    assert spec.keys["image_reward"].source == "raw" and spec.keys["image_reward"].labels is None
    cfg = validate_config({"judges": {"image_reward": {"kind": "image_reward"}}})
    assert cfg.cosmos_rl.rewards["image_reward"].judge in cfg.judges
