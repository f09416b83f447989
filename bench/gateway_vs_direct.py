"""Gateway overhead: the same yes/no calls through judge-gateway vs straight through AsyncOpenAI.

Sends N single-image samples at C concurrent requests
  (a) through the judge-gateway HTTP service (a separate `judge-gateway serve` process), and
  (b) straight to vLLM with `AsyncOpenAI`, with the exact messages the judge would send,
and prints requests/s and p50/p99 latency for both. Rounds alternate (direct, gateway, ...)
so drift in the machine's load hits both sides alike.

    .venv/bin/python bench/gateway_vs_direct.py --samples 512 --concurrency 64
    .venv/bin/python bench/gateway_vs_direct.py --base-url http://gpu:8005/v1 --model Qwen/Qwen2.5-VL-7B-Instruct

Without --base-url it builds the tiny CPU model and starts a vLLM CPU server itself
(scripts/start_vllm.sh --cpu), as the tests do.
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
from openai import AsyncOpenAI
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _support import run_on_vllm, wait_healthy  # noqa: E402  (bench/_support.py: the tiny VLM, built and cached as the tests do)

from judge_gateway.config import validate_config  # noqa: E402
from judge_gateway.gateway import Gateway  # noqa: E402
from judge_gateway.judges import ScoreContext  # noqa: E402
from judge_gateway.media import MediaCache  # noqa: E402
from judge_gateway.schema import SampleInput  # noqa: E402


def make_images(n: int, size: int) -> list[bytes]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        arr = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(arr).save(buf, format="PNG")
        out.append(buf.getvalue())
    return out


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


async def run_load(n: int, concurrency: int, one) -> tuple[float, list[float]]:
    sem = asyncio.Semaphore(concurrency)
    lat: list[float] = []

    async def task(i: int) -> None:
        async with sem:
            t = time.perf_counter()
            await one(i)
            lat.append(time.perf_counter() - t)

    start = time.perf_counter()
    await asyncio.gather(*(task(i) for i in range(n)))
    return time.perf_counter() - start, lat


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process (Linux /proc), to report the gateway's CPU cost per request."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(name: str, n: int, wall: float, lat: list[float], cpu_s: float | None = None) -> dict[str, float]:
    row = {"rps": n / wall, "p50_ms": pct(lat, 0.5) * 1000, "p99_ms": pct(lat, 0.99) * 1000}
    extra = ""
    if cpu_s is not None:
        row["cpu_ms_per_req"] = cpu_s / n * 1000
        extra = f"   gateway CPU {row['cpu_ms_per_req']:.2f} ms/request"
    print(f"  {name:8s} {row['rps']:8.1f} req/s   p50 {row['p50_ms']:8.1f} ms   p99 {row['p99_ms']:8.1f} ms{extra}",
          flush=True)
    return row


def config_toml(base_url: str, model: str) -> str:
    return f"""
[server]
max_body_bytes = 268435456
[backends.vlm]
model = "{model}"
base_urls = ["{base_url}"]
max_concurrency = 256
timeout_s = 300
[judges.image_quality]
kind = "yes_no"
backend = "vlm"
template = "image_quality@1"
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def main_async(args: argparse.Namespace, base_url: str) -> None:
    images = make_images(args.samples, args.size)
    b64 = [base64.b64encode(b).decode() for b in images]
    cfg_text = config_toml(base_url, args.model)

    # The exact messages the judge sends, built once, for the direct side.
    import tomllib

    gw = Gateway(validate_config(tomllib.loads(cfg_text)))
    judge = gw.judges["image_quality"]
    ctx = ScoreContext(media=MediaCache(), request_id="bench")
    messages = [(await judge.build_messages(SampleInput(prompt="a photo", image=img), ctx))[0] for img in images]
    await gw.aclose()

    with tempfile.TemporaryDirectory() as tmp:
        cfg_path = Path(tmp) / "bench.toml"
        cfg_path.write_text(cfg_text)
        port = free_port()
        log = open(Path(tmp) / "gateway.log", "w")
        proc = subprocess.Popen([sys.executable, "-m", "judge_gateway.cli", "serve", "--config", str(cfg_path),
                                 "--port", str(port), "--log-level", "warning"], stdout=log, stderr=log)
        gw_url = f"http://127.0.0.1:{port}"
        try:
            async with httpx.AsyncClient(base_url=gw_url, timeout=600,
                                         limits=httpx.Limits(max_connections=args.concurrency + 8)) as http:
                await wait_healthy(http, "the gateway's log", timeout_s=20)
                direct = AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=600,
                                     http_client=httpx.AsyncClient(
                                         timeout=600, limits=httpx.Limits(max_connections=args.concurrency + 8)))

                async def via_direct(i: int) -> None:
                    c = await direct.chat.completions.create(model=args.model, messages=messages[i], max_tokens=1,
                                                             temperature=0.0, logprobs=True, top_logprobs=20)
                    assert c.choices[0].logprobs.content[0].top_logprobs

                invalid = 0

                async def via_gateway(i: int) -> None:
                    nonlocal invalid
                    r = await http.post("/v1/rewards", json={"samples": [{"prompt": "a photo", "image": b64[i]}]})
                    r.raise_for_status()
                    if not r.json()["results"][0]["valid"]:
                        invalid += 1

                # Warm both paths (connections, vLLM's first-request costs).
                await run_load(min(args.samples, args.concurrency), args.concurrency, via_direct)
                await run_load(min(args.samples, args.concurrency), args.concurrency, via_gateway)
                rows: dict[str, list[dict[str, float]]] = {"direct": [], "gateway": []}
                print(f"{args.samples} samples, {args.concurrency} concurrent, {args.size}x{args.size} PNG, "
                      f"model {args.model} at {base_url}")
                for rnd in range(args.rounds):
                    print(f"round {rnd + 1}")
                    wall, lat = await run_load(args.samples, args.concurrency, via_direct)
                    rows["direct"].append(report("direct", args.samples, wall, lat))
                    cpu0 = cpu_seconds(proc.pid)
                    wall, lat = await run_load(args.samples, args.concurrency, via_gateway)
                    cpu1 = cpu_seconds(proc.pid)
                    cpu = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
                    rows["gateway"].append(report("gateway", args.samples, wall, lat, cpu))
                await direct.close()
        finally:
            proc.terminate()
            proc.wait(timeout=20)
            log.close()

    print("mean over rounds")
    for name, rs in rows.items():
        print(f"  {name:8s} {statistics.fmean(r['rps'] for r in rs):8.1f} req/s   "
              f"p50 {statistics.fmean(r['p50_ms'] for r in rs):8.1f} ms   "
              f"p99 {statistics.fmean(r['p99_ms'] for r in rs):8.1f} ms")
    ratio = statistics.fmean(r["rps"] for r in rows["gateway"]) / statistics.fmean(r["rps"] for r in rows["direct"])
    print(f"gateway / direct throughput: {ratio:.3f}   (invalid gateway scores: {invalid})")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", help="an existing vLLM /v1 URL (default: start the tiny CPU vLLM)")
    p.add_argument("--model", default="Qwen/Qwen2.5-VL-7B-Instruct", help="served model name")
    p.add_argument("--samples", type=int, default=512)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--size", type=int, default=64, help="image side in pixels")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    return run_on_vllm(main_async, args)


if __name__ == "__main__":
    sys.exit(main())
