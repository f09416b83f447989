"""hpsv3 head, the torch-free parts: options (errors name their key), the yaml the package reads,
checkpoint resolution, and the cosmos-rl reward name. End to end: tests/integration/test_hpsv3.py."""

from __future__ import annotations

import pytest

from judge_gateway.config import ConfigError, validate_config
from judge_gateway.heads.models.base import HeadLoadError
from judge_gateway.heads.models.hpsv3 import inference_yaml
from judge_gateway.heads.models.hub import resolve_model_file
from judge_gateway.config import HEAD_KIND_OPTIONS, HEAD_KINDS


def test_hpsv3_is_a_head_kind_with_the_released_defaults():
    assert "hpsv3" in HEAD_KINDS
    o = HEAD_KIND_OPTIONS["hpsv3"].model_validate({})
    assert o.checkpoint == "MizzenAI/HPSv3/HPSv3.safetensors"
    assert o.base_model is None and o.config is None and not o.flash_attn
    assert (o.device, o.dtype, o.max_batch_size) == ("cpu", "fp32", 8)
    gpu = validate_config({"judges": {"hps": {"kind": "hpsv3", "options": {
        "device": "cuda:0", "dtype": "bf16", "flash_attn": True, "max_batch_size": 16,
        "checkpoint": "/models/HPSv3.safetensors", "base_model": "/models/Qwen2-VL-7B-Instruct",
        "config": "/models/hpsv3.yaml", "python": ".venv-hpsv3/bin/python"}}}})
    assert gpu.judge_options("hps").flash_attn


@pytest.mark.parametrize("options, key, words", [
    ({"checkpoint": ""}, "judges.h.options.checkpoint", "checkpoint file"),
    ({"checkpoint": "/models/hpsv3.json"}, "judges.h.options.checkpoint", ".safetensors"),
    ({"base_model": " "}, "judges.h.options.base_model", "hub id"),
    ({"config": "/models/hpsv3.json"}, "judges.h.options.config", ".yaml"),
    ({"flash_attn": True}, "judges.h.options", "flash_attn = true needs device = cuda"),
    ({"flash_attn": True, "device": "cuda", "dtype": "fp32"}, "judges.h.options", "dtype = bf16 or fp16"),
    ({"dtype": "int8"}, "judges.h.options.dtype", ""),
    ({"device": "gpu"}, "judges.h.options.device", ""),
    ({"max_batch_size": 0}, "judges.h.options.max_batch_size", ""),
    ({"model": "MizzenAI/HPSv3"}, "judges.h.options.model", "Extra inputs"),
])
def test_bad_options_name_their_key(options, key, words):
    with pytest.raises(ConfigError) as err:
        validate_config({"judges": {"h": {"kind": "hpsv3", "options": options}}})
    assert key in str(err.value) and words in str(err.value), str(err.value)


SHIPPED = {"model_name_or_path": "Qwen/Qwen2-VL-7B-Instruct", "torch_dtype": "bfloat16", "bf16": True,
           "disable_flash_attn2": False, "deepspeed": "hpsv3/config/ds_config/zero2.json", "output_dim": 2}


@pytest.mark.parametrize("dtype, torch_dtype", [("fp32", "float32"), ("bf16", "bfloat16"), ("fp16", "float16")])
def test_inference_yaml_takes_dtype_and_attention_from_the_options(dtype, torch_dtype):
    cfg = inference_yaml(SHIPPED, dtype, flash_attn=False, base_model=None)
    assert cfg["torch_dtype"] == torch_dtype and cfg["bf16"] is False and cfg["fp16"] is False
    assert cfg["disable_flash_attn2"] is True and "deepspeed" not in cfg
    assert cfg["model_name_or_path"] == "Qwen/Qwen2-VL-7B-Instruct" and cfg["output_dim"] == 2
    assert inference_yaml(SHIPPED, dtype, True, None)["disable_flash_attn2"] is False
    assert SHIPPED["bf16"] is True  # the source is not modified


def test_inference_yaml_base_model_replaces_the_configs():
    assert inference_yaml(SHIPPED, "fp32", False, "/models/qwen")["model_name_or_path"] == "/models/qwen"
    with pytest.raises(HeadLoadError, match="options.base_model"):
        inference_yaml({"output_dim": 2}, "fp32", False, None)


def test_checkpoint_resolution(tmp_path, monkeypatch):
    f = tmp_path / "HPSv3.safetensors"
    f.write_bytes(b"x")
    assert resolve_model_file(str(f), "hpsv3", "checkpoint") == f
    for bad in (str(tmp_path / "missing.safetensors"), "./HPSv3.safetensors", "HPSv3/x.safetensors"):
        with pytest.raises(HeadLoadError, match="options.checkpoint"):
            resolve_model_file(bad, "hpsv3", "checkpoint")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HeadLoadError, match="options.checkpoint: cannot fetch 'MizzenAI/HPSv3/HPSv3.safetensors'"):
        resolve_model_file("MizzenAI/HPSv3/HPSv3.safetensors", "hpsv3", "checkpoint")


def test_cosmos_rl_hpsv3_reward_is_the_heads_raw_mu():
    cfg = validate_config({"judges": {"hpsv3": {"kind": "hpsv3"}}})
    reward = cfg.cosmos_rl.rewards["hpsv3"]
    assert reward.judge == "hpsv3" and {k: v.source for k, v in reward.keys.items()} == {"hpsv3": "raw"}
