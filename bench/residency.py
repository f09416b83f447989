"""Colocated heads (`judges.NAME.residency = "colocated"`) on this machine's device.

heads  One open_clip `clip` and one transformers `pickscore` head sleep and wake --cycles times
       through the gateway (in process, real worker processes). Per head: its weights' bytes, what
       its worker held and gave back (the RSS read from /proc on the CPU; on a GPU also
       `torch.cuda.mem_get_info` before and after, from the worker's facts), the median sleep and
       wake seconds, and whether the first batch after every wake equals the batch scored before
       the first sleep, bit for bit. The RSS freed is split into the heap (a model loaded by copy:
       open_clip's torch.load) and mapped files (transformers maps a safetensors model: of those
       pages, only the ones resident when it slept count, and the kernel may drop clean file pages
       of a resident model too under memory pressure).
grpo   A GRPO-shaped loop through the service's routes (in process, httpx's ASGI transport): per
       step a rollout burst (one request of --groups groups of --group-size images, one prompt per
       group, as a trainer sends its batch), then a "train" pause of --train-s seconds of CPU-bound numpy work in this process,
       before which the colocated run tells the gateway to sleep (POST /v1/residency, waited for:
       the trainer needs its memory back before it trains); the next burst wakes the judge. The
       same loop with the judge resident is the reference, in the same run (a step of each in turn,
       so the machine's load drifts alike for both). Prints each
       mode's mean step time and their ratio, and whether every score is identical (a burst is one
       batch: see `judges`).

Models: random-weight CLIP built offline by tests/support/tiny_heads.py (`--size base`:
ViT-B/32-sized, ~600 MB per model in fp32; `tiny` for a smoke run; `h14`: ViT-H-14 shapes for a
GPU), run as a command (bench/_support.py).

    .venv/bin/python bench/residency.py heads --size base --cycles 5
    .venv/bin/python bench/residency.py grpo --size base --steps 6 --train-s 3
    # on a GPU (the heads offload to pinned host memory at level 1):
    .venv/bin/python bench/residency.py heads --size h14 --device cuda --dtype bf16 --cycles 5
    .venv/bin/python bench/residency.py grpo --size h14 --device cuda --dtype bf16 --steps 6
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from _support import tiny_judge  # noqa: E402  (bench/_support.py: nothing imported from the tests)

from judge_gateway.config import validate_config  # noqa: E402
from judge_gateway.gateway import Gateway  # noqa: E402
from judge_gateway.schema import RewardRequest  # noqa: E402
from judge_gateway.server import create_app  # noqa: E402

MB = 1 << 20
PROMPTS = ["a red bicycle leaning on a brick wall", "a cat asleep on a windowsill", "a lighthouse at dusk",
           "a bowl of ramen, top view", "a sign that says \"open\"", "two dogs running on a beach"]


def rss(pid: int | None) -> dict[str, int]:
    """A process's resident set and its parts (heap, mapped files), in bytes, from /proc."""
    keys = {"VmRSS:": "total", "RssAnon:": "anon", "RssFile:": "file"}
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except (OSError, TypeError):
        return {}
    return {keys[f[0]]: int(f[1]) * 1024 for f in (ln.split() for ln in lines) if f and f[0] in keys}


def judges(args: argparse.Namespace, residency: dict[str, Any] | str, batch: int) -> dict[str, Any]:
    """clip and pickscore whose batch closes when it holds `batch` images (the wait is a margin): a
    request's images, decoded on threads, reach the worker at times that vary, and on the CPU a row's
    result moves by ~1e-6 with the size of its batch, between two resident runs as well; one batch
    per request makes the runs comparable bit for bit."""
    out = {}
    for head in ("clip", "pickscore"):
        entry = tiny_judge(head, args.size, device=args.device, dtype=args.dtype, max_batch_size=batch,
                           max_wait_ms=10_000)
        out[head] = {**entry, "residency": residency}
    return out


def images(n: int, size: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(buf, format="PNG")
        out.append(buf.getvalue())
    return out


def mb(value: float | None) -> str:
    return "-" if value is None else f"{value / MB:.1f}"


async def bench_heads(args: argparse.Namespace) -> None:
    colocated = {"mode": "colocated", "idle_sleep_s": None, "level": args.level}
    gw = Gateway(validate_config({"judges": judges(args, colocated, args.batch)}))
    names = list(gw.judges)
    request = RewardRequest(samples=[{"prompt": PROMPTS[i % len(PROMPTS)], "image": img}
                                     for i, img in enumerate(images(args.batch, args.image_size, 0))], judges=names)
    try:
        first = await gw.score(request)
        before = {n: [r.scores[n].raw for r in first.results] for n in names}
        rows: dict[str, dict[str, list[float]]] = {n: {"sleep": [], "wake": [], "freed": [], "anon": [], "file": []}
                                                    for n in names}
        held: dict[str, dict[str, int]] = {}
        facts: dict[str, dict[str, Any]] = {}
        identical = True
        for _ in range(args.cycles):
            pids = {n: gw.judges[n].worker.pid for n in names}
            held = {n: rss(pids[n]) for n in names}
            slept = await gw.residency.sleep(names)
            for n in names:
                if slept[n]["outcome"] != "done":
                    raise SystemExit(f"{n}: the sleep did not happen: {slept[n]}")
                facts[n] = dict(gw.residency.info(n).last)
                rows[n]["sleep"].append(facts[n]["seconds"])
                after = rss(pids[n])
                if held[n] and after:
                    rows[n]["freed"].append(held[n]["total"] - after["total"])
                    rows[n]["anon"].append(held[n]["anon"] - after["anon"])
                    rows[n]["file"].append(held[n]["file"] - after["file"])
            again = await gw.score(request)  # wakes them: the first batch after the wake
            for n in names:
                rows[n]["wake"].append(gw.residency.info(n).last_wake_s or float("nan"))
                identical &= [r.scores[n].raw for r in again.results] == before[n]
        print(f"{args.cycles} sleep/wake cycles, device {args.device} ({args.dtype}), size {args.size}, level "
              f"{args.level}, batch of {args.batch} images after each wake")
        print(f"{'head':<10} {'method':<8} {'weights MB':>10} {'RSS held MB':>11} {'RSS freed MB':>12} "
              f"{'(heap':>6} {'files)':>6} {'sleep s':>8} {'wake s':>8} {'device freed MB':>15}")

        def median(values: list[float]) -> float | None:
            return statistics.median(values) if values else None

        for n in names:
            f, r = facts[n], rows[n]
            device = (f["device_free_after"] - f["device_free_before"]) if "device_free_after" in f else None
            print(f"{n:<10} {f.get('method', '-'):<8} {mb(f.get('weights_bytes')):>10} {mb(held[n].get('total')):>11} "
                  f"{mb(median(r['freed'])):>12} {mb(median(r['anon'])):>6} {mb(median(r['file'])):>6} "
                  f"{statistics.median(r['sleep']):>8.3f} {statistics.median(r['wake']):>8.3f} {mb(device):>15}")
        print(f"first batch after every wake identical to the batch before the first sleep: {identical}")
    finally:
        await gw.aclose()


def busy(seconds: float) -> None:
    """The trainer's update: CPU-bound work for `seconds`."""
    a = np.random.default_rng(0).standard_normal((384, 384), dtype=np.float32)
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        a = np.tanh(a @ a.T / 384.0)


class Trainer:
    """One GRPO-shaped loop's side of the service: a gateway (resident or colocated judges) behind
    its routes, in process."""

    def __init__(self, args: argparse.Namespace, mode: str) -> None:
        self.args, self.mode = args, mode
        residency: dict[str, Any] | str = "resident" if mode == "resident" else {
            "mode": "colocated", "idle_sleep_s": None, "level": args.level}
        self.gw = Gateway(validate_config({"judges": judges(args, residency, args.groups * args.group_size)}))
        self.app = create_app(self.gw)
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://localhost",
                                      timeout=600)
        self.steps: list[dict[str, float]] = []
        self.scores: list[list[float]] = []

    async def rollout(self, step: int) -> list[float]:
        """One request of the step's groups (one prompt per group), its raw scores in order."""
        args, samples = self.args, []
        for g in range(args.groups):
            for img in images(args.group_size, args.image_size, seed=1000 * (step + 1) + g):
                samples.append({"prompt": PROMPTS[g % len(PROMPTS)], "group_id": f"{step}-{g}",
                                "image": "data:image/png;base64," + base64.b64encode(img).decode()})
        r = await self.http.post("/v1/rewards", json={"samples": samples, "group_transform": "zscore"})
        r.raise_for_status()
        return [s["scores"][n]["raw"] for s in r.json()["results"] for n in sorted(s["scores"])]

    async def step(self, step: int) -> None:
        t0 = time.monotonic()
        got = await self.rollout(step)  # a colocated judge wakes at its first image
        t1 = time.monotonic()
        if self.mode == "colocated":  # the trainer's one call: its memory back before the update
            r = await self.http.post("/v1/residency", json={"action": "sleep"})
            if r.status_code != 200:
                raise SystemExit(f"the sleep was not done: {r.status_code} {r.text}")
        t2 = time.monotonic()
        busy(self.args.train_s)
        t3 = time.monotonic()
        self.steps.append({"rollout": t1 - t0, "sleep": t2 - t1, "train": t3 - t2, "step": t3 - t0})
        self.scores.append(got)

    async def aclose(self) -> None:
        await self.http.aclose()
        await self.app.state.cosmos_rl.aclose()
        await self.gw.aclose()


async def bench_grpo(args: argparse.Namespace) -> None:
    """Both loops side by side, a step of each in turn (the order alternating), so a change of the
    machine's load hits both alike."""
    trainers = {mode: Trainer(args, mode) for mode in ("resident", "colocated")}
    try:
        for t in trainers.values():
            await t.gw.residency.start()
            await t.rollout(-1)  # loads the models
        for step in range(args.steps):
            order = list(trainers.values()) if step % 2 == 0 else list(trainers.values())[::-1]
            for t in order:
                await t.step(step)
    finally:
        for t in trainers.values():
            await t.aclose()
    print(f"GRPO-shaped loop: {args.steps} steps of {args.groups} groups x {args.group_size} images "
          f"({args.image_size} px) on clip + pickscore, then {args.train_s:g} s of training; device "
          f"{args.device} ({args.dtype}), size {args.size}, level {args.level}; the two loops' steps in turn; "
          f"means over steps 2..{args.steps}")
    print(f"{'mode':<10} {'rollout s':>9} {'sleep s':>8} {'train s':>8} {'step s':>8}")
    means = {}
    for mode, t in trainers.items():
        kept = t.steps[1:] if len(t.steps) > 1 else t.steps

        def mean(key: str, kept: list[dict[str, float]] = kept) -> float:
            return statistics.fmean(x[key] for x in kept)

        means[mode] = mean("step")
        print(f"{mode:<10} {mean('rollout'):>9.3f} {mean('sleep'):>8.3f} {mean('train'):>8.3f} {mean('step'):>8.3f}")
    colocated = trainers["colocated"].gw
    wakes = [colocated.residency.info(n).last_wake_s for n in colocated.residency.by_judge]
    print(f"step time colocated / resident: {means['colocated'] / means['resident']:.3f} (last wakes: "
          + ", ".join(f"{w:.3f} s" for w in wakes if w is not None) + ")")
    print(f"scores identical in every step: {trainers['colocated'].scores == trainers['resident'].scores}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["heads", "grpo"])
    ap.add_argument("--size", default="base", help="tiny | base | h14 (tests/support/tiny_heads.py)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--level", type=int, default=1, choices=[1, 2])
    ap.add_argument("--cycles", type=int, default=5, help="heads: sleep/wake cycles")
    ap.add_argument("--batch", type=int, default=8, help="heads: images scored after each wake")
    ap.add_argument("--steps", type=int, default=6, help="grpo: training steps")
    ap.add_argument("--groups", type=int, default=4, help="grpo: groups (prompts) per rollout")
    ap.add_argument("--group-size", type=int, default=8, help="grpo: images per group")
    ap.add_argument("--train-s", type=float, default=3.0, help="grpo: seconds of the trainer's update")
    ap.add_argument("--image-size", type=int, default=224)
    args = ap.parse_args()
    asyncio.run(bench_heads(args) if args.what == "heads" else bench_grpo(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
