"""Build a tiny HPSv3 checkpoint offline with the real `hpsv3` package, plus reference scores.

Run under the hpsv3 venv: `.venv-hpsv3/bin/python -m tests.support.tiny_hpsv3 OUT_DIR`.
Writes to OUT_DIR:
  base/                a tiny Qwen2-VL "base model" (what HPSv3's yaml calls model_name_or_path):
                       config.json + random weights, a small byte-level BPE tokenizer with Qwen's
                       special tokens, chat_template.json, a Qwen2-VL image processor config
  HPSv3_tiny.yaml      the package's shipped HPSv3_7B.yaml with model_name_or_path -> base/
                       (written relative to OUT_DIR, like the paths of reference.json),
                       fp32 (torch_dtype float32, bf16 off) and flash-attention off
  HPSv3.safetensors    the reward model's full state dict (backbone with the <|Reward|> token's
                       embedding row, lm_head, the ranknet rm_head) with seeded random weights:
                       the model is built by hpsv3's own create_model_and_processor, i.e. the
                       layout HPSv3RewardInferencer's strict load expects
  images/N.png, images.npz, reference.json
                       test images (different sizes and aspects), prompts of different lengths,
                       and two references per item:
                       `in_memory`: the random model before saving, one item per forward;
                       `package`: HPSv3RewardInferencer(yaml, checkpoint, "cpu").reward(png
                       paths, prompts), the package's documented usage, all items in one batch
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

SEED = 4711
PROMPTS = [
    "a red bicycle",
    "cute chibi anime cartoon fox, smiling wagging tail with a small cartoon heart above sticker",
    "a lighthouse on a cliff at dusk, oil painting, {braces} and 100% literal text kept",
    "two cats",
]
# The real Qwen2-VL-7B-Instruct image processor settings (the 448x448 images HPSv3 makes are
# never resized again by it).
IMAGE_PROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2VLProcessor",
    "do_resize": True, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
    "do_convert_rgb": True, "resample": 3,
    "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
    "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
}


def test_images() -> list[np.ndarray]:
    """Four images of different sizes and aspect ratios (each is resized to ~448x448 by HPSv3)."""
    rng = np.random.default_rng(SEED)
    h, w = 96, 128
    yy, xx = np.mgrid[0:h, 0:w]
    grad = np.stack([(xx * 2) % 256, (yy * 2) % 256, np.full_like(xx, 90)], -1).astype(np.uint8)
    solid = np.zeros((64, 64, 3), np.uint8)
    solid[...] = (200, 40, 30)
    solid[16:48, 16:48] = (20, 200, 240)
    return [grad, rng.integers(0, 256, (80, 80, 3), dtype=np.uint8), solid,
            rng.integers(0, 256, (120, 60, 3), dtype=np.uint8)]


def tiny_yaml(base: Path) -> dict:
    from importlib.resources import files

    import yaml

    cfg = yaml.safe_load(files("hpsv3").joinpath("config/HPSv3_7B.yaml").read_text())
    cfg.update(model_name_or_path=str(base), torch_dtype="float32", bf16=False, fp16=False,
               disable_flash_attn2=True, gradient_checkpointing=False)
    cfg.pop("deepspeed", None)
    return cfg


def build_base(base: Path, gen) -> None:
    """Tokenizer + processor files + a random tiny Qwen2-VL (transformers 4.45 flat config)."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    from tests.support import build_tiny_vlm as tv

    base.mkdir(parents=True, exist_ok=True)
    tok, special = tv.build_tokenizer(base, random.Random(SEED))
    # transformers 4.45 reads a processor's chat template from chat_template.json only.
    (base / "chat_template.json").write_text(json.dumps({"chat_template": tv.CHAT_TEMPLATE}, indent=2))
    (base / "preprocessor_config.json").write_text(json.dumps(IMAGE_PROCESSOR, indent=2))
    vocab = ((tok.get_vocab_size() + 63) // 64) * 64  # like Qwen's padded vocab; HPSv3 resizes to the tokenizer
    config = Qwen2VLConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=8192, rope_theta=1000000.0,
        rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}, tie_word_embeddings=False,
        vision_config={"depth": 2, "embed_dim": 32, "hidden_size": 64, "mlp_ratio": 2, "num_heads": 2,
                       "in_channels": 3, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
        image_token_id=special["<|image_pad|>"], video_token_id=special["<|video_pad|>"],
        vision_start_token_id=special["<|vision_start|>"], vision_end_token_id=special["<|vision_end|>"],
        bos_token_id=special["<|endoftext|>"], eos_token_id=special["<|im_end|>"],
        pad_token_id=special["<|endoftext|>"], torch_dtype="float32",
    )
    config.architectures = ["Qwen2VLForConditionalGeneration"]
    model = Qwen2VLForConditionalGeneration(config)
    _randomize(model, gen, 0.02)
    model.save_pretrained(str(base), safe_serialization=True)


def _randomize(model, gen, std: float) -> None:
    import torch

    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "norm" in name:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * std)


def build(out: Path) -> dict:
    import torch
    import yaml
    from hpsv3 import HPSv3RewardInferencer
    from hpsv3.train import create_model_and_processor
    from hpsv3.utils.parser import (
        DataConfig,
        ModelConfig,
        PEFTLoraConfig,
        TrainingConfig,
        parse_args_with_yaml,
    )
    from safetensors.torch import save_file

    torch.manual_seed(SEED)
    torch.set_num_threads(1)  # bit-stable reductions for the references
    gen = torch.Generator().manual_seed(SEED)
    base = out / "base"
    build_base(base, gen)
    cfg_path = out / "HPSv3_tiny.yaml"
    cfg_path.write_text(yaml.safe_dump(tiny_yaml(base), sort_keys=False))

    # The reward model as HPSv3 builds it (special token added, embeddings resized, ranknet head).
    (_, training_args, model_config, lora_config), _ = parse_args_with_yaml(
        (DataConfig, TrainingConfig, ModelConfig, PEFTLoraConfig), str(cfg_path), is_train=False)
    model, processor, _ = create_model_and_processor(model_config, lora_config, training_args)
    _randomize(model, gen, 0.08)
    with torch.no_grad():  # a wider head so mu and log-sigma spread over a few units across items
        for layer in model.rm_head:
            if isinstance(layer, torch.nn.Linear):
                layer.weight.mul_(4.0)
    model.eval()
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out / "HPSv3.safetensors"), metadata={"format": "pt"})

    from PIL import Image

    images = test_images()
    (out / "images").mkdir(exist_ok=True)
    paths = []
    for i, img in enumerate(images):
        paths.append(str(out / "images" / f"{i}.png"))
        Image.fromarray(img).save(paths[-1])
    np.savez(out / "images.npz", *images)

    # In-memory reference: the model before saving, one item per forward, the package's inputs.
    shell = HPSv3RewardInferencer.__new__(HPSv3RewardInferencer)
    shell.processor, shell.use_special_tokens, shell.device = processor, True, "cpu"
    in_memory = []
    with torch.no_grad():
        for img, prompt in zip(images, PROMPTS):
            batch = shell.prepare_batch([Image.fromarray(img)], [prompt])
            in_memory.append([float(x) for x in model(return_dict=True, **batch)["logits"][0]])
            n_tokens = int(batch["input_ids"].shape[1])
    # Package reference: its documented usage on the saved files, all items in one batch.
    inferencer = HPSv3RewardInferencer(config_path=str(cfg_path), checkpoint_path=str(out / "HPSv3.safetensors"),
                                       device="cpu")
    with torch.no_grad():
        package = inferencer.reward(paths, PROMPTS).float().tolist()
        lengths = inferencer.prepare_batch(paths, PROMPTS)["attention_mask"].sum(1).tolist()
    ref = {"prompts": PROMPTS, "in_memory": in_memory, "package": package, "token_lengths": lengths,
           "last_item_tokens": n_tokens, "base": "base", "config": cfg_path.name, "checkpoint": "HPSv3.safetensors"}
    # cached files record paths relative to the entry (tests/support/tiny_cache.py)
    cfg_path.write_text(yaml.safe_dump(tiny_yaml(Path("base")), sort_keys=False))
    (out / "reference.json").write_text(json.dumps(ref, indent=2))
    assert all(math.isfinite(v) for row in package for v in row)
    assert len(set(lengths)) > 1, "prompts must differ in length so batches are padded"
    return ref


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", type=Path)
    args = p.parse_args(argv)
    ref = build(args.out_dir.resolve())
    print(json.dumps({k: ref[k] for k in ("in_memory", "package", "token_lengths")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
