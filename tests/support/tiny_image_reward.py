"""Build a tiny ImageReward checkpoint offline with the `image-reward` package's own classes, in
the released layout, plus the package's own scores for test pairs.

Run under the ImageReward venv (the tests go through heads_env.build_tiny_image_reward, cached):
`.venv-imagereward/bin/python -m tests.support.tiny_image_reward OUT_DIR [--size tiny|vitl|full]`.
Sizes: `tiny` (the tests: a tiny vision tower, 8.8 M parameters), `vitl` (the package's own
ViT-L/16, unpatched, with the small text encoder: the released construction path, 311 M),
`full` (ImageReward-v1.0's architecture, 447 M: the benchmark).
Writes to OUT_DIR:
  tokenizer/        a BERT WordPiece tokenizer (lowercase, vocab.txt built here: BERT's specials,
                    the test prompts' words, letters/digits/punctuation and their ## forms, so any
                    prompt tokenizes without [UNK]); the package adds its [DEC] / [ENC] tokens
  med_config.json   BLIP's med BERT config: hidden 768 (ImageReward.__init__ hard-codes MLP(768)),
                    2 layers, 4 heads, intermediate 64, cross-attention, vocab = the tokenizer's;
                    `full`: ImageReward-v1.0's (12 layers, 12 heads, 3072, vocab 30524)
  vit.json          the vision tower's sizes, for the head's `vit` option (tiny: 32 wide, 2 blocks,
                    2 heads, patch 16 at 224 px); `vitl` and `full`: null (the package's ViT-L/16)
  ImageReward.pt    `ImageReward.state_dict()` with random weights (keys `blip.visual_encoder.*`,
                    `blip.text_encoder.*`, `blip.vision_proj/text_proj.*`, `mlp.layers.*`), as the
                    released ImageReward.pt; the MLP gets larger random weights than the package's
                    init so that scores differ visibly between pairs
  images/N.png, reference.json
                    test images (several sizes and aspects) and, for every (prompt, image) pair,
                    the score of the package's own `ImageReward.load(ImageReward.pt, med_config=...)`
                    + `model.score(prompt, PIL image)` (tiny: all 20 pairs; vitl: 2 images x
                    2 prompts, ~1 s each on a CPU; full: none)

The package hard-codes the `bert-base-uncased` tokenizer and `vit='large'`: the tokenizer is
redirected during construction with the head's own `package_redirects`, and so is the vision
tower for `tiny` only; nothing else is patched.
"""

from __future__ import annotations

import argparse
import json
import os
import string
import sys
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SEED = 2417
TINY_VIT = {"embed_dim": 32, "depth": 2, "num_heads": 2, "patch_size": 16}
PROMPTS = [
    "a red apple on a wooden table",
    "A photo of a cat, sitting on the mat!",
    ("an astronaut riding a horse on the moon, highly detailed digital painting, trending on artstation, "
     "sharp focus, octane render, 8k, cinematic lighting, by a famous painter and his many friends"),
    "two dogs",
]
EXTRA_WORDS = ["photo", "picture", "image", "the", "of", "and", "in", "with", "object", "number", "square",
               "noise", "colourful", "blue", "green", "sky", "sign", "says", "hello", "world"]


def sample_images() -> list[np.ndarray]:
    """Deterministic images of several sizes: the package's Resize/CenterCrop see each case."""
    rng = np.random.default_rng(SEED)
    h, w = 224, 224
    yy, xx = np.mgrid[0:h, 0:w]
    grad = np.stack([(xx * 255 // w), (yy * 255 // h), np.full_like(xx, 96)], -1).astype(np.uint8)
    return [
        grad,                                                             # exactly 224
        rng.integers(0, 256, (256, 320, 3), dtype=np.uint8),              # landscape, downscaled
        rng.integers(0, 256, (300, 180, 3), dtype=np.uint8),              # portrait
        np.kron(rng.integers(0, 256, (12, 16, 3)), np.ones((10, 10, 1))).astype(np.uint8),  # 120x160, upscaled
        rng.integers(0, 256, (256, 320, 3), dtype=np.uint8),              # same size as #1 (a cosmos batch)
    ]


def build_vocab() -> list[str]:
    words: set[str] = set(EXTRA_WORDS)
    for p in PROMPTS:
        words.update(p.lower().translate(str.maketrans(string.punctuation, " " * len(string.punctuation))).split())
    chars = list(string.ascii_lowercase + string.digits)
    punct = list(string.punctuation)
    return (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + punct + chars + ["##" + c for c in chars]
            + sorted(words - set(chars)))


def med_config(vocab_size: int, size: str) -> dict:
    common = {"architectures": ["BertModel"], "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
              "hidden_dropout_prob": 0.1, "hidden_size": 768, "initializer_range": 0.02,
              "layer_norm_eps": 1e-12, "model_type": "bert", "pad_token_id": 0, "type_vocab_size": 2,
              "encoder_width": 768, "add_cross_attention": True}
    if size == "full":  # ImageReward-v1.0's med_config.json
        return {**common, "intermediate_size": 3072, "max_position_embeddings": 512, "num_attention_heads": 12,
                "num_hidden_layers": 12, "vocab_size": 30524}
    return {**common, "intermediate_size": 64, "max_position_embeddings": 64, "num_attention_heads": 4,
            "num_hidden_layers": 2, "vocab_size": vocab_size}


def build(out: Path, size: str) -> dict:
    import importlib

    import ImageReward as RM
    import torch
    from PIL import Image
    from transformers import BertTokenizer

    from judge_gateway.heads.models.image_reward import package_redirects

    ir_module = importlib.import_module("ImageReward.ImageReward")
    torch.manual_seed(SEED)
    out.mkdir(parents=True, exist_ok=True)
    tok_dir = out / "tokenizer"
    tok_dir.mkdir(exist_ok=True)
    (tok_dir / "vocab.txt").write_text("\n".join(build_vocab()) + "\n")
    BertTokenizer(str(tok_dir / "vocab.txt"), do_lower_case=True).save_pretrained(str(tok_dir))
    vit = TINY_VIT if size == "tiny" else None

    # The package's tokenizer (with its [DEC]/[ENC]) decides the vocabulary size.
    with package_redirects(str(tok_dir), vit):
        from ImageReward.models.BLIP.blip import init_tokenizer

        n_vocab = len(init_tokenizer())
    cfg_path = out / "med_config.json"
    cfg_path.write_text(json.dumps(med_config(n_vocab, size), indent=2))
    (out / "vit.json").write_text(json.dumps(vit))

    with package_redirects(str(tok_dir), vit):
        model = ir_module.ImageReward(med_config=str(cfg_path), device="cpu")
    with torch.no_grad():
        # The package's inits make every score nearly the same (MLP std 1/769: ~ -mean/std) and
        # the image's effect small (BERT std 0.02 cross-attention): larger random weights there,
        # so that a mixed-up pair or a wrong image shows in the scores.
        layers = [m for n, m in model.blip.text_encoder.named_modules() if "crossattention" in n]
        for layer in [*model.mlp.layers, *layers]:
            if isinstance(layer, torch.nn.Linear):
                layer.weight.normal_(0.0, 1.5 / layer.in_features ** 0.5)
                layer.bias.normal_(0.0, 0.1)
    torch.save(model.state_dict(), out / "ImageReward.pt")
    params = sum(p.numel() for p in model.parameters())
    del model

    images = sample_images()
    (out / "images").mkdir(exist_ok=True)
    for i, im in enumerate(images):
        Image.fromarray(im).save(out / "images" / f"{i}.png")
    ref: dict = {"prompts": PROMPTS, "vit": vit, "params": params, "size": size}
    n_images, n_prompts = {"tiny": (len(images), len(PROMPTS)), "vitl": (2, 2), "full": (0, 0)}[size]
    if n_images:
        # The reference: the package's own loader and its own single-pair score function.
        with package_redirects(str(tok_dir), vit):
            loaded = RM.load(str(out / "ImageReward.pt"), device="cpu", med_config=str(cfg_path))
        with torch.inference_mode():
            ref["scores"] = [[loaded.score(p, Image.open(out / "images" / f"{i}.png")) for p in PROMPTS[:n_prompts]]
                             for i in range(n_images)]
    (out / "reference.json").write_text(json.dumps(ref, indent=1))
    return ref


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--size", choices=["tiny", "vitl", "full"], default="tiny")
    args = ap.parse_args()
    ref = build(args.out, args.size)
    print(f"ImageReward ({args.size}, {ref['params'] / 1e6:.1f} M parameters) written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
