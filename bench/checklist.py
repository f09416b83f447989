"""A 10-probe checklist against one yes/no judge on the same images, through the Gateway
(in-process) on one vLLM: backend calls, prompt tokens, vLLM's prefix-cache and multimodal-cache
hits (from its /metrics) and wall time, per side.

The checklist (`image_checklist@1`) asks 10 one-token questions per image, each with the image
first and no system prompt, so its 10 requests share every token up to the question: the image is
encoded once per request (media/cache.py), sent to one replica (media affinity), and its tokens
are computed once in vLLM's prefix cache. The yes/no judge (`image_quality@1`) asks one question
with the same layout. Both sides see the same pictures; the checklist's copy differs in one pixel,
so no cache entry of the other side serves it (the same bytes would flatter whichever runs second).
Each round uses new pictures and runs the yes/no side first.

    .venv/bin/python bench/checklist.py --images 32 --rounds 3
    .venv/bin/python bench/checklist.py --base-url http://gpu:8010/v1 --model Qwen/Qwen3-VL-8B-Instruct

Without --base-url it starts the tiny CPU vLLM serving the tiny Qwen3-VL (as the tests build it)
with a 32-token KV block (--cpu-block-size; vLLM's CPU platform defaults to 128 tokens, longer than
the ~55 tokens the probes share, so its prefix cache could never hit; its attention takes only
multiples of 32).
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _support import natural_clip, score_images, vllm_counters  # noqa: E402  (bench/_support.py: nothing imported from the tests)

from judge_gateway.config import validate_config  # noqa: E402
from judge_gateway.gateway import Gateway  # noqa: E402
from judge_gateway.media import ImageMedia  # noqa: E402

SIDES = {"yes/no": ("yes_no", "image_quality@1"), "checklist": ("checklist", "image_checklist@1")}
COUNTERS = ("request_success", "prompt_tokens", "prefix_cache_queries", "prefix_cache_hits", "mm_cache_queries",
            "mm_cache_hits")


def images(n: int, size: int, seed: int, flip: bool) -> list[ImageMedia]:
    out = []
    for frame in natural_clip(n, size, size, seed=seed):
        if flip:
            frame = frame.copy()
            frame[0, 0] ^= 1  # one pixel: another image to every cache, the same picture to the judge
        buf = io.BytesIO()
        Image.fromarray(frame).save(buf, format="PNG")
        out.append(ImageMedia.validate(buf.getvalue()))
    return out


def rate(hits: float, queries: float) -> str:
    return f"{hits / queries:6.1%} of {queries:7.0f}" if queries else "   n/a"


async def main_async(args: argparse.Namespace, base_url: str) -> None:
    cfg = validate_config({
        "backends": {"vlm": {"model": args.model, "base_urls": [base_url], "max_concurrency": 256, "timeout_s": 600}},
        "judges": {name: {"kind": kind, "backend": "vlm", "template": ref} for name, (kind, ref) in SIDES.items()},
    })
    gateway = Gateway(cfg)
    for name in SIDES:  # warm-up: the server's first requests, on pictures no round uses
        await score_images(gateway, [name], images(2, args.size, seed=999, flip=name == "checklist"), args.concurrency)
    print(f"{args.images} images of {args.size}x{args.size} per side and round, {args.concurrency} concurrent, "
          f"model {args.model} at {base_url}")
    walls: dict[str, list[float]] = {name: [] for name in SIDES}
    for rnd in range(args.rounds):
        for name in SIDES:
            imgs = images(args.images, args.size, seed=100 + rnd, flip=name == "checklist")
            before = await vllm_counters(base_url)
            wall, invalid = await score_images(gateway, [name], imgs, args.concurrency)
            after = await vllm_counters(base_url)
            d = {k: after.get(f"vllm:{k}_total", 0.0) - before.get(f"vllm:{k}_total", 0.0) for k in COUNTERS}
            walls[name].append(wall)
            print(f"round {rnd + 1}  {name:9s}: {wall:7.2f} s  {d['request_success']:5.0f} calls "
                  f"({d['request_success'] / args.images:4.1f} per image, {invalid} invalid scores)  "
                  f"{d['prompt_tokens'] / max(d['request_success'], 1):5.1f} prompt tokens per call   "
                  f"prefix cache hits {rate(d['prefix_cache_hits'], d['prefix_cache_queries'])} tokens   "
                  f"mm cache hits {rate(d['mm_cache_hits'], d['mm_cache_queries'])} images", flush=True)
    await gateway.aclose()
    one, ten = statistics.fmean(walls["yes/no"]), statistics.fmean(walls["checklist"])
    print(f"checklist (10 probes) / yes/no (1 question) wall time over the same {args.images} images: "
          f"{ten / one:.2f}x (mean of {args.rounds} rounds; 10.00x = nothing shared)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", help="an existing vLLM /v1 URL (default: start the tiny CPU vLLM, Qwen3-VL)")
    p.add_argument("--model", default="Qwen/Qwen3-VL-8B-Instruct")
    p.add_argument("--images", type=int, default=32)
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cpu-block-size", type=int, default=32,
                   help="the CPU vLLM's KV block size (default 32, the smallest its attention takes); 0 keeps "
                   "vLLM's CPU default of 128")
    args = p.parse_args()
    from _support import run_on_vllm

    run_on_vllm(main_async, args, extra=f"--block-size {args.cpu_block_size}" if args.cpu_block_size else "",
                tiny="qwen3vl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
