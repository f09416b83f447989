"""Throughput of the local heads: images/s at max_batch_size 1..64 with C concurrent
single-image requests through the Gateway (in-process, the workers are real subprocesses).

max_batch_size = 1 is one-at-a-time scoring (no cross-request batching); larger values let the
worker batch items of concurrent requests. Models: random-weight ViT-B/32-sized CLIP (open_clip
for `clip` and `hpsv2`, transformers CLIPModel for `pickscore`) built offline by
tests/support/tiny_heads.py (`--size base`; `--size tiny` for a smoke run), the real RapidOCR.
`image_reward` (opt-in: `--heads image_reward`, worker under .venv-imagereward): `--size base` is
ImageReward-v1.0's full architecture (ViT-L/16 + 12-layer med BERT, 447 M parameters) with random
weights, `--size tiny` the test checkpoint (tests/support/tiny_image_reward.py); at full size on a
CPU it runs at most 16 requests.

    scripts/setup_heads.sh
    .venv/bin/python bench/heads.py                       # all heads, batch sizes 1..64, 64 requests
    .venv/bin/python bench/heads.py --heads clip --batch-sizes 1,64 --rounds 3
    scripts/setup_imagereward.sh
    .venv/bin/python bench/heads.py --heads image_reward --size base --batch-sizes 1,8 --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from judge_gateway.config import validate_config  # noqa: E402
from judge_gateway.gateway import Gateway  # noqa: E402
from judge_gateway.media import ImageMedia  # noqa: E402
from judge_gateway.schema import RewardRequest  # noqa: E402
from tests.support.heads_env import build_tiny_heads, head_judges, heads_python, text_image_png  # noqa: E402
from tests.support.tiny_image_reward import build_tiny_image_reward, image_reward_judge  # noqa: E402


def judge_config(head: str, models: Path | None, batch: int, wait_ms: float, threads: int | None) -> dict:
    common = {"max_batch_size": batch, "max_wait_ms": wait_ms if batch > 1 else 0.0, "threads": threads}
    if head == "ocr":
        return {"kind": "ocr", "options": {"python": str(heads_python()), **common}}
    assert models is not None
    if head == "image_reward":  # `models` is the ImageReward checkpoint dir
        return image_reward_judge(models, **common)
    return head_judges(models, **common)[head]


def max_requests(head: str, args: argparse.Namespace) -> int:
    if head == "ocr" or (head == "image_reward" and args.size == "base"):
        return min(args.requests, 16)  # ~1 s (OCR) / ~3-5 s (ViT-L) per image on a CPU
    return args.requests


def make_samples(head: str, n: int, size: int) -> list[dict]:
    if head == "ocr":
        img = ImageMedia.from_bytes(text_image_png("Hello World"))
        return [{"prompt": 'a sign that says "Hello World"', "image": img} for _ in range(n)]
    rng = np.random.default_rng(0)
    return [{"prompt": f"a photo of object number {i % 8}",  # GRPO-like: 8 prompts, 8 images each
             "image": ImageMedia.from_array(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))}
            for i in range(n)]


async def measure(head: str, models: Path | None, batch: int, args: argparse.Namespace) -> dict:
    cfg = {"judges": {head: judge_config(head, models, batch, args.max_wait_ms, args.threads)}}
    gw = Gateway(validate_config(cfg))
    worker = gw.judges[head].worker
    n = max_requests(head, args)
    samples = make_samples(head, n, args.image_size)
    for s in samples:  # decode outside the timed region, as a server's request parsing would
        s["image"].to_array()
    try:
        await worker.wait_ready()
        rates = []
        for round_ in range(args.rounds + 1):  # round 0 warms up
            t0 = time.perf_counter()
            responses = await asyncio.gather(*(
                gw.score(RewardRequest(samples=[s], judges=[head])) for s in samples))
            dt = time.perf_counter() - t0
            bad = [r for resp in responses for r in resp.results if not r.valid]
            if bad:
                raise RuntimeError(f"{head}: invalid scores in the benchmark: {bad[0].scores}")
            if round_:
                rates.append(len(samples) / dt)
        stats = await worker.stats()
    finally:
        await gw.aclose()
    mean_batch = stats["items"] / max(1, stats["batches"])
    return {"head": head, "max_batch_size": batch, "requests": n, "images_per_s": statistics.median(rates),
            "mean_batch": mean_batch}


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", default="clip,pickscore,hpsv2,ocr")
    ap.add_argument("--batch-sizes", default="1,2,4,8,16,32,64")
    ap.add_argument("--requests", type=int, default=64, help="concurrent single-image requests (OCR: at most 16)")
    ap.add_argument("--rounds", type=int, default=2, help="timed rounds after one warm-up round (median)")
    ap.add_argument("--max-wait-ms", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=None, help="torch/onnxruntime threads per worker")
    ap.add_argument("--image-size", type=int, default=512)
    ap.add_argument("--size", choices=["tiny", "base"], default="base",
                    help="CLIP family: ViT-B/32-sized or tiny; image_reward: full ImageReward-v1.0 size or tiny")
    args = ap.parse_args()
    heads = [h.strip() for h in args.heads.split(",") if h.strip()]
    batches = [int(b) for b in args.batch_sizes.split(",")]
    models = build_tiny_heads(args.size) if set(heads) - {"image_reward", "ocr"} else None
    ir_models = build_tiny_image_reward("full" if args.size == "base" else "tiny") if "image_reward" in heads else None
    print(f"# {os.cpu_count()} CPUs, model size {args.size}, {args.image_size}px images, "
          f"{args.requests} concurrent requests, max_wait_ms {args.max_wait_ms}")
    print(f"{'head':<12} {'max_batch':>9} {'requests':>8} {'images/s':>9} {'mean batch':>10} {'vs batch 1':>10}")
    for head in heads:
        base = None
        for batch in (batches if head != "ocr" else [b for b in batches if b in (1, 8)] or batches[:1]):
            row = await measure(head, ir_models if head == "image_reward" else models, batch, args)
            base = base or row["images_per_s"]
            print(f"{head:<12} {batch:>9} {row['requests']:>8} {row['images_per_s']:>9.1f} "
                  f"{row['mean_batch']:>10.1f} {row['images_per_s'] / base:>9.1f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
