"""Build small CLIP-family models offline with the real libraries, for head tests and the bench.

Run under the heads venv: `.venv-heads/bin/python -m tests.support.tiny_heads OUT_DIR [--size tiny|base]`.
Writes to OUT_DIR:
  openclip_cfg/jg-tiny-clip.json   an open_clip model config (registered by `model_config_file`)
  openclip.pt                      its random weights as {"state_dict": ...} (the HPS layout)
  hf_clip/                         a transformers CLIPModel + CLIPProcessor (tokenizer built from
                                   open_clip's BPE file, the same vocabulary as OpenAI CLIP)
  images/*.png, reference.json     test images and the scores of the in-memory models
                                   (before saving), computed straight from the library calls
`base` gives ViT-B/32-sized models (for throughput numbers on a CPU), `h14` ViT-H-14-sized ones
(PickScore / HPSv2 at full size, ~8 GB on disk, for GPU numbers); `tiny` takes ~1 s.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

PROMPTS = ["a red bicycle", "a photo of a cat", "a sign that says \"hello\""]
SIZES = {
    "tiny": {"embed": 32, "v_width": 64, "v_layers": 2, "image": 64, "patch": 16,
             "t_width": 32, "t_layers": 2, "t_heads": 2, "hf_image": 32, "hf_patch": 8},
    "base": {"embed": 512, "v_width": 768, "v_layers": 12, "image": 224, "patch": 32,
             "t_width": 512, "t_layers": 12, "t_heads": 8, "hf_image": 224, "hf_patch": 32},
    # ViT-H-14 shapes (PickScore_v1 / HPSv2's tower, ~1B parameters): for GPU throughput only.
    "h14": {"embed": 1024, "v_width": 1280, "v_layers": 32, "v_head_width": 80, "image": 224, "patch": 14,
            "t_width": 1024, "t_layers": 24, "t_heads": 16, "hf_image": 224, "hf_patch": 14},
}
OPENCLIP_NAME = "jg-tiny-clip"


def _bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def build_clip_tokenizer_files(out: Path) -> tuple[Path, Path]:
    """vocab.json + merges.txt of OpenAI CLIP, from the BPE file open_clip ships."""
    import open_clip.tokenizer as oct

    bpe = Path(oct.default_bpe())
    merges = gzip.open(bpe).read().decode("utf-8").split("\n")[1 : 49152 - 256 - 2 + 1]
    pairs = [tuple(m.split()) for m in merges]
    vocab = list(_bytes_to_unicode().values())
    vocab = vocab + [v + "</w>" for v in vocab] + ["".join(p) for p in pairs]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "vocab.json").write_text(json.dumps({tok: i for i, tok in enumerate(vocab)}))
    (out / "merges.txt").write_text("#version: 0.2\n" + "\n".join(" ".join(p) for p in pairs) + "\n")
    return out / "vocab.json", out / "merges.txt"


def test_images(out: Path, n: int = 6) -> list[np.ndarray]:
    images = []
    (out / "images").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        rng = np.random.default_rng(100 + i)
        h, w = 40 + 8 * i, 72 - 4 * i  # mixed aspect ratios exercise resize/crop/pad
        arr = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        Image.fromarray(arr).save(out / "images" / f"{i}.png")
        images.append(arr)
    return images


def build_openclip(out: Path, s: dict, images: list[np.ndarray]) -> dict:
    import open_clip

    cfg = {"embed_dim": s["embed"],
           "vision_cfg": {"image_size": s["image"], "layers": s["v_layers"], "width": s["v_width"],
                          "patch_size": s["patch"], "head_width": s.get("v_head_width", 64)},
           "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": s["t_width"],
                        "heads": s["t_heads"], "layers": s["t_layers"]}}
    cfg_path = out / "openclip_cfg" / f"{OPENCLIP_NAME}.json"
    cfg_path.parent.mkdir(parents=True, exist_ok=True)
    cfg_path.write_text(json.dumps(cfg))
    open_clip.add_model_config(cfg_path)
    torch.manual_seed(0)
    model, _, preprocess = open_clip.create_model_and_transforms(OPENCLIP_NAME, pretrained=None)
    model.eval()
    torch.save({"state_dict": {f"module.{k}": v for k, v in model.state_dict().items()}}, out / "openclip.pt")
    tok = open_clip.get_tokenizer(OPENCLIP_NAME)
    pad = open_clip.image_transform(model.visual.image_size, is_train=False, resize_mode="longest", fill_color=0)
    ref: dict[str, list] = {"clip_open_clip": [], "hpsv2": []}
    with torch.no_grad():
        t = model.encode_text(tok(PROMPTS))
        t = t / t.norm(dim=-1, keepdim=True)
        for name, tf in (("clip_open_clip", preprocess), ("hpsv2", pad)):
            for arr in images:
                e = model.encode_image(tf(Image.fromarray(arr))[None])
                e = e / e.norm(dim=-1, keepdim=True)
                ref[name].append((e @ t.T)[0].tolist())  # [prompt] cosines
    return ref


def build_hf(out: Path, s: dict, images: list[np.ndarray]) -> dict:
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer

    vocab, merges = build_clip_tokenizer_files(out / "tokenizer_src")
    import transformers

    if int(transformers.__version__.split(".")[0]) >= 5:  # tokenizers-backed: takes the data
        tokenizer = CLIPTokenizer(vocab=json.loads(vocab.read_text()),
                                  merges=[tuple(m.split()) for m in merges.read_text().splitlines()[1:]])
    else:  # transformers 4.x: the slow tokenizer reads the files
        tokenizer = CLIPTokenizer(vocab_file=str(vocab), merges_file=str(merges))
    ids = tokenizer("a red bicycle")["input_ids"]
    if ids != [49406, 320, 736, 11652, 49407]:  # OpenAI CLIP's ids (open_clip agrees)
        raise RuntimeError(f"the CLIP tokenizer built offline is wrong: {ids}")
    image_processor = CLIPImageProcessor(size={"shortest_edge": s["hf_image"]},
                                         crop_size={"height": s["hf_image"], "width": s["hf_image"]})
    processor = CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer)
    config = CLIPConfig(
        text_config={"vocab_size": 49408, "hidden_size": s["t_width"], "intermediate_size": 4 * s["t_width"],
                     "num_hidden_layers": s["t_layers"], "num_attention_heads": s["t_heads"],
                     "max_position_embeddings": 77, "bos_token_id": 49406, "eos_token_id": 49407,
                     "pad_token_id": 49407},
        vision_config={"hidden_size": s["v_width"], "intermediate_size": 4 * s["v_width"],
                       "num_hidden_layers": s["v_layers"], "num_attention_heads": max(1, s["v_width"] // s.get("v_head_width", 64)),
                       "image_size": s["hf_image"], "patch_size": s["hf_patch"]},
        projection_dim=s["embed"],
    )
    torch.manual_seed(0)
    model = CLIPModel(config).eval()
    with torch.no_grad():
        model.logit_scale.fill_(np.log(80.0))  # not the init value, so the test sees it is loaded
    model.save_pretrained(out / "hf_clip")
    processor.save_pretrained(out / "hf_clip")
    ref: dict[str, list] = {"hf_cosine": [], "logit_scale_exp": float(model.logit_scale.detach().exp())}
    with torch.no_grad():
        # The model's forward computes the logits itself: an independent path from the head's.
        inputs = processor(text=PROMPTS, images=[Image.fromarray(a) for a in images], return_tensors="pt",
                           padding=True)
        logits = model(**inputs).logits_per_image / model.logit_scale.exp()
        ref["hf_cosine"] = logits.tolist()
    return ref


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--size", choices=list(SIZES), default="tiny")
    args = ap.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    s = SIZES[args.size]
    images = test_images(out)
    ref = {"prompts": PROMPTS, "size": args.size}
    ref |= build_openclip(out, s, images)
    ref |= build_hf(out, s, images)
    (out / "reference.json").write_text(json.dumps(ref, indent=1))
    print(f"built {args.size} heads in {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
