"""A head's options cross to its worker process once validated: the gateway sends the fields the
config set, the worker rebuilds the kind's own options model from them (no defaults of its own)."""

from __future__ import annotations

import pytest

from judge_gateway.config import validate_config
from judge_gateway.config.kinds import HEAD_KINDS
from judge_gateway.heads.factory import head_options
from judge_gateway.heads.models.base import HeadLoadError
from judge_gateway.heads.supervisor import HeadSupervisor
from judge_gateway.workers.framing import encode_frame, read_frame
from tests.support.worker_pipes import worker_on_pipes

# One judge per head kind, each with options away from their defaults.
SET = {
    "clip": {"library": "open_clip", "model": "ViT-B-32", "pretrained": "openai", "device": "cuda:1",
             "dtype": "bf16", "preprocess": "device", "pooling": "topk_mean", "top_k": 2},
    "pickscore": {"peer_scale": False, "preprocess_processes": 3, "text_cache_size": 0},
    "hpsv2": {"checkpoint": "/models/hps.pt", "max_wait_ms": 0},
    "hpsv3": {"base_model": "/models/qwen2-vl", "max_batch_size": 2, "threads": 4, "preprocess": "device"},
    "ocr": {"min_confidence": 0.7, "use_cls": False, "overlap_preprocessing": True},
    "videoalign": {"checkpoint_step": 5, "normalize": False, "device": "cuda:0", "preprocess": "reference"},
    "gen_eval": {"detector_checkpoint": "/models/det.pth", "clip_pretrained": "openai", "reward": "strict"},
    "image_reward": {"vit": {"embed_dim": 32, "depth": 2, "num_heads": 4}, "tokenizer": "/models/bert"},
    "custom": {"head": "rewards.mine:Scorer", "pythonpath": ["rewards"], "media": ["image", "condition_image"],
               "params": {"alpha": 2}},
    "flow_factory_model": {"reward_model": "rewards.ff.Model", "params": {"k": "v"}},
    "cosmos_rl_handler": {"handler": "rewards.cr:Handler", "score_key": "s", "batch_keys": ["b"]},
}


def test_every_head_kind_rebuilds_in_the_worker_as_the_gateway_validated_it():
    assert set(SET) == set(HEAD_KINDS)  # a new head kind gets a row here
    cfg = validate_config({"judges": {kind: {"kind": kind, "options": {**options, "env": {"A": "1"}}}
                                      for kind, options in SET.items()}})
    for kind in SET:
        options = cfg.judges[kind].options
        init = HeadSupervisor(kind, kind, options.model_copy(update={"transport": "pipe"})).launch().init
        assert "env" not in init["options"] and "python" not in init["options"]
        rebuilt = head_options(kind, init["options"])
        assert type(rebuilt) is type(options)
        assert rebuilt == options.model_copy(update={"env": {}, "transport": "pipe"}), kind


def test_the_worker_side_names_what_is_wrong():
    with pytest.raises(HeadLoadError, match="unknown head kind 'yes_no'"):
        head_options("yes_no", {})
    with pytest.raises(HeadLoadError, match=r"clip: invalid options \(max_batch_size: .*greater than or equal to 1"):
        head_options("clip", {"max_batch_size": 0})
    assert head_options("ocr", {}).max_batch_size == 8  # the kind's own default, from its model


def test_a_worker_given_invalid_options_says_why_before_loading_anything():
    with worker_on_pipes() as (send, recv, rc):
        send.write(encode_frame({"op": "init", "kind": "clip", "name": "c", "options": {"dtype": "int8"}}))
        header, _ = read_frame(recv)
    assert header["op"] == "fatal" and "dtype" in header["error"] and rc == [3]
