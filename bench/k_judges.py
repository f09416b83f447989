"""k judges on one image: 3 yes/no judges over the same images against 1 judge, through the
Gateway (in-process) on one vLLM, with vLLM's prefix-cache hit rate from its /metrics.

The three judges (`image_quality@1`, `vqa_alignment@1`, `flow_factory_beautiful@1`) put the image
before their question and send no system prompt, so the 3 requests of one image share every
token up to the question: the image is sent once per request (the same bytes: one encode per
request, media/cache.py), its tokens are computed once in vLLM's prefix cache, and the backend
sends all three to one replica (media-hash affinity, backends.py). Each round uses new images
(a cached image from an earlier round would flatter the 3-judge side) and runs 1 judge then 3.

    .venv/bin/python bench/k_judges.py --images 64 --rounds 3
    .venv/bin/python bench/k_judges.py --base-url http://gpu:8005/v1 --model Qwen/Qwen2.5-VL-7B-Instruct

Without --base-url it starts the tiny CPU vLLM (scripts/start_vllm.sh --cpu) as the tests do, with
a 32-token KV block (--cpu-block-size): the CPU platform's default block of 128 tokens is longer
than the prefix the judges share, which kept the prefix cache at 0% hits. That model sees an image
as at most ~64 tokens, so most of its cost per request is not the prefill.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _support import png_images as images, score_images, vllm_counters  # noqa: E402  (bench/_support.py: nothing imported from the tests)

from judge_gateway.config import validate_config  # noqa: E402
from judge_gateway.gateway import Gateway  # noqa: E402

JUDGES = {"image_quality": "image_quality@1", "alignment": "vqa_alignment@1",
          "beautiful": "flow_factory_beautiful@1"}


def hit_rate(before: dict[str, float], after: dict[str, float], kind: str) -> str:
    queries = after.get(f"vllm:{kind}_queries_total", 0.0) - before.get(f"vllm:{kind}_queries_total", 0.0)
    hits = after.get(f"vllm:{kind}_hits_total", 0.0) - before.get(f"vllm:{kind}_hits_total", 0.0)
    return f"{hits / queries:6.1%} of {queries:.0f}" if queries else "   n/a"


async def main_async(args: argparse.Namespace, base_url: str) -> None:
    cfg = validate_config({
        "backends": {"vlm": {"model": args.model, "base_urls": [base_url], "max_concurrency": 256, "timeout_s": 600}},
        "judges": {name: {"kind": "yes_no", "backend": "vlm", "template": ref} for name, ref in JUDGES.items()},
    })
    gateway = Gateway(cfg)
    warm = images(4, args.size, seed=999)
    await score_images(gateway, list(JUDGES), warm, args.concurrency)
    kinds = sorted({k.removeprefix("vllm:").removesuffix("_queries_total")
                    for k in await vllm_counters(base_url) if k.endswith("_queries_total")})
    print(f"{args.images} images of {args.size}x{args.size} per run, {args.concurrency} concurrent, model "
          f"{args.model} at {base_url}; vLLM caches: {', '.join(kinds) or 'none reported'}")
    walls: dict[int, list[float]] = {1: [], 3: []}
    for rnd in range(args.rounds):
        for k in (1, 3):
            imgs = images(args.images, args.size, seed=100 * rnd + k)
            before = await vllm_counters(base_url)
            wall, invalid = await score_images(gateway, list(JUDGES)[:k], imgs, args.concurrency)
            after = await vllm_counters(base_url)
            walls[k].append(wall)
            rates = "   ".join(f"{kind} hits {hit_rate(before, after, kind)}" for kind in kinds)
            print(f"round {rnd + 1}  {k} judge{'s' if k > 1 else ' '}: {wall:7.2f} s  "
                  f"({args.images * k / wall:6.1f} judgements/s, {invalid} invalid)   {rates}", flush=True)
    await gateway.aclose()
    one, three = statistics.fmean(walls[1]), statistics.fmean(walls[3])
    print(f"3 judges / 1 judge wall time over the same {args.images} images: {three / one:.2f}x "
          f"(mean of {args.rounds} rounds; 3.00x = no sharing)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", help="an existing vLLM /v1 URL (default: start the tiny CPU vLLM)")
    p.add_argument("--model", default="Qwen/Qwen2.5-VL-7B-Instruct")
    p.add_argument("--images", type=int, default=64)
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cpu-block-size", type=int, default=32,
                   help="the CPU vLLM's KV block size (default 32): vLLM's CPU platform defaults to 128 "
                   "tokens, more than the ~64-token image prefix the judges share, so its prefix cache "
                   "could never hit (GPUs default to 16); 0 keeps vLLM's default")
    args = p.parse_args()
    # bench/_support.py: the tiny VLM (built and cached as the tests do) unless --base-url
    from _support import run_on_vllm

    run_on_vllm(main_async, args, extra=f"--block-size {args.cpu_block_size}" if args.cpu_block_size else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
