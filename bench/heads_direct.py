"""The model's own limits, for bench/heads.py: run under the heads venv (it needs torch).

    python bench/heads_direct.py forward KIND OPTIONS_JSON --batch B[,B2...] --seconds S
        the bare image-tower forward of a head (the same loader, weights, device, dtype and
        attention as its worker) on already-preprocessed input: images/s at each batch size.
    python bench/heads_direct.py infer image_reward|hpsv3 OPTIONS_JSON --batch B[,B2...] --seconds S
        the model's whole forward (both towers) on input already preprocessed and on the device:
        ImageReward's BLIP ViT + text encoder; HPSv3's Qwen2-VL on a prebuilt batch.
    python bench/heads_direct.py prepare hpsv3|videoalign OPTIONS_JSON --batch B --seconds S
            [--image-size N] [--frames F]
        a batch's preprocessing alone, up to the model's input on its device (videoalign's
        `reference` batch is copied there as its forward would), in both modes
        (`reference`: the library's own transform; `device`: tensor ops on the head's device):
        items/s of each (an item is an image, or a video of F frames of N x N for videoalign).
    python bench/heads_direct.py flow_factory MODEL_DIR PROCESSOR_DIR --dtype fp32|bf16 --device D
        Flow-Factory's in-trainer PickScore way on the same weights: per batch of 32 uint8 images,
        PIL images -> CLIPProcessor (images and the 32 prompts) -> CLIPModel image and text
        features -> exp(logit_scale) x cosine, on one thread of control: images/s.

Each prints one JSON line: {"images_per_s": ...} ({"B": images/s, ...} for forward).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from judge_gateway.heads.factory import build_head  # noqa: E402

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(step, device: torch.device, items: int, seconds: float, warmup: int = 2) -> float:
    for _ in range(warmup):
        step()
    _sync(device)
    n, t0 = 0, time.perf_counter()
    while True:
        step()
        n += items
        if n >= 2 * items:  # at least two timed steps
            _sync(device)
            if time.perf_counter() - t0 >= seconds:
                break
    return n / (time.perf_counter() - t0)


def bare_forward(kind: str, options: dict, batches: list[int], seconds: float) -> dict[str, float]:
    # Device mode spawns no preprocessing processes; the model is what it measures.
    head = build_head(kind, {**options, "preprocess": "device"})
    head.load()
    size = head.stage.geometry.size
    rates = {}
    try:
        for batch in batches:
            pixels = torch.randn(batch, 3, size, size, device=head.device).to(head.dtype)

            def step(pixels: torch.Tensor = pixels) -> None:
                with torch.inference_mode():
                    head._encode_image(pixels)

            rates[str(batch)] = _timed(step, head.device, batch, seconds)
        return rates
    finally:
        head.close()


def bare_infer(kind: str, options: dict, batches: list[int], seconds: float, image_size: int) -> dict[str, float]:
    """image_reward / hpsv3: the model's whole forward (image and text towers) on input already
    preprocessed and on the device, at each batch size (prompts distinct within a batch)."""
    head = build_head(kind, {**options, **({"preprocess": "device"} if kind == "image_reward" else {})})
    head.load()
    rng = np.random.default_rng(0)
    rates = {}
    try:
        for batch in batches:
            arrays = [rng.integers(0, 256, (image_size, image_size, 3), dtype=np.uint8) for _ in range(batch)]
            prompts = [f"a photo of object number {i}" for i in range(batch)]
            if kind == "hpsv3":
                from PIL import Image

                with torch.inference_mode():
                    inputs = head.inferencer.prepare_batch([Image.fromarray(a) for a in arrays], prompts)

                def step(inputs: dict = inputs) -> None:
                    with torch.inference_mode():
                        head.inferencer.model(return_dict=True, **inputs)["logits"].float().cpu()
            else:
                prepared = head.prepare(arrays)

                def step(arrays: list = arrays, prompts: list = prompts, prepared=prepared) -> None:
                    head.infer(arrays, prompts, prepared)

            rates[str(batch)] = _timed(step, torch.device(options.get("device", "cpu")), batch, seconds)
        return rates
    finally:
        head.close()


def flow_factory(model_dir: str, processor_dir: str, dtype: str, device: str, image_size: int,
                 batch: int, seconds: float) -> float:
    from PIL import Image
    from transformers import CLIPModel, CLIPProcessor

    dev = torch.device(device)
    processor = CLIPProcessor.from_pretrained(processor_dir)
    model = CLIPModel.from_pretrained(model_dir).eval().to(dev, DTYPES[dtype])
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 256, (image_size, image_size, 3), dtype=np.uint8) for _ in range(batch)]
    prompts = ["a photo of object number 1"] * batch

    def step() -> None:
        images = [Image.fromarray(a) for a in arrays]
        with torch.no_grad():
            pix = processor(images=images, return_tensors="pt")["pixel_values"].to(dev, DTYPES[dtype])
            tok = processor(text=prompts, padding=True, truncation=True, max_length=77, return_tensors="pt").to(dev)
            img = model.get_image_features(pixel_values=pix)
            txt = model.get_text_features(**tok)
            img = getattr(img, "pooler_output", img)
            txt = getattr(txt, "pooler_output", txt)
            img = img / img.norm(dim=-1, keepdim=True)
            txt = txt / txt.norm(dim=-1, keepdim=True)
            (model.logit_scale.exp() * (img * txt).sum(-1)).float().cpu()

    return _timed(step, dev, batch, seconds, warmup=1)


def prepare_rates(kind: str, options: dict, batch: int, seconds: float, image_size: int,
                  frames: int) -> dict[str, float]:
    """hpsv3 / videoalign: items/s of preparing a batch, per `preprocess` mode."""
    rng = np.random.default_rng(0)
    shape = (frames, image_size, image_size, 3) if kind == "videoalign" else (image_size, image_size, 3)
    items = [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(batch)]
    prompts = [f"a photo of object number {i}" for i in range(batch)]
    rates = {}
    for mode in ("reference", "device"):
        head = build_head(kind, {**options, "preprocess": mode})
        head.load()
        try:
            if kind == "hpsv3":
                make = head.device_batch if mode == "device" else head.reference_batch
            else:
                make = head.prepare

            device = torch.device(options.get("device", "cpu"))

            def step(make=make, device=device) -> None:
                with torch.inference_mode():
                    batch = make(items, prompts)
                    batch["pixel_values_videos" if kind == "videoalign" else "pixel_values"].to(device)

            rates[mode] = _timed(step, device, batch, seconds)
        finally:
            head.close()
    return rates


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    f = sub.add_parser("forward")
    f.add_argument("kind")
    f.add_argument("options")
    f.add_argument("--batch", required=True, help="batch sizes, comma-separated")
    f.add_argument("--seconds", type=float, default=5.0)
    p = sub.add_parser("flow_factory")
    p.add_argument("model_dir")
    p.add_argument("processor_dir")
    p.add_argument("--dtype", choices=list(DTYPES), default="fp32")
    p.add_argument("--device", default="cpu")
    p.add_argument("--image-size", type=int, default=512)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seconds", type=float, default=5.0)
    b = sub.add_parser("infer")
    b.add_argument("kind", choices=["image_reward", "hpsv3"])
    b.add_argument("options")
    b.add_argument("--batch", required=True, help="batch sizes, comma-separated")
    b.add_argument("--seconds", type=float, default=5.0)
    b.add_argument("--image-size", type=int, default=512)
    r = sub.add_parser("prepare")
    r.add_argument("kind", choices=["hpsv3", "videoalign"])
    r.add_argument("options")
    r.add_argument("--batch", type=int, default=8)
    r.add_argument("--seconds", type=float, default=5.0)
    r.add_argument("--image-size", type=int, default=1024)
    r.add_argument("--frames", type=int, default=8, help="videoalign: frames per video")
    d = sub.add_parser("device_name")
    d.add_argument("device")
    a = ap.parse_args()
    if a.what == "device_name":
        print(json.dumps({"name": torch.cuda.get_device_name(torch.device(a.device))}))
        return 0
    if a.what == "forward":
        rates = bare_forward(a.kind, json.loads(a.options), [int(b) for b in a.batch.split(",")], a.seconds)
        print(json.dumps({"images_per_s": rates}))
        return 0
    if a.what == "infer":
        rates = bare_infer(a.kind, json.loads(a.options), [int(b) for b in a.batch.split(",")], a.seconds,
                           a.image_size)
        print(json.dumps({"images_per_s": rates}))
        return 0
    if a.what == "prepare":
        rates = prepare_rates(a.kind, json.loads(a.options), a.batch, a.seconds, a.image_size, a.frames)
        print(json.dumps({"items_per_s": rates}))
        return 0
    rate = flow_factory(a.model_dir, a.processor_dir, a.dtype, a.device, a.image_size, a.batch, a.seconds)
    print(json.dumps({"images_per_s": rate}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
