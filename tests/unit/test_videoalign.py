"""VideoAlign pure-python parts: checkpoint config validation, normalisation, frame times, sizes."""

from __future__ import annotations

import copy

import pytest

from judge_gateway.media import MediaError
from judge_gateway.config import HEAD_KIND_OPTIONS, HEAD_KINDS
from judge_gateway.heads.videoalign.config import (VideoAlignConfigError, build_chat_text, normalize,
                                                   parse_model_config, sample_video_frames, smart_frame_size)

CFG = {
    "data_config": {"fps": 2.0, "num_frames": None, "max_frame_pixels": 448 * 448,
                    "eval_dim": ["VQ", "MQ", "TA"], "prompt_template_type": "detailed_special"},
    "model_config": {"model_name_or_path": "Qwen/Qwen2-VL-2B-Instruct", "output_dim": 3,
                     "use_special_tokens": True, "reward_token": "special"},
    "peft_lora_config": {"lora_enable": True, "lora_r": 64, "lora_alpha": 128, "use_rslora": False},
    "inference_config": {"VQ_mean": 1.0, "VQ_std": 2.0, "MQ_mean": -1.0, "MQ_std": 0.5, "TA_mean": 0.0, "TA_std": 4.0},
}


def test_parse_reads_fps_size_lora_and_stats_from_the_checkpoint():
    spec = parse_model_config(CFG)
    assert spec.fps == 2.0 and spec.num_frames is None and spec.max_frame_pixels == 448 * 448
    assert spec.base_model == "Qwen/Qwen2-VL-2B-Instruct" and spec.lora_scale == 2.0
    assert spec.norm == {"VQ": (1.0, 2.0), "MQ": (-1.0, 0.5), "TA": (0.0, 4.0)}
    assert parse_model_config(CFG, base_model="/local/base").base_model == "/local/base"


@pytest.mark.parametrize("path, value, msg", [
    (("data_config", "fps"), None, "fps"),
    (("data_config", "fps"), -2, "fps"),
    (("data_config", "max_frame_pixels"), 10, "max_frame_pixels"),
    (("data_config", "prompt_template_type"), "simple", "prompt_template_type"),
    (("model_config", "reward_token"), "last", "reward_token"),
    (("model_config", "output_dim"), 2, "output_dim"),
    (("inference_config", "VQ_std"), 0, "VQ_std"),
    (("model_config", "model_name_or_path"), "", "model_name_or_path"),
])
def test_bad_configs_name_their_key(path, value, msg):
    cfg = copy.deepcopy(CFG)
    cfg[path[0]][path[1]] = value
    with pytest.raises(VideoAlignConfigError, match=msg):
        parse_model_config(cfg)


def test_num_frames_wins_over_fps():
    cfg = copy.deepcopy(CFG)
    cfg["data_config"]["num_frames"] = 8
    spec = parse_model_config(cfg)
    assert spec.num_frames == 8 and spec.fps is None


def test_normalisation_and_overall():
    spec = parse_model_config(CFG)
    out = normalize({"VQ": 3.0, "MQ": 0.0, "TA": 2.0}, spec.norm)
    assert out == {"VQ": 1.0, "MQ": 2.0, "TA": 0.5, "Overall": 3.5}
    assert normalize({"VQ": 3.0, "MQ": 0.0, "TA": 2.0}, None)["Overall"] == 5.0


@pytest.mark.parametrize("n, fps, want", [
    (49, 16.0, [0, 10, 19, 29, 38, 48]),  # VideoAlign's vision_process (smart_nframes + linspace)
    (48, 24.0, [0, 16, 31, 47]),
    (33, 16.0, [0, 11, 21, 32]),
    (16, 8.0, [0, 5, 10, 15]),
])
def test_sampling_is_the_reference_rule_over_the_whole_clip(n, fps, want):
    idx, eff = sample_video_frames(n, fps, 2.0, None)
    assert idx == want and eff == pytest.approx(len(want) / (n / fps))


def test_sampling_even_count_min_frames_and_num_frames():
    idx, _ = sample_video_frames(3 * 16 + 1, 16.0, 2.0, None)  # 3.06 s: 6.1 frames at 2 fps -> 6 (even)
    assert len(idx) == 6
    idx, _ = sample_video_frames(8, 8.0, 2.0, None)  # a 1 s clip: at least 4 frames
    assert len(idx) == 4
    idx, _ = sample_video_frames(100, 24.0, None, 8)
    assert len(idx) == 8 and idx[0] == 0 and idx[-1] == 99
    with pytest.raises(MediaError, match="cannot give"):
        sample_video_frames(1, 8.0, 2.0, None)


def test_sample_types_other_than_uniform_are_refused():
    with pytest.raises(VideoAlignConfigError, match="data_config.sample_type"):
        parse_model_config({**CFG, "data_config": {**CFG["data_config"], "sample_type": "multi_pts"}})


def test_smart_frame_size_matches_qwen_rules():
    assert smart_frame_size(480, 480, 128 * 28 * 28, 448 * 448) == (448, 448)
    h, w = smart_frame_size(720, 1280, 128 * 28 * 28, 448 * 448)
    assert h % 28 == 0 and w % 28 == 0 and h * w <= 448 * 448
    h, w = smart_frame_size(48, 64, 28 * 28 * 4, 448 * 448)  # small: grows to min pixels
    assert h * w >= 28 * 28 * 4


def test_prompt_has_the_three_reward_tokens_in_order_and_literal_braces():
    text = build_chat_text('a cat {x} "quoted"', "detailed_special")
    pos = [text.index(t) for t in ("<|VQ_reward|>", "<|MQ_reward|>", "<|TA_reward|>")]
    assert pos == sorted(pos)
    assert 'Textual prompt - a cat {x} "quoted"\n' in text
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert text.count("<|video_pad|>") == 1


def test_videoalign_is_a_head_kind_with_options():
    assert "videoalign" in HEAD_KINDS
    opts = HEAD_KIND_OPTIONS["videoalign"].model_validate({"checkpoint": "/ckpt"})
    assert opts.normalize and opts.max_batch_size == 4
