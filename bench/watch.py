"""The watch's cost to the trainer: the same open-loop training load through a gateway with the
watch off and on, and what the watch sheds when it is overloaded.

A "trainer" sends --requests requests of --batch images each at --rate requests/s (a fixed
schedule, so both sides see the same load) to `judge-gateway serve` processes; the training judge
and the shadow are yes/no judges on the same vLLM server (a shared backend: the case where
shadow calls could starve training calls). Rows, alternating within each round so drift hits all
alike:

  off       watch disabled
  on        watch on, sample_rate --sample-rate (default 0.1)
  overload  watch on, every sample sampled, a queue of 16: most shadow work is shed

Each row prints the training requests' latency (p50, mean, p99), the gateway process's CPU per
request, and for the watch rows what it scored and shed (GET /v1/watch, after its queue drained).
The last lines give on / off and overload / off as ratios of the means over the rounds.

    .venv/bin/python bench/watch.py --rate 3 --requests 90 --batch 8 --rounds 2

Without --base-url it starts the tiny CPU vLLM (scripts/start_vllm.sh --cpu), as the tests do.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
from _support import (  # bench/_support.py: the tiny VLM, built and cached as the tests do
    run_on_vllm,
    wait_healthy,
)
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
MODES = {
    "off": None,
    "on": {},
    "overload": {"sample_rate": 1.0, "queue_size": 16},
}


def make_images(n: int, size: int) -> list[str]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(buf, format="PNG")
        out.append(base64.b64encode(buf.getvalue()).decode())
    return out


def config_toml(base_url: str, model: str, watch: dict | None, sample_rate: float, folder: str) -> str:
    text = f"""
[backends.vlm]
model = "{model}"
base_urls = ["{base_url}"]
max_concurrency = 64
timeout_s = 300
[judges.quality]
kind = "yes_no"
backend = "vlm"
template = "image_quality@1"
[judges.alignment]
kind = "yes_no"
backend = "vlm"
template = "vqa_alignment@1"
default = false
"""
    if watch is not None:
        settings = {"sample_rate": sample_rate, "seed": 0, "folder": folder, **watch}
        text += "[watch]\nenabled = true\n" + "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in settings.items())
        text += "[watch.shadows]\nquality = [\"alignment\"]\n"
    return text


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one_round(mode: str, args: argparse.Namespace, base_url: str, images: list[str], tmp: Path) -> dict:
    cfg = tmp / f"{mode}.toml"
    cfg.write_text(config_toml(base_url, args.model, MODES[mode], args.sample_rate, str(tmp / f"watch-{mode}")))
    port = _free_port()
    log = open(tmp / f"{mode}.log", "a")
    proc = subprocess.Popen([sys.executable, "-m", "judge_gateway.cli", "serve", "--config", str(cfg), "--port",
                             str(port), "--log-level", "warning"], stdout=log, stderr=log, cwd=tmp,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=600) as http:
            await wait_healthy(http, tmp / f"{mode}.log")

            async def send(i: int, step: int) -> float:
                body = {"samples": [{"prompt": "a photo", "image": images[(i * args.batch + k) % len(images)]}
                                    for k in range(args.batch)], "judges": ["quality"], "run": "bench", "step": step}
                t = time.perf_counter()
                r = await http.post("/v1/rewards", json=body)
                r.raise_for_status()
                return time.perf_counter() - t

            await asyncio.gather(*(send(i, 0) for i in range(4)))  # warm: connections, first requests
            cpu0 = cpu_seconds(proc.pid)
            start = time.perf_counter()

            async def scheduled(i: int) -> float:
                await asyncio.sleep(max(0.0, start + i / args.rate - time.perf_counter()))
                return await send(i, 1 + i // args.steps_every)

            latencies = await asyncio.gather(*(scheduled(i) for i in range(args.requests)))
            cpu = cpu_seconds(proc.pid) - cpu0
            watch = None
            if MODES[mode] is not None:  # let the shadows finish (not timed), then read what they did
                deadline = time.monotonic() + 600
                while time.monotonic() < deadline:
                    watch = (await http.get("/v1/watch", params={"windows": 0})).json()["queue"]
                    if watch["depth"] == 0 and watch["in_flight"] == 0:
                        break
                    await asyncio.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    row = {"p50_ms": pct(latencies, 0.5) * 1000, "mean_ms": statistics.fmean(latencies) * 1000,
           "p99_ms": pct(latencies, 0.99) * 1000, "cpu_ms": cpu / args.requests * 1000, "watch": watch}
    extra = ""
    if watch is not None:
        extra = f"   watch: sampled {watch['sampled']}, scored {watch['scored']}, shed {watch['shed'] or 0}"
    print(f"  {mode:9s} p50 {row['p50_ms']:8.1f} ms   mean {row['mean_ms']:8.1f} ms   p99 {row['p99_ms']:8.1f} ms   "
          f"gateway CPU {row['cpu_ms']:6.1f} ms/request{extra}", flush=True)
    return row


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def main_async(args: argparse.Namespace, base_url: str) -> None:
    images = make_images(args.batch * 16, args.size)
    print(f"{args.requests} requests of {args.batch} {args.size}x{args.size} PNG at {args.rate}/s, "
          f"watch sample_rate {args.sample_rate}, model {args.model} at {base_url}")
    rows: dict[str, list[dict]] = {m: [] for m in args.modes}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(args.rounds):
            print(f"round {rnd + 1}")
            order = args.modes if rnd % 2 == 0 else args.modes[::-1]
            for mode in order:
                rows[mode].append(await one_round(mode, args, base_url, images, Path(tmp)))
    print("mean over rounds")
    means = {m: {k: statistics.fmean(r[k] for r in rs) for k in ("p50_ms", "mean_ms", "p99_ms", "cpu_ms")}
             for m, rs in rows.items()}
    for mode, m in means.items():
        print(f"  {mode:9s} p50 {m['p50_ms']:8.1f} ms   mean {m['mean_ms']:8.1f} ms   p99 {m['p99_ms']:8.1f} ms   "
              f"gateway CPU {m['cpu_ms']:6.1f} ms/request")
    if "off" in means:
        for mode in (m for m in means if m != "off"):
            print(f"{mode} / off: p50 {means[mode]['p50_ms'] / means['off']['p50_ms']:.3f}   "
                  f"mean {means[mode]['mean_ms'] / means['off']['mean_ms']:.3f}   "
                  f"p99 {means[mode]['p99_ms'] / means['off']['p99_ms']:.3f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", help="an existing vLLM /v1 URL (default: start the tiny CPU vLLM)")
    p.add_argument("--model", default="Qwen/Qwen2.5-VL-7B-Instruct", help="served model name")
    p.add_argument("--requests", type=int, default=90)
    p.add_argument("--batch", type=int, default=8, help="images per training request")
    p.add_argument("--rate", type=float, default=3.0, help="training requests per second")
    p.add_argument("--steps-every", type=int, default=10, help="requests per trainer step")
    p.add_argument("--size", type=int, default=64, help="image side in pixels")
    p.add_argument("--sample-rate", type=float, default=0.1)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--modes", default="off,on,overload", type=lambda s: s.split(","))
    args = p.parse_args()
    return run_on_vllm(main_async, args)


if __name__ == "__main__":
    sys.exit(main())
