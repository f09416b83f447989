"""Throughput of the local heads: images/s at max_batch_size 1..64 with C concurrent
single-image requests through the Gateway (in-process, the workers are real subprocesses), and
(`--load grpo|both`) under a GRPO-shaped load: --groups concurrent requests of --group-size images,
one new prompt per request. CLIP-family rows print the bare image-tower forward rate of the same
model at the same batch size, measured in the same run (bench/heads_direct.py under the heads
venv), and the fraction reached; with pickscore, Flow-Factory's in-trainer way (CLIPProcessor +
CLIPModel per batch of 32, fp32 and bf16) on the same weights follows. On a GPU, one command
builds the ViT-H-14-shaped models and prints the whole table: scripts/bench_heads_gpu.sh.

max_batch_size = 1 is one-at-a-time scoring (no cross-request batching); larger values let the
worker batch items of concurrent requests. Models: random-weight ViT-B/32-sized CLIP (open_clip
for `clip` and `hpsv2`, transformers CLIPModel for `pickscore`) built offline by
tests/support/tiny_heads.py (`--size base`; `--size tiny` for a smoke run; `--size h14` for
ViT-H-14 shapes on a GPU), the real RapidOCR, for `hpsv3` the tiny random Qwen2-VL HPSv3
checkpoint of tests/support/tiny_hpsv3.py (hidden 64, 2 layers: the numbers measure HPSv3's
pipeline, i.e. 448x448 resizing, Qwen2-VL preprocessing, ~1600-token prompts and 1024 vision
patches per image, not the cost of the 7B model), under .venv-hpsv3. `image_reward` (opt-in:
`--heads image_reward`, worker under .venv-imagereward): `--size base` is ImageReward-v1.0's full
architecture (ViT-L/16 + 12-layer med BERT, 447 M parameters) with random weights, otherwise the
test checkpoint (tests/support/tiny_image_reward.py); at full size on a CPU it runs at most 16
requests. `videoalign` scores 2-second 8 fps clips with the tiny VideoAlign checkpoint of
tests/support/tiny_videoalign.py (an item is a whole video: its column is videos/s), `gen_eval`
random images with a `counting` include on Mask2Former Swin-S with random weights under
.venv-geneval (tests/support/tiny_geneval.py; at most 8 requests, ~6 s per image on a CPU).

    scripts/setup_heads.sh && scripts/setup_hpsv3.sh
    .venv/bin/python bench/heads.py                       # all heads, batch sizes 1..64, 64 requests
    .venv/bin/python bench/heads.py --heads clip --batch-sizes 1,64 --rounds 3
    .venv/bin/python bench/heads.py --heads hpsv3 --batch-sizes 1,4,8 --requests 16
    scripts/setup_imagereward.sh
    .venv/bin/python bench/heads.py --heads image_reward --size base --batch-sizes 1,8 --rounds 1
    .venv/bin/python bench/heads.py --heads videoalign --batch-sizes 1,4,16 --requests 16
    .venv/bin/python bench/heads.py --heads hpsv3,videoalign --load prepare --batch-sizes 8 --image-size 1024
    scripts/setup_geneval.sh
    .venv/bin/python bench/heads.py --heads gen_eval --batch-sizes 1,4 --requests 8 --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from _support import (  # noqa: E402  (bench/_support.py: nothing imported from the tests)
    heads_python,
    moving_square_clip,
    python_path,
    tiny_judge,
    tiny_model,
)

from judge_gateway.config import validate_config  # noqa: E402
from judge_gateway.gateway import Gateway  # noqa: E402
from judge_gateway.media import ImageMedia, VideoMedia  # noqa: E402
from judge_gateway.prepare import text_image  # noqa: E402
from judge_gateway.schema import RewardRequest  # noqa: E402

CLIP_FAMILY = ("clip", "pickscore", "hpsv2")
STAGED_HEADS = (*CLIP_FAMILY, "image_reward")
DEVICE_PREPROCESS_HEADS = (*STAGED_HEADS, "hpsv3", "videoalign")  # take `--preprocess`


def judge_config(head: str, batch: int, args: argparse.Namespace) -> dict:
    common = {"max_batch_size": batch, "max_wait_ms": args.max_wait_ms if batch > 1 else 0.0,
              "threads": args.threads, "device": args.device, "dtype": args.dtype}
    if head in STAGED_HEADS and args.preprocess_processes:
        common["preprocess_processes"] = args.preprocess_processes
    if head in DEVICE_PREPROCESS_HEADS and args.preprocess:
        common["preprocess"] = args.preprocess
    if args.overlap is not None:
        common["overlap_preprocessing"] = args.overlap == "on"
    if args.transport is not None:
        common["transport"] = args.transport
    if args.pipeline_min_batch:
        common["pipeline_min_batch"] = args.pipeline_min_batch
    if head in CLIP_FAMILY:
        return tiny_judge(head, args.size, **common)
    if head == "image_reward":
        return tiny_judge(head, image_reward_size(args), **common)
    return tiny_judge(head, **common)  # ocr, hpsv3, videoalign, gen_eval: one size


def image_reward_size(args: argparse.Namespace) -> str:
    return "full" if args.size == "base" else "tiny"


def max_requests(head: str, args: argparse.Namespace) -> int:
    if head == "gen_eval":
        return min(args.requests, 8)  # Mask2Former Swin-S: ~6 s per image on a CPU
    if head in ("ocr", "hpsv3", "videoalign") or (head == "image_reward" and args.size == "base"):
        return min(args.requests, 16)  # ~1 s (OCR) / ~3-5 s (ViT-L) per image, long HPSv3 prompts on a CPU
    return args.requests


def make_samples(head: str, n: int, size: int) -> list[dict]:
    if head == "ocr":
        img = ImageMedia.from_array(text_image("Hello World"))
        return [{"prompt": 'a sign that says "Hello World"', "image": img} for _ in range(n)]
    rng = np.random.default_rng(0)
    if head == "videoalign":  # 2 s clips at 8 fps (the head samples them at the checkpoint's fps)
        return [{"prompt": f"a red square moves right, take {i % 8}",
                 "video": VideoMedia.from_array(moving_square_clip(8.0, h=size // 4, w=size // 4), fps=8.0)}
                for i in range(n)]
    if head == "gen_eval":
        return [{"prompt": "a photo of two dogs", "metadata": {"tag": "counting", "include": [{"class": "dog", "count": 2}]},
                 "image": ImageMedia.from_array(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))}
                for _ in range(n)]
    return [{"prompt": f"a photo of object number {i % 8}",  # GRPO-like: 8 prompts, 8 images each
             "image": ImageMedia.from_array(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))}
            for i in range(n)]


def grpo_requests(head: str, args: argparse.Namespace, round_: int) -> list[list[dict]]:
    """C requests of G images, each request one new prompt (a GRPO step: no text-cache hits)."""
    rng = np.random.default_rng(round_)
    images = [ImageMedia.from_array(rng.integers(0, 256, (args.image_size, args.image_size, 3), dtype=np.uint8))
              for _ in range(args.group_size)]
    for im in images:
        im.to_array()
    return [[{"prompt": f"step {round_} prompt {c}: a photo of object number {c}", "image": im} for im in images]
            for c in range(args.groups)]


async def measure(head: str, batch: int, args: argparse.Namespace, load: str = "single") -> dict:
    cfg = {"judges": {head: judge_config(head, batch, args)}}
    gw = Gateway(validate_config(cfg))
    worker = gw.judges[head].worker
    if load == "grpo":
        n = args.groups
        rounds = [grpo_requests(head, args, r) for r in range(args.rounds + 1)]
    else:
        n = max_requests(head, args)
        samples = make_samples(head, n, args.image_size)
        for s in samples:  # decode outside the timed region, as a server's request parsing would
            if "image" in s:
                s["image"].to_array()
        per = args.images_per_request
        rounds = [[samples[i : i + per] for i in range(0, n, per)]] * (args.rounds + 1)
    try:
        await worker.wait_ready()
        if load == "stream":
            return await measure_stream(head, gw, worker, batch, args)
        rates, cpu, cpu_img = [], [], []
        warm_stats: dict = {}
        for round_, requests in enumerate(rounds):  # round 0 warms up
            images = sum(len(r) for r in requests)
            t0, c0 = time.perf_counter(), time.process_time()
            responses = await asyncio.gather(*(
                gw.score(RewardRequest(samples=r, judges=[head])) for r in requests))
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            bad = [r for resp in responses for r in resp.results if not r.valid]
            if bad:
                raise RuntimeError(f"{head}: invalid scores in the benchmark: {bad[0].scores}")
            if round_:
                rates.append(images / dt)
                cpu.append(dc / len(requests))
                cpu_img.append(dc / images)
            else:
                warm_stats = await worker.stats()
        stats = await worker.stats()
        mode = worker.info.get("preprocess_mode", "-")
    finally:
        await gw.aclose()
    return {"head": head, "load": load, "preprocess": mode,
            "max_batch_size": batch, "requests": n, "images_per_s": statistics.median(rates),
            **worker_time(stats, warm_stats),
            # the gateway process's own CPU per request (the event loop + its decode threads)
            "gateway_cpu_ms": 1000 * statistics.median(cpu),
            "gateway_cpu_ms_per_image": 1000 * statistics.median(cpu_img)}


def worker_time(stats: dict, warm: dict) -> dict:
    """Where the worker's time went in the timed part (the warm-up's share subtracted)."""
    def delta(key: str) -> float:
        return float(stats.get(key, 0.0)) - float(warm.get(key, 0.0))
    items = max(1.0, delta("items"))
    return {"mean_batch": items / max(1.0, delta("batches")),
            "prepare_ms": 1000 * delta("prepare_s") / items,
            "infer_ms": 1000 * delta("infer_s") / items,
            # the image tower's own device time (CUDA events; CLIP family on a GPU, else 0)
            "gpu_ms": 1000 * delta("gpu_forward_s") / items}


async def measure_stream(head: str, gw: Gateway, worker, batch: int, args: argparse.Namespace) -> dict:
    """--groups clients, each sending requests of --group-size images back to back (a new prompt
    each) for --stream-seconds after one warm-up request each: the steady state, with no start or
    end of a step in the timed part."""
    rng = np.random.default_rng(1)
    images = [ImageMedia.from_array(rng.integers(0, 256, (args.image_size, args.image_size, 3), dtype=np.uint8))
              for _ in range(args.group_size)]
    for im in images:
        im.to_array()
    sent = [0] * args.groups

    async def one(client: int) -> int:
        sent[client] += 1
        request = RewardRequest(samples=[{"prompt": f"client {client} request {sent[client]}: object {client}",
                                          "image": im} for im in images], judges=[head])
        response = await gw.score(request)
        bad = [r for r in response.results if not r.valid]
        if bad:
            raise RuntimeError(f"{head}: invalid scores in the benchmark: {bad[0].scores}")
        return len(images)

    await asyncio.gather(*(one(c) for c in range(args.groups)))  # warm-up
    warm = await worker.stats()
    done = 0
    t0, c0 = time.perf_counter(), time.process_time()
    deadline = t0 + args.stream_seconds

    async def client(c: int) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            n = await one(c)  # not `done += await ...`: that reads `done` before the await
            done += n

    await asyncio.gather(*(client(c) for c in range(args.groups)))
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    stats = await worker.stats()
    requests = done // len(images)
    return {"head": head, "load": "stream", "preprocess": worker.info.get("preprocess_mode", "-"),
            "max_batch_size": batch, "requests": args.groups, "images_per_s": done / dt,
            **worker_time(stats, warm),
            "gateway_cpu_ms": 1000 * dc / max(1, requests), "gateway_cpu_ms_per_image": 1000 * dc / max(1, done)}


def heads_run(args: list[str], python: Path | None = None) -> dict:
    """bench/heads_direct.py under the heads venv (it needs torch), or `python`; its JSON line."""
    env = {**os.environ, "PYTHONPATH": python_path()}
    done = subprocess.run([str(python or heads_python()), str(ROOT / "bench" / "heads_direct.py"), *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"heads_direct.py {args[0]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def torch_device_name(args: argparse.Namespace) -> str:
    return heads_run(["device_name", args.device])["name"]


def bare_forward(head: str, batches: list[int], args: argparse.Namespace) -> dict[int, float]:
    """images/s of the head's bare image-tower forward at each batch size (one model load)."""
    options = tiny_judge(head, args.size, device=args.device, dtype=args.dtype, threads=args.threads)["options"]
    options = {k: v for k, v in options.items() if k not in ("python", "env") and v is not None}
    rates = heads_run(["forward", head, json.dumps(options), "--batch", ",".join(map(str, sorted(set(batches)))),
                       "--seconds", str(args.forward_seconds)])["images_per_s"]
    return {int(b): r for b, r in rates.items()}


def bare_infer(head: str, judge: dict, batches: list[int], args: argparse.Namespace) -> dict[int, float]:
    """image_reward / hpsv3: images/s of the model's whole forward on preprocessed input."""
    options = {k: v for k, v in judge["options"].items() if k not in ("python", "env") and v is not None}
    rates = heads_run(["infer", head, json.dumps(options), "--batch", ",".join(map(str, sorted(set(batches)))),
                       "--seconds", str(args.forward_seconds), "--image-size", str(args.image_size)],
                      python=Path(judge["options"]["python"]))["images_per_s"]
    return {int(b): r for b, r in rates.items()}


def prepare_table(heads: list[str], batches: list[int], args: argparse.Namespace) -> int:
    """`--load prepare`: hpsv3 / videoalign, a batch's preprocessing alone (up to the model's input
    on its device) in `reference` and `device` mode, the same images, one process per head."""
    print(f"{'head':<12} {'batch':>5} {'item':<22} {'reference/s':>11} {'device/s':>9} {'ref ms/item':>11}"
          f" {'dev ms/item':>11} {'device vs ref':>13}")
    for head in heads:
        if head not in ("hpsv3", "videoalign"):
            print(f"{head:<12} (--load prepare: hpsv3 and videoalign; the CLIP family's is in every other row)")
            continue
        judge = judge_config(head, max(batches), args)
        options = {k: v for k, v in judge["options"].items() if k not in ("python", "env", "preprocess") and v is not None}
        frames = 8
        rates = heads_run(["prepare", head, json.dumps(options), "--batch", str(max(batches)),
                           "--seconds", str(args.forward_seconds), "--image-size", str(args.image_size),
                           "--frames", str(frames)], python=Path(judge["options"]["python"]))["items_per_s"]
        item = (f"{frames}x{args.image_size}² video" if head == "videoalign" else f"{args.image_size}² image")
        ref, dev = rates["reference"], rates["device"]
        print(f"{head:<12} {max(batches):>5} {item:<22} {ref:>11.1f} {dev:>9.1f} {1000 / ref:>11.2f}"
              f" {1000 / dev:>11.2f} {dev / ref:>12.2f}x", flush=True)
    return 0


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", default="clip,pickscore,hpsv2,hpsv3,ocr")
    ap.add_argument("--batch-sizes", default="1,2,4,8,16,32,64")
    ap.add_argument("--requests", type=int, default=64, help="concurrent single-image requests (OCR, hpsv3: at most 16)")
    ap.add_argument("--images-per-request", type=int, default=1,
                    help="samples per request (the --requests images go out as requests of this many)")
    ap.add_argument("--rounds", type=int, default=2, help="timed rounds after one warm-up round (median)")
    ap.add_argument("--max-wait-ms", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=None, help="torch/onnxruntime threads per worker")
    ap.add_argument("--image-size", type=int, default=512)
    ap.add_argument("--size", choices=["tiny", "base", "h14"], default="base",
                    help="CLIP family: ViT-B/32-sized, tiny, or ViT-H-14-sized (h14: PickScore/HPSv2 at "
                         "full size, for a GPU); image_reward: base = full ImageReward-v1.0 size, else tiny")
    ap.add_argument("--device", default="cpu", help="head device: cpu, cuda:0 ...")
    ap.add_argument("--dtype", choices=["fp32", "fp16", "bf16"], default="fp32")
    ap.add_argument("--preprocess", choices=["device", "reference"], default=None,
                    help="CLIP family / image_reward: preprocessing mode (default: device on cuda, else reference)")
    ap.add_argument("--preprocess-processes", type=int, default=None,
                    help="reference mode: preprocessing processes per worker (default min(8, CPUs))")
    ap.add_argument("--load", default="single",
                    help="single: --requests concurrent single-image requests at each --batch-sizes; grpo: "
                         "steps of --groups concurrent requests of --group-size images, one new prompt each, "
                         "at each --grpo-batch-sizes (a step ends when its last request does); stream: "
                         "--groups clients sending such requests back to back for --stream-seconds; "
                         "both: single + grpo; all: single + grpo + stream; or a comma-separated list; "
                         "prepare (hpsv3, videoalign): the preprocessing alone in both --preprocess modes")
    ap.add_argument("--stream-seconds", type=float, default=10.0, help="stream load: timed seconds")
    ap.add_argument("--groups", type=int, default=16, help="GRPO load: concurrent requests (C)")
    ap.add_argument("--group-size", type=int, default=32, help="GRPO load: images per request (G)")
    ap.add_argument("--grpo-batch-sizes", default="64,128")
    ap.add_argument("--bare", choices=["on", "off"], default="on",
                    help="CLIP family: measure the bare image-tower forward at each row's batch size")
    ap.add_argument("--forward-seconds", type=float, default=5.0, help="timed seconds per bare-forward rate")
    ap.add_argument("--peer", choices=["on", "off"], default="on",
                    help="with pickscore: Flow-Factory's in-trainer way (CLIPProcessor + CLIPModel per batch "
                         "of 32, fp32 and bf16) on the same weights")
    ap.add_argument("--overlap", choices=["on", "off"], default=None,
                    help="preprocess the next batch during the current forward (default: on off-CPU)")
    ap.add_argument("--transport", choices=["shm", "pipe"], default=None,
                    help="how pixels reach the worker (default: the head's default, shm)")
    ap.add_argument("--pipeline-min-batch", type=int, default=None,
                    help="start a batch once it holds this many items while the device is idle (default: off)")
    args = ap.parse_args()
    heads = [h.strip() for h in args.heads.split(",") if h.strip()]
    batches = [int(b) for b in args.batch_sizes.split(",")]
    models = tiny_model("heads", args.size) if set(heads) & set(CLIP_FAMILY) else None
    print(f"# {os.cpu_count()} CPUs, model size {args.size}, {args.image_size}px images, "
          f"single: {args.requests} images in concurrent requests of {args.images_per_request}; grpo: {args.groups} concurrent requests of "
          f"{args.group_size} images, a new prompt each; max_wait_ms {args.max_wait_ms}, {args.device} {args.dtype}"
          f"{', ' + torch_device_name(args) if args.device.startswith('cuda') else ''}")
    if args.load == "prepare":
        return prepare_table(heads, batches, args)
    print(f"{'head':<12} {'load':<6} {'prep':<9} {'max_batch':>9} {'requests':>8} {'images/s':>9} {'mean batch':>10}"
          f" {'vs batch 1':>10} {'prep ms/img':>11} {'fwd ms/img':>10} {'gw cpu ms/req':>13} {'gw cpu ms/img':>13}"
          f" {'gpu ms/img':>10} {'bare fwd/s':>10}"
          f" {'of bare':>7}")
    bare: dict[tuple[str, int], float] = {}
    loads = {"both": ["single", "grpo"], "all": ["single", "grpo", "stream"]}.get(args.load, args.load.split(","))
    if not loads or set(loads) - {"single", "grpo", "stream"}:
        ap.error(f"--load: single, grpo, stream (comma-separated), both or all; got {args.load!r}")
    grpo_batches = [int(b) for b in args.grpo_batch_sizes.split(",")]
    for head in heads:
        for load in loads:
            base = None
            sizes = {"ocr": [b for b in batches if b in (1, 8)],
                     "hpsv3": [b for b in batches if b <= min(args.requests, 16)],
                     "videoalign": [b for b in batches if b <= min(args.requests, 16)],
                     "gen_eval": [b for b in batches if b <= min(args.requests, 8)]}.get(head, batches)
            if load in ("grpo", "stream"):
                sizes = grpo_batches
            for batch in sizes or batches[:1]:
                row = await measure(head, batch, args, load)
                rate = row["images_per_s"]
                base = base or rate
                limit = ""
                if head in CLIP_FAMILY and args.bare == "on":
                    if (head, batch) not in bare:  # every batch size of this head, one model load
                        wanted = ((batches if "single" in loads else [])
                                  + (grpo_batches if {"grpo", "stream"} & set(loads) else []))
                        for b, r in bare_forward(head, wanted, args).items():
                            bare[(head, b)] = r
                    limit = f" {bare[(head, batch)]:>10.1f} {rate / bare[(head, batch)]:>6.0%}"
                elif head in ("image_reward", "hpsv3") and args.bare == "on":
                    if (head, batch) not in bare:
                        judge = judge_config(head, batch, args)
                        wanted = ((sizes if load == "single" else [])
                                  + (grpo_batches if {"grpo", "stream"} & set(loads) else []) + [batch])
                        for b, r in bare_infer(head, judge, wanted, args).items():
                            bare[(head, b)] = r
                    limit = f" {bare[(head, batch)]:>10.1f} {rate / bare[(head, batch)]:>6.0%}"
                print(f"{head:<12} {load:<6} {row['preprocess']:<9} {batch:>9} {row['requests']:>8} "
                      f"{rate:>9.{3 if rate < 1 else 1}f} {row['mean_batch']:>10.1f} {rate / base:>9.1f}x"
                      f" {row['prepare_ms']:>11.2f} {row['infer_ms']:>10.2f} {row['gateway_cpu_ms']:>13.2f}"
                      f" {row['gateway_cpu_ms_per_image']:>13.3f} {row['gpu_ms']:>10.2f}{limit}",
                      flush=True)
    if "pickscore" in heads and args.peer == "on":
        assert models is not None
        for dtype in ("fp32", "bf16"):
            r = heads_run(["flow_factory", str(models / "hf_clip"), str(models / "hf_clip"), "--dtype", dtype,
                           "--device", args.device, "--image-size", str(args.image_size),
                           "--seconds", str(args.forward_seconds)])["images_per_s"]
            print(f"{'flow_factory':<12} {'peer':<6} {'in-proc':<9} {32:>9} {'-':>8} {r:>9.1f}   "
                  f"(CLIPProcessor + CLIPModel per batch of 32, {dtype}, pickscore's weights)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
