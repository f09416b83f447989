"""Build a tiny, randomly initialised Qwen3-VL model that vLLM (CPU) serves.

Usage (with the vLLM venv's interpreter, which has torch, transformers and tokenizers):

    .venv-vllm/bin/python -m tests.support.build_tiny_qwen3vl OUT_DIR

The architecture of the Qwen3-VL-8B-based judges (Cosmos-Reason2, UnifiedReward-2.0 / -Think
qwen3vl, GenEval 2's VQA model): `Qwen3VLForConditionalGeneration`, built with transformers'
own classes at toy size: text hidden 128, 2 layers, 4 heads of 32 (the CPU attention backend's
head sizes), 2 KV heads, interleaved mrope [6, 5, 5]; vision hidden 64, depth 2, patch 16, merge
2, one deepstack level. The tokenizer, the answer-head shaping and the calibration are
tests/support/build_tiny_vlm.py's (the tiny Qwen2.5-VL), so "Yes" / "No" variants lead the first
token with an input-dependent split; the number words one..four (and " one".." four") are single
tokens placed in the top-20 too, some logits below, for answer-probability (GenEval 2 "How many")
questions, and their capitalised forms are single tokens as in Qwen's vocabulary (digits stay one
token each, split from a space before them, by the Qwen2 pre-tokenizer).

What differs from the Qwen2.5-VL build, as in the real Qwen3-VL release:
* the chat template has no default system turn (Qwen3-VL-Instruct's layout: `<|im_start|>`
  turns, `<|vision_start|><|image_pad|><|vision_end|>` / `<|video_pad|>` placeholders, which
  the processor expands; a video into per-frame `<t seconds>` timestamps);
* the processors are Qwen3-VL's: patch 16, image mean/std 0.5, `Qwen3VLVideoProcessor`.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

from tests.support import build_tiny_vlm as base

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MARKER = ".tiny_qwen3vl_builder.json"
PATCH, MERGE, TEMPORAL = 16, 2, 2
MIN_PIXELS, MAX_PIXELS = 4096, 50176  # 64*64 .. 224*224: at most 49 merged tokens per image
VIDEO_MAX_PIXELS = 8 * 50176  # the whole clip's pixels (Qwen3-VL's video budget is per clip)
MEAN = STD = [0.5, 0.5, 0.5]
NUMBER_ANSWERS = ("one", "two", "three", "four", " one", " two", " three", " four")
# Single tokens too (as in Qwen's vocabulary), not placed in the top-K: GenEval 2's spellings of an answer.
CAPITALISED = ("One", "Two", "Three", "Four", " One", " Two", " Three", " Four")

# Qwen3-VL-Instruct's chat template layout: no default system turn; a system turn only when given.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}"
    "{{- message['content'] }}"
    "{%- else %}"
    "{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' or part['type'] == 'image_url' or 'image' in part %}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'video' or part['type'] == 'video_url' or 'video' in part %}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif 'text' in part %}"
    "{{- part['text'] }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)


def write_processor_configs(out_dir: Path) -> None:
    common = {"do_resize": True, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
              "do_convert_rgb": True, "image_mean": MEAN, "image_std": STD, "resample": 3,
              "patch_size": PATCH, "temporal_patch_size": TEMPORAL, "merge_size": MERGE,
              "processor_class": "Qwen3VLProcessor"}
    image_cfg = {**common, "image_processor_type": "Qwen2VLImageProcessorFast",
                 "size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}}
    video_cfg = {**common, "video_processor_type": "Qwen3VLVideoProcessor",
                 "size": {"shortest_edge": MIN_PIXELS, "longest_edge": VIDEO_MAX_PIXELS},
                 "do_sample_frames": False, "fps": 2, "min_frames": 2, "max_frames": 64}
    (out_dir / "preprocessor_config.json").write_text(json.dumps(image_cfg, indent=2))
    (out_dir / "video_preprocessor_config.json").write_text(json.dumps(video_cfg, indent=2))


def make_config(vocab_size: int, special_ids: dict[str, int]):
    from transformers import Qwen3VLConfig

    head_dim = base.TEXT_HIDDEN // base.TEXT_HEADS  # 32
    text_config = base.base_text_config(
        vocab_size, special_ids, head_dim=head_dim,
        attention_bias=True,  # the answer shaping adds a constant through v_proj's bias
        rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [6, 5, 5],
                         "mrope_interleaved": True})
    assert sum(text_config["rope_parameters"]["mrope_section"]) == head_dim // 2
    vision_config = {
        "depth": base.VISION_DEPTH,
        "hidden_size": base.VISION_HIDDEN,
        "intermediate_size": 128,
        "num_heads": base.VISION_HEADS,
        "in_channels": 3,
        "patch_size": PATCH,
        "spatial_merge_size": MERGE,
        "temporal_patch_size": TEMPORAL,
        "out_hidden_size": base.TEXT_HIDDEN,
        "num_position_embeddings": 576,  # a 24 x 24 grid of learned positions, interpolated
        "deepstack_visual_indexes": [0],
        "hidden_act": "gelu_pytorch_tanh",
    }
    config = Qwen3VLConfig(text_config=text_config, vision_config=vision_config, **base.media_token_ids(special_ids),
                           tie_word_embeddings=False)
    config.architectures = ["Qwen3VLForConditionalGeneration"]
    config.dtype = "float32"
    return config


def build(out_dir: Path) -> dict:
    import numpy as np
    import torch

    random.seed(base.SEED)
    np.random.seed(base.SEED)
    torch.manual_seed(base.SEED)
    torch.set_num_threads(1)  # bit-stable reductions in the calibration passes
    rng = random.Random(base.SEED)
    gen = torch.Generator().manual_seed(base.SEED)

    words = sorted({w.strip() for w in NUMBER_ANSWERS + CAPITALISED})
    lines = tuple(words) * 200 + tuple(f"How many cats are there? {w}" for w in words) * 100
    tok, special_ids = base.build_tokenizer(out_dir, rng, chat_template=CHAT_TEMPLATE,
                                            extra_words=NUMBER_ANSWERS + CAPITALISED, extra_lines=lines)
    vocab_size = ((tok.get_vocab_size() + 63) // 64) * 64
    write_processor_configs(out_dir)

    from transformers import (
        AutoProcessor,
        GenerationConfig,
        Qwen3VLForConditionalGeneration,
    )

    config = make_config(vocab_size, special_ids)
    torch.manual_seed(base.SEED)
    model = Qwen3VLForConditionalGeneration(config).to(torch.float32).eval()
    base.init_weights(model, gen)

    processor = AutoProcessor.from_pretrained(str(out_dir))
    stats = base.shape_answer_head(model, processor, tok, *base.calibration_inputs(rng), gen,
                                   extra_answers=NUMBER_ANSWERS)
    base.save(model, out_dir, special_ids, GenerationConfig)
    stats["vocab_size"] = vocab_size
    return stats


if __name__ == "__main__":
    sys.exit(base.main(build_fn=build, marker_name=MARKER, doc=__doc__))
