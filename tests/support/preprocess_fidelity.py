"""How far `preprocess = "device"` lands from the reference transform, per CLIP-family head.

Run under the heads venv: `python -m tests.support.preprocess_fidelity MODELS_DIR [IMAGE ...]`
(MODELS_DIR from tiny_heads.py, any size). Loads each head twice in this process (device and
reference mode, same weights), preprocesses natural-looking images both ways (colour gradients,
rendered text, the photos given as arguments, a small image that is upscaled) and, separately,
noise (the worst case for resampling), and prints JSON: per head and image set the worst pixel
difference (normalised units), the lowest image-embedding cosine and the largest |delta raw| over
three prompts. Also: reference mode's raw scores against the library reference of
tiny_heads.py (reference.json), and which processes and threads ran the reference transform.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import numpy as np
import torch

from judge_gateway.heads.factory import build_head
from judge_gateway.heads.models.clip import PreparedBatch
from tests.support.heads_env import head_judges, load_test_images
from tests.support.natural_media import gradients, noise, photos, rendered_text

PROMPTS = ["a red bicycle", "a photo of a cat", 'a sign that says "hello"']


def compare(dev, ref, images: list[np.ndarray]) -> dict:
    with torch.inference_mode():
        p_dev, p_ref = dev.stage.pixels(dev.stage.prepare(images)), ref.stage.pixels(ref.stage.prepare(images))
        e_dev, e_ref = ref.embed_images(images, p_dev), ref.embed_images(images, p_ref)
        cos = (e_dev * e_ref).sum(-1)
        raws = []
        for prompt in PROMPTS:
            a = ref.infer(images, [prompt] * len(images), PreparedBatch(p_dev, None))
            b = ref.infer(images, [prompt] * len(images), PreparedBatch(p_ref, None))
            raws += [abs(x["raw"] - y["raw"]) for x, y in zip(a, b)]
    return {"images": len(images), "max_pixel_diff": float((p_dev.float() - p_ref.float()).abs().max()),
            "min_cosine": float(cos.min()), "max_abs_delta_raw": max(raws)}


def prepared_text(head, images: list[np.ndarray]) -> dict:
    """The text rows made in `prepare` (the worker's stager thread) against those looked up in
    `infer`: the same scores, and `infer` encodes nothing when it is handed them."""
    prompts = ["a prompt first seen by prepare"] * len(images)
    before = head.text_cache.encode_calls
    prepared = head.prepare(images, prompts)
    in_prepare = head.text_cache.encode_calls - before
    a = head.infer(images, prompts, prepared)
    in_infer = head.text_cache.encode_calls - before - in_prepare
    head.text_cache = type(head.text_cache)(head.text_cache.capacity)  # empty: infer encodes again
    b = head.infer(images, prompts, PreparedBatch(head.stage.prepare(images), None))
    return {"encodes_in_prepare": in_prepare, "encodes_in_infer": in_infer,
            "max_abs_delta_raw": max(abs(x["raw"] - y["raw"]) for x, y in zip(a, b))}


def main(argv: list[str]) -> int:
    models = Path(argv[0])
    sets = {"natural": gradients() + rendered_text() + photos(argv[1:]), "noise": noise()}
    reference = json.loads((models / "reference.json").read_text())
    judges = head_judges(models)
    out: dict = {"heads": {}}
    threads_before = {t.name for t in threading.enumerate()}
    for name, key in (("clip", "clip_open_clip"), ("clip_hf", "hf_cosine"), ("pickscore", "hf_cosine"),
                      ("hpsv2", "hpsv2")):
        kind, options = head_judges_kind(judges[name])
        dev = build_head(kind, {**options, "preprocess": "device"})
        ref = build_head(kind, {**options, "preprocess": "reference", "preprocess_processes": 1})
        dev_facts, ref_facts = dev.load(), ref.load()
        row = {set_name: compare(dev, ref, imgs) for set_name, imgs in sets.items()}
        # Reference mode against the library's own scores of the saved model's test images.
        imgs = load_test_images(models)
        scale = reference["logit_scale_exp"] if kind == "pickscore" else 1.0
        worst = 0.0
        for j, prompt in enumerate(reference["prompts"]):
            got = ref.infer(imgs, [prompt] * len(imgs))
            worst = max(worst, *(abs(g["raw"] - scale * reference[key][i][j]) for i, g in enumerate(got)))
        row["reference_vs_library"] = worst
        row["prepared_text"] = prepared_text(dev, imgs)
        row["modes"] = [dev_facts["preprocess_mode"], ref_facts["preprocess_mode"]]
        row["reference_pids"] = sorted(ref.stage.pids)
        dev.close()
        ref.close()
        out["heads"][name] = row
    out["pid"] = os.getpid()
    out["new_threads"] = sorted({t.name for t in threading.enumerate()} - threads_before)
    print(json.dumps(out, indent=1))
    return 0


def head_judges_kind(judge: dict) -> tuple[str, dict]:
    options = {k: v for k, v in judge["options"].items() if k not in ("python", "env")}
    return judge["kind"], options


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
