"""The "add a reward" guide's test data, built under the heads venv (torch): the custom head's small
torch model (SharpnessNet, seeded), the inputs, and every example class's numbers when called
directly, the way its own framework calls it (reference.json). The tests send the same inputs
through the gateway and compare.

    python -m tests.support.tiny_byo OUT --examples-digest SHA
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples" / "byo"
PEERS = ROOT / "tests" / "support" / "peers"
PROMPTS = ["a red apple on a table", "a city street at night", "a blurry cat", "a mountain lake",
           "a bowl of soup", "a bicycle"]
VIDEO_FPS = 8.0


def make_images() -> np.ndarray:
    """Six 40x48 RGB images from sharp noise to a flat colour, of varied brightness: uint8 [6, 40, 48, 3]."""
    rng = np.random.default_rng(24)
    out = np.zeros((6, 40, 48, 3), dtype=np.uint8)
    ramp = np.linspace(0, 1, 48)[None, :, None]
    for i in range(6):
        noise = rng.random((40, 48, 3))
        base = 0.1 * i + ramp * rng.random(3)[None, None, :] * 0.4
        smooth = i / 5.0  # 0: all noise (sharp), 1: no noise
        out[i] = np.clip(255 * (base + (1 - smooth) * 0.5 * noise), 0, 255).astype(np.uint8)
    return out


def make_videos() -> np.ndarray:
    """Two 5-frame 32x32 videos (a moving bar, a fading noise field): uint8 [2, 5, 32, 32, 3]."""
    rng = np.random.default_rng(7)
    out = np.zeros((2, 5, 32, 32, 3), dtype=np.uint8)
    for t in range(5):
        out[0, t, :, 4 * t:4 * t + 8] = (250, 200, 40)
        out[1, t] = (rng.random((32, 32, 3)) * (255 - 40 * t)).astype(np.uint8)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--examples-digest", required=True, help="hash of docs/examples/byo (the cache key)")
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    sys.path[:0] = [str(EXAMPLES / "rewards"), str(PEERS)]
    import torch
    from PIL import Image

    from cosmos_handlers import ContrastReward
    from ff_rewards import BrightnessRank, Colorfulness
    from judge_gateway.heads.custom import HeadContext, Item
    from sharpness import SharpnessHead, SharpnessNet

    torch.manual_seed(0)
    torch.save(SharpnessNet().state_dict(), out / "sharpness.pt")
    images, videos = make_images(), make_videos()
    np.save(out / "images.npy", images)
    np.save(out / "videos.npy", videos)
    ref: dict = {"prompts": PROMPTS, "video_fps": VIDEO_FPS}

    # The custom head, as the worker drives it: built, loaded, scored (one call per sample here).
    context = HeadContext(name="sharpness", kind="custom", device="cpu", dtype="fp32", max_batch_size=16)
    head = SharpnessHead(SharpnessHead.Options(checkpoint=str(out / "sharpness.pt")), context)
    head.load()
    ref["sharpness_images"] = [head.score([Item(p, "image", im)])[0].raw for p, im in zip(PROMPTS, images)]
    ref["sharpness_videos"] = [head.score([Item(p, "video", v, fps=VIDEO_FPS)])[0].raw
                               for p, v in zip(PROMPTS, videos)]

    # Flow-Factory: built with its config and accelerator, called with a batch's keyword lists.
    config = SimpleNamespace(device=torch.device("cpu"), dtype=torch.float32, batch_size=16, scale=100.0)
    accelerator = SimpleNamespace(device=torch.device("cpu"))
    pil = [Image.fromarray(im) for im in images]
    colorful = Colorfulness(config, accelerator)
    ref["colorful_images"] = torch.as_tensor(colorful(prompt=PROMPTS, image=pil).rewards, dtype=torch.float32).tolist()
    frames = [[Image.fromarray(f) for f in v] for v in videos]
    ref["colorful_videos"] = torch.as_tensor(colorful(prompt=PROMPTS[:2], video=frames).rewards,
                                             dtype=torch.float32).tolist()
    rank = BrightnessRank(config, accelerator)
    tensors = [torch.from_numpy(im.astype(np.float32) / 255.0).permute(2, 0, 1) for im in images]
    ref["brightness_rank_groups"] = [  # groups: samples 0-2 and 3-5
        torch.as_tensor(rank(prompt=PROMPTS[g:g + 3], image=tensors[g:g + 3]).rewards, dtype=torch.float32).tolist()
        for g in (0, 3)]

    # cosmos-rl: built with its keyword arguments, set_up(), one calculate_reward per batch.
    handler = ContrastReward(model_path="", download_path="", device="cpu", dtype="float32", threshold=0.2)
    handler.set_up()
    ref["contrast_images"] = handler.calculate_reward(torch.from_numpy(images), {"prompts": PROMPTS})["scores"]
    video_batch = torch.from_numpy(videos).permute(0, 4, 1, 2, 3).contiguous()  # [B, C, T, H, W]
    ref["contrast_videos"] = handler.calculate_reward(video_batch, {"prompts": PROMPTS[:2]})["scores"]
    (out / "reference.json").write_text(json.dumps(ref, indent=1))


if __name__ == "__main__":
    main()
