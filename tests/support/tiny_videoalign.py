"""Build a tiny VideoAlign (VideoReward) checkpoint offline with the real libraries, in the
released layout, plus the in-memory model's reference scores.

Run under the heads venv: `.venv-heads/bin/python -m tests.support.tiny_videoalign OUT_DIR`.
Writes to OUT_DIR:
  base/                        a tiny Qwen2-VL "base model": config.json, tokenizer (a small BPE
                               with Qwen's special tokens), Qwen2-VL image/video processor configs
  ckpt/model_config.json       data/model/LoRA/inference sections like the released one (fps 2,
                               but a small max_frame_pixels so tests are fast)
  ckpt/checkpoint-7/model.pth  the PEFT-wrapped reward model's state dict in transformers-4.x
                               Qwen2-VL names (base_model.model.visual.*, ...model.layers.*),
                               un-merged LoRA (base_layer / lora_A.default / lora_B.default) on the
                               language model's linears, resized embeddings, rm_head [3, hidden]
  videos.npz, reference.json   test videos and the in-memory model's scores: LoRA applied
                               un-merged through forward hooks (x W^T + s x A^T B^T), so the loader's
                               merge is checked, not reused
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SEED = 7321
STEP = 7
LORA_R, LORA_ALPHA = 4, 8
NORM = {"VQ_mean": 0.25, "VQ_std": 0.5, "MQ_mean": -0.1, "MQ_std": 2.0, "TA_mean": 0.05, "TA_std": 0.8}
PROMPTS = ["a red ball rolls to the right", "a quiet lake at dawn, {braces} kept", "a dog runs"]
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def model_config(base: Path) -> dict:
    return {
        "data_config": {"meta_data": "unused.csv", "data_dir": "unused", "fps": 2.0, "num_frames": None,
                        "max_frame_pixels": 56 * 84, "min_frame_pixels": 28 * 28, "p_shuffle_frames": 0.0,
                        "p_color_jitter": 0.0, "eval_dim": ["VQ", "MQ", "TA"],
                        "prompt_template_type": "detailed_special", "add_noise": False,
                        "sample_type": "uniform", "use_tied_data": True},
        "model_config": {"model_name_or_path": str(base), "output_dim": 3, "use_special_tokens": True,
                         "reward_token": "special", "torch_dtype": "float32", "loss_type": "btt"},
        "peft_lora_config": {"lora_enable": True, "vision_lora": False, "lora_r": LORA_R,
                             "lora_alpha": LORA_ALPHA, "lora_dropout": 0.05, "lora_target_modules": None,
                             "lora_namespan_exclude": ["lm_head", "rm_head", "embed_tokens"],
                             "lora_task_type": "CAUSAL_LM", "use_rslora": False},
        "inference_config": dict(NORM),
    }


def clip_frames(fps: float, seconds: float = 2.0, h: int = 48, w: int = 64) -> np.ndarray:
    """A 2-second clip whose content is a function of time only (a square moving right)."""
    n = int(round(fps * seconds))
    frames = np.zeros((n, h, w, 3), dtype=np.uint8)
    yy, xx = np.mgrid[0:h, 0:w]
    for i in range(n):
        t = i / fps
        frames[i, ..., 0] = (40 + 60 * t) % 256
        frames[i, ..., 2] = (xx * 3) % 256
        x0 = int(4 + 20 * t)
        sq = (xx >= x0) & (xx < x0 + 12) & (yy >= 18) & (yy < 30)
        frames[i][sq] = (250, 220, int(100 + 50 * t))
    return frames


def test_videos() -> list[np.ndarray]:
    rng = np.random.default_rng(SEED)
    vids = [clip_frames(8.0)[::4], clip_frames(8.0)[::2][:6]]  # 4 and 6 frames
    vids.append(rng.integers(0, 256, size=(4, 40, 72, 3), dtype=np.uint8))  # another aspect
    return vids


def _old_name(key: str) -> str:
    """transformers 5.x Qwen2-VL key -> the 4.x name the released checkpoint uses."""
    if key.startswith("model.visual."):
        return key[len("model."):]
    if key.startswith("model.language_model."):
        return "model." + key[len("model.language_model."):]
    return key


def build(out: Path) -> dict:
    import torch
    from transformers import AutoProcessor, Qwen2VLConfig, Qwen2VLForConditionalGeneration

    from judge_gateway.heads.videoalign.config import REWARD_TOKENS, parse_model_config
    from judge_gateway.heads.videoalign.model import VideoAlignHead
    from tests.support import build_tiny_vlm as tv

    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    base = out / "base"
    base.mkdir(parents=True, exist_ok=True)
    tok, special = tv.build_tokenizer(base, random.Random(SEED))
    tv.write_processor_configs(base)
    for name in ("preprocessor_config.json", "video_preprocessor_config.json"):
        cfg = json.loads((base / name).read_text())
        cfg["processor_class"] = "Qwen2VLProcessor"
        (base / name).write_text(json.dumps(cfg, indent=2))
    n_tok = tok.get_vocab_size()
    config = Qwen2VLConfig(
        text_config={"vocab_size": n_tok, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                                         "mrope_section": [2, 3, 3]},
                     "tie_word_embeddings": False, "pad_token_id": special["<|endoftext|>"],
                     "bos_token_id": special["<|endoftext|>"], "eos_token_id": special["<|im_end|>"]},
        vision_config={"depth": 2, "embed_dim": 32, "hidden_size": 64, "mlp_ratio": 2, "num_heads": 2,
                       "in_channels": 3, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
        image_token_id=special["<|image_pad|>"], video_token_id=special["<|video_pad|>"],
        vision_start_token_id=special["<|vision_start|>"], vision_end_token_id=special["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    config.save_pretrained(str(base))

    # The reward model as VideoAlign trains it: reward tokens added, embeddings resized to the tokenizer.
    processor = AutoProcessor.from_pretrained(str(base))
    processor.tokenizer.add_special_tokens({"additional_special_tokens": list(REWARD_TOKENS)})
    vocab = len(processor.tokenizer)
    config.text_config.vocab_size = vocab
    config.vocab_size = vocab
    model = Qwen2VLForConditionalGeneration(config).float().eval()
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "norm" in name:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    hidden = config.text_config.hidden_size
    rm_head = torch.randn(3, hidden, generator=gen) * 0.3

    state = {}
    lora_mods = {}
    for key, value in model.state_dict().items():
        old = _old_name(key)
        mod = old.rsplit(".", 1)[0]
        if old.startswith("model.layers.") and mod.rsplit(".", 1)[-1] in LORA_TARGETS:
            leaf = old.rsplit(".", 1)[1]
            state[f"base_model.model.{mod}.base_layer.{leaf}"] = value.clone()
            if leaf == "weight":
                a = torch.randn(LORA_R, value.shape[1], generator=gen) * 0.2
                b = torch.randn(value.shape[0], LORA_R, generator=gen) * 0.2
                state[f"base_model.model.{mod}.lora_A.default.weight"] = a
                state[f"base_model.model.{mod}.lora_B.default.weight"] = b
                lora_mods[key.rsplit(".", 1)[0]] = (a, b)
        else:
            state[f"base_model.model.{old}"] = value.clone()
    state["base_model.model.rm_head.weight"] = rm_head.clone()
    ckpt = out / "ckpt"
    (ckpt / f"checkpoint-{STEP}").mkdir(parents=True, exist_ok=True)
    # the cached file names the base model relative to the entry (tests/support/tiny_cache.py)
    (ckpt / "model_config.json").write_text(json.dumps(model_config(base.relative_to(out)), indent=2))
    torch.save(state, ckpt / f"checkpoint-{STEP}" / "model.pth")

    # In-memory reference: LoRA un-merged, through forward hooks.
    scale = LORA_ALPHA / LORA_R
    for name, module in model.named_modules():
        if name in lora_mods:
            a, b = lora_mods[name]
            module.register_forward_hook(lambda m, args, y, a=a, b=b: y + scale * (args[0] @ a.T) @ b.T)
    head = VideoAlignHead.__new__(VideoAlignHead)
    head.processor = processor
    head.spec = parse_model_config(model_config(base))
    head.prep_device = torch.device("cpu")  # the reference (CPU) preprocessing
    reward_ids = [processor.tokenizer.convert_tokens_to_ids(t) for t in REWARD_TOKENS]
    videos = test_videos()
    np.savez(out / "videos.npz", *videos)
    scores = []
    with torch.no_grad():
        for video, prompt in zip(videos, PROMPTS):
            batch = head.prepare([video], [prompt])
            hs = model.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                             pixel_values_videos=batch["pixel_values_videos"],
                             video_grid_thw=batch["video_grid_thw"],
                             mm_token_type_ids=batch["mm_token_type_ids"]).last_hidden_state[0]
            ids = batch["input_ids"][0].tolist()
            raw = [float(hs[ids.index(tid)] @ rm_head[i]) for i, tid in enumerate(reward_ids)]
            norm = [(r - NORM[f"{d}_mean"]) / NORM[f"{d}_std"] for r, d in zip(raw, ("VQ", "MQ", "TA"))]
            scores.append({"raw": raw, "vq": norm[0], "mq": norm[1], "ta": norm[2], "overall": sum(norm),
                           "grid_thw": batch["video_grid_thw"][0].tolist()})
    ref = {"prompts": PROMPTS, "scores": scores, "step": STEP}
    (out / "reference.json").write_text(json.dumps(ref, indent=2))
    assert all(math.isfinite(s["overall"]) for s in scores)
    return ref


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", type=Path)
    args = p.parse_args(argv)
    ref = build(args.out_dir.resolve())
    print(json.dumps(ref["scores"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
