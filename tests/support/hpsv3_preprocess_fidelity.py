"""How far the hpsv3 head's `preprocess = "device"` lands from the package's own prepare_batch.

Run under the hpsv3 venv: `python -m tests.support.hpsv3_preprocess_fidelity MODELS_DIR [IMAGE ...]`
(MODELS_DIR from tiny_hpsv3.py). Loads the head twice in this process (device and reference mode,
same weights), builds both batches for each image set (natural-looking: gradients, rendered text,
the photos given and their upscaled crops, the checkpoint's test images; noise), and prints JSON:
whether token ids, attention masks and image grids are identical, the worst pixel difference
(normalised units), the lowest PSNR of the device resize against the package's PIL resize (uint8
images), and the worst |delta mu| / |delta log sigma| of the model's outputs on the two batches
over three prompts, beside the spread of mu over the set (reference batches). Also what
`check_processor` says of the loaded processor and of copies it must refuse.
"""

from __future__ import annotations

import contextlib
import copy
import json
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from judge_gateway.heads.factory import build_head
from judge_gateway.heads.models.hpsv3 import IMAGE_FACTOR, IMAGE_PIXELS
from judge_gateway.heads.preprocess.qwen2_vl import check_processor
from judge_gateway.heads.preprocess.device import resize_uint8_levels
from tests.support.heads_env import hpsv3_judge
from tests.support.natural_media import gradients, noise, photos, psnr, rendered_text

PROMPTS = ["a red bicycle", "a photo of a cat", 'a sign that says "hello" in a long, detailed prompt']


def _outputs(head, batch: dict) -> torch.Tensor:
    return head.inferencer.model(return_dict=True, **batch)["logits"].float()


def psnr_db(image: np.ndarray, size: tuple[int, int]) -> float:
    """The device resize of one image against the package's PIL bicubic resize, both to uint8."""
    ref = np.asarray(Image.fromarray(image).resize((size[1], size[0]), Image.BICUBIC))
    x = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)[None].float()
    got = resize_uint8_levels(x, size)[0].permute(1, 2, 0).numpy().astype(np.uint8)
    return psnr(ref, got)


def compare(dev, ref, images: list[np.ndarray]) -> dict:
    sizes = [dev.smart_resize(im.shape[0], im.shape[1], min_pixels=IMAGE_PIXELS, max_pixels=IMAGE_PIXELS)
             for im in images]
    row = {"images": len(images), "ids_equal": True, "grid_equal": True, "max_pixel_diff": 0.0,
           "min_psnr_db": min(psnr_db(im, s) for im, s in zip(images, sizes)),
           "max_abs_delta_mu": 0.0, "max_abs_delta_log_sigma": 0.0, "mu_spread": 0.0}
    with torch.inference_mode():
        for prompt in PROMPTS:
            prompts = [prompt] * len(images)
            a, b = dev.device_batch(images, prompts), ref.reference_batch(images, prompts)
            row["ids_equal"] &= bool(torch.equal(a["input_ids"].cpu(), b["input_ids"].cpu())
                                     and torch.equal(a["attention_mask"].cpu(), b["attention_mask"].cpu()))
            row["grid_equal"] &= bool(torch.equal(a["image_grid_thw"].cpu(), b["image_grid_thw"].cpu()))
            if a["pixel_values"].shape != b["pixel_values"].shape:
                row["pixel_shapes"] = [list(a["pixel_values"].shape), list(b["pixel_values"].shape)]
                continue
            diff = (a["pixel_values"].float().cpu() - b["pixel_values"].float().cpu()).abs().max()
            row["max_pixel_diff"] = max(row["max_pixel_diff"], float(diff))
            out_a, out_b = _outputs(ref, a), _outputs(ref, b)
            row["mu_spread"] = max(row["mu_spread"], float(out_b[:, 0].max() - out_b[:, 0].min()))
            delta = (out_a - out_b).abs().amax(0)
            row["max_abs_delta_mu"] = max(row["max_abs_delta_mu"], float(delta[0]))
            row["max_abs_delta_log_sigma"] = max(row["max_abs_delta_log_sigma"], float(delta[1]))
    return row


def main(argv: list[str]) -> int:
    models = Path(argv[0])
    with np.load(models / "images.npz") as z:
        shipped = [z[f"arr_{i}"] for i in range(len(z.files))]
    sets = {"natural": gradients() + rendered_text() + photos(argv[1:]) + shipped, "noise": noise()}
    options = {k: v for k, v in hpsv3_judge(models, threads=2)["options"].items() if k != "python"}
    dev = build_head("hpsv3", {**options, "preprocess": "device"})
    ref = build_head("hpsv3", {**options, "preprocess": "reference"})
    with contextlib.redirect_stdout(sys.stderr):  # the package prints while it loads; stdout is the JSON
        facts = [dev.load()["preprocess_mode"], ref.load()["preprocess_mode"]]
    out = {"modes": facts, **{name: compare(dev, ref, imgs) for name, imgs in sets.items()}}
    processor = ref.inferencer.processor.image_processor
    refusals = {"loaded": check_processor(processor, IMAGE_FACTOR, IMAGE_PIXELS)}
    for name, change in (("rescale_1_127", {"rescale_factor": 1 / 127.5}), ("no_normalize", {"do_normalize": False}),
                         ("max_pixels_small", {"max_pixels": IMAGE_PIXELS // 4}), ("patch_16", {"patch_size": 16})):
        changed = copy.copy(processor)
        for key, value in change.items():
            setattr(changed, key, value)
        refusals[name] = check_processor(changed, IMAGE_FACTOR, IMAGE_PIXELS)
    out["check_processor"] = refusals
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
