"""What judging a GRPO group by comparison costs against pointwise yes/no, in one run on one vLLM:
calls, prompt tokens, generated tokens and wall time per group of 8, vLLM's prefix-cache and
multimodal-cache hit rates, and the gateway's own CPU per call.

Modes, each on groups of `--group-size` new images (an image cached by an earlier mode would
flatter a later one), the groups scored one request at a time:

- pointwise: `image_quality@1` (yes/no, one token), one call per sample;
- all pairs / circular k=2 / Swiss 3 rounds: `pairwise_yes_no@1` (one token, RewardDance's
  format), both orders of every pair;
- all pairs, chain of thought: `unified_reward_think@1` (Pref-GRPO's prompt), both orders, the
  reply capped at `--think-tokens` (a real UnifiedReward-Think writes ~300-700 tokens before its
  answer; the tiny model writes noise, so its verdicts are unparsable and its cost is the point).

The group deadline is set out of reach (an hour): the bench measures what a group costs, not
what a deadline cuts.

    .venv/bin/python bench/comparative.py --groups 4 --rounds 2
    .venv/bin/python bench/comparative.py --base-url http://gpu:8005/v1 --model Qwen/Qwen2.5-VL-7B-Instruct

Without --base-url it starts the tiny CPU vLLM (scripts/start_vllm.sh --cpu) as the tests do, with a
32-token KV block (vLLM's CPU default of 128 is longer than the shared image prefix; see
bench/k_judges.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _support import png_images, vllm_counters  # noqa: E402  (bench/_support.py: nothing imported from the tests)

from judge_gateway.config import validate_config  # noqa: E402
from judge_gateway.gateway import Gateway  # noqa: E402
from judge_gateway.media import ImageMedia  # noqa: E402  (types)
from judge_gateway.schema import RewardRequest, SampleInput  # noqa: E402

PROMPT = "a fox reading a newspaper in a sunlit kitchen"


def modes(group_size: int, think_tokens: int) -> dict[str, dict]:
    def comparative(template: str, **options) -> dict:
        return {"kind": "comparative", "backend": "vlm", "template": template,
                "options": {"budget": 10_000, "max_group_size": group_size, "group_deadline_s": 3600, **options}}

    return {
        "pointwise yes/no": {"kind": "yes_no", "backend": "vlm", "template": "image_quality@1"},
        "all pairs": comparative("pairwise_yes_no@1"),
        "circular k=2": comparative("pairwise_yes_no@1", schedule="circular", circular_k=2),
        "swiss 3 rounds": comparative("pairwise_yes_no@1", schedule="swiss", swiss_rounds=3),
        "all pairs, CoT": comparative("unified_reward_think@1", max_tokens=think_tokens),
    }


def delta(before: dict[str, float], after: dict[str, float], name: str) -> float:
    return after.get(f"vllm:{name}", 0.0) - before.get(f"vllm:{name}", 0.0)


def rate(before: dict[str, float], after: dict[str, float], kind: str) -> str:
    queries = delta(before, after, f"{kind}_queries_total")
    hits = delta(before, after, f"{kind}_hits_total")
    return f"{hits / queries:5.1%}" if queries else "  n/a"


async def run_mode(gateway: Gateway, judge: str, groups: list[list[ImageMedia]]) -> tuple[list[float], int, float]:
    """Each group scored as one request, one after the other: (walls, invalid cells, gateway CPU s)."""
    walls, invalid = [], 0
    cpu = time.process_time()
    for g, imgs in enumerate(groups):
        request = RewardRequest(samples=[SampleInput(prompt=PROMPT, image=img, group_id=str(g)) for img in imgs],
                                judges=[judge])
        started = time.perf_counter()
        response = await gateway.score(request)
        walls.append(time.perf_counter() - started)
        invalid += sum(not r.scores[judge].valid for r in response.results)
    return walls, invalid, time.process_time() - cpu


async def main_async(args: argparse.Namespace, base_url: str) -> None:
    table = modes(args.group_size, args.think_tokens)
    cfg = validate_config({
        "backends": {"vlm": {"model": args.model, "base_urls": [base_url], "max_concurrency": 256, "timeout_s": 600}},
        "judges": table,
    })
    gateway = Gateway(cfg)
    await run_mode(gateway, "all pairs", [png_images(args.group_size, args.size, seed=999)])  # warm-up
    print(f"groups of {args.group_size} images of {args.size}x{args.size}, {args.groups} groups per mode and "
          f"round, one group at a time; model {args.model} at {base_url}")
    rows: dict[str, list[dict]] = {name: [] for name in table}
    for rnd in range(args.rounds):
        for m, name in enumerate(table):
            groups = [png_images(args.group_size, args.size, seed=10_000 * rnd + 100 * m + g) for g in range(args.groups)]
            before = await vllm_counters(base_url)
            walls, invalid, cpu = await run_mode(gateway, name, groups)
            after = await vllm_counters(base_url)
            calls = delta(before, after, "request_success_total")
            row = {"wall": statistics.fmean(walls), "calls": calls / args.groups,
                   "prompt": delta(before, after, "prompt_tokens_total") / args.groups,
                   "generated": delta(before, after, "generation_tokens_total") / args.groups,
                   "prefix": rate(before, after, "prefix_cache"), "mm": rate(before, after, "mm_cache"),
                   "cpu_ms_per_call": 1000 * cpu / calls if calls else float("nan"), "invalid": invalid}
            rows[name].append(row)
            print(f"round {rnd + 1}  {name:18s} {row['wall']:7.2f} s/group  {row['calls']:5.0f} calls  "
                  f"{row['prompt']:8.0f} prompt tok  {row['generated']:6.0f} gen tok  prefix hits {row['prefix']}  "
                  f"mm hits {row['mm']}  gateway CPU {row['cpu_ms_per_call']:.2f} ms/call  {invalid} invalid",
                  flush=True)
    await gateway.aclose()
    base = statistics.fmean(r["wall"] for r in rows["pointwise yes/no"])
    base_tokens = statistics.fmean(r["prompt"] for r in rows["pointwise yes/no"])
    print(f"\nper group of {args.group_size}, mean of {args.rounds} rounds x {args.groups} groups "
          "(ratios against pointwise yes/no in the same run):")
    print("| mode | calls | prompt tokens | generated tokens | wall s | wall / pointwise | prompt tokens / pointwise "
          "| prefix-cache hits | mm-cache hits | gateway CPU ms/call |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, runs in rows.items():
        wall = statistics.fmean(r["wall"] for r in runs)
        prompt = statistics.fmean(r["prompt"] for r in runs)
        print(f"| {name} | {statistics.fmean(r['calls'] for r in runs):.0f} | {prompt:.0f} | "
              f"{statistics.fmean(r['generated'] for r in runs):.0f} | {wall:.2f} | {wall / base:.1f}x | "
              f"{prompt / base_tokens:.1f}x | {', '.join(r['prefix'].strip() for r in runs)} | "
              f"{', '.join(r['mm'].strip() for r in runs)} | "
              f"{statistics.fmean(r['cpu_ms_per_call'] for r in runs):.2f} |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", help="an existing vLLM /v1 URL (default: start the tiny CPU vLLM)")
    p.add_argument("--model", default="Qwen/Qwen2.5-VL-7B-Instruct")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--think-tokens", type=int, default=32, help="the chain-of-thought reply's cap (max_tokens)")
    p.add_argument("--cpu-block-size", type=int, default=32, help="the CPU vLLM's KV block size (0: vLLM's default)")
    p.add_argument("--wait-timeout", type=int, default=240, help="seconds the started CPU vLLM may take to be healthy")
    args = p.parse_args()
    from _support import run_on_vllm

    run_on_vllm(main_async, args, extra=f"--block-size {args.cpu_block_size}" if args.cpu_block_size else "",
                wait_timeout=args.wait_timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
