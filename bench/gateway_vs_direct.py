"""Gateway overhead: the same yes/no calls through judge-gateway vs straight through AsyncOpenAI.

Sends N single-image samples at C concurrent requests
  (a) through the judge-gateway HTTP service (a separate `judge-gateway serve` process), and
  (b) straight to vLLM with `AsyncOpenAI`, with the exact messages the judge would send,
and prints requests/s and p50/p99 latency for both. Rounds alternate (direct, gateway, ...)
so drift in the machine's load hits both sides alike.

    .venv/bin/python bench/gateway_vs_direct.py --samples 512 --concurrency 64
    .venv/bin/python bench/gateway_vs_direct.py --base-url http://gpu:8005/v1 --model Qwen/Qwen2.5-VL-7B-Instruct
    .venv/bin/python bench/gateway_vs_direct.py --before /path/to/older/checkout   # before/after, same run

`--before DIR` serves a second gateway from another checkout of judge-gateway (its package on
PYTHONPATH) and adds it to every round, so a change's before and after are measured side by side;
`--tree NAME=DIR` (repeatable) adds more checkouts the same way, so a series of commits (each
change alone: git worktrees at each) is measured in the same rounds; `--profile FILE` records this
checkout's gateway with py-spy during the timed rounds.

    .venv/bin/python bench/gateway_vs_direct.py --samples 256 --rounds 4 \
        --tree base=/tmp/t0 --tree body=/tmp/t1 --tree metrics=/tmp/t2 --base-url http://127.0.0.1:8005/v1

Without --base-url it builds the tiny CPU model and starts a vLLM CPU server itself
(scripts/start_vllm.sh --cpu), as the tests do.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import os
import signal
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


def config_toml(base_url: str, model: str, api_key: str | None = None) -> str:
    keys = f'api_keys = ["{api_key}"]\n' if api_key else ""
    return f"""
[server]
max_body_bytes = 268435456
{keys}[backends.vlm]
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
    cfg_text = config_toml(base_url, args.model, args.api_key)

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
        sides: dict[str, str] = {}
        if args.before:
            sides["before"] = str(Path(args.before).resolve())
        for tree in args.tree:
            name, sep, folder = tree.partition("=")
            if not sep or not name or name in ("direct", "gateway") or name in sides:
                raise SystemExit(f"--tree {tree!r}: expected NAME=DIR with a new NAME (not direct or gateway)")
            sides[name] = str(Path(folder).resolve())
        sides["gateway"] = str(ROOT)
        procs: dict[str, tuple[subprocess.Popen, int]] = {}
        logs = []
        for name, code in sides.items():
            port = free_port()
            log = open(Path(tmp) / f"{name}.log", "w")
            logs.append(log)
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (code, os.environ.get("PYTHONPATH")) if p)}
            # cwd = the side's checkout: `python -m` puts the working folder first on sys.path, so
            # from any other checkout both sides would import that one's package.
            procs[name] = (subprocess.Popen([sys.executable, "-m", "judge_gateway.cli", "serve", "--config",
                                             str(cfg_path), "--port", str(port), "--log-level", "warning"],
                                            stdout=log, stderr=log, env=env, cwd=code), port)
        try:
            limits = httpx.Limits(max_connections=args.concurrency + 8)
            auth = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
            https = {name: httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=600, limits=limits,
                                             headers=auth)
                     for name, (_, port) in procs.items()}
            for name, http in https.items():
                await wait_healthy(http, f"gateway {name}'s log", timeout_s=300)  # several start at once
            # max_retries: a connection uvicorn closed while idle between rounds (its 5 s keep-alive) is retried
            direct = AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=2, timeout=600,
                                 http_client=httpx.AsyncClient(timeout=600, limits=limits))

            async def via_direct(i: int) -> None:
                c = await direct.chat.completions.create(model=args.model, messages=messages[i], max_tokens=1,
                                                         temperature=0.0, logprobs=True, top_logprobs=20)
                assert c.choices[0].logprobs.content[0].top_logprobs

            invalid = 0

            def via(name: str):
                async def send(i: int) -> None:
                    nonlocal invalid
                    body = {"samples": [{"prompt": "a photo", "image": b64[i]}]}
                    try:
                        r = await https[name].post("/v1/rewards", json=body)
                    except (httpx.ReadError, httpx.RemoteProtocolError):  # a connection closed while idle
                        r = await https[name].post("/v1/rewards", json=body)
                    r.raise_for_status()
                    if not r.json()["results"][0]["valid"]:
                        invalid += 1
                return send

            # Warm every path (connections, vLLM's first-request costs).
            await run_load(min(args.samples, args.concurrency), args.concurrency, via_direct)
            for name in procs:
                await run_load(min(args.samples, args.concurrency), args.concurrency, via(name))
            rows: dict[str, list[dict[str, float]]] = {"direct": [], **{name: [] for name in procs}}
            spy = None
            if args.profile:  # py-spy on this checkout's gateway for the timed rounds (GIL-holding samples)
                spy = subprocess.Popen([args.py_spy, "record", "--pid", str(procs["gateway"][0].pid), "--gil",
                                        "--rate", "200", "--format", "raw", "--nonblocking", "-o", args.profile],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                await asyncio.sleep(1.0)
            print(f"{args.samples} samples, {args.concurrency} concurrent, {args.size}x{args.size} PNG, "
                  f"model {args.model} at {base_url}; python {sys.version.split()[0]}")
            for name, code in sides.items():
                print(f"  {name}: {code} at {_commit(code)}")
            for rnd in range(args.rounds):
                print(f"round {rnd + 1}")
                wall, lat = await run_load(args.samples, args.concurrency, via_direct)
                rows["direct"].append(report("direct", args.samples, wall, lat))
                order = list(procs) if rnd % 2 == 0 else list(reversed(procs))
                for name in order:
                    pid = procs[name][0].pid
                    cpu0 = cpu_seconds(pid)
                    wall, lat = await run_load(args.samples, args.concurrency, via(name))
                    cpu1 = cpu_seconds(pid)
                    cpu = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
                    rows[name].append(report(name, args.samples, wall, lat, cpu))
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(timeout=120)
                print(f"py-spy profile of the gateway (collapsed stacks): {args.profile}")
            await direct.close()
            for http in https.values():
                await http.aclose()
        finally:
            for proc, _ in procs.values():
                proc.terminate()
                proc.wait(timeout=20)
            for log in logs:
                log.close()

    print("mean over rounds")
    for name, rs in rows.items():
        cpu_ms = [r["cpu_ms_per_req"] for r in rs if "cpu_ms_per_req" in r]
        print(f"  {name:8s} {statistics.fmean(r['rps'] for r in rs):8.1f} req/s   "
              f"p50 {statistics.fmean(r['p50_ms'] for r in rs):8.1f} ms   "
              f"p99 {statistics.fmean(r['p99_ms'] for r in rs):8.1f} ms"
              + (f"   gateway CPU {statistics.fmean(cpu_ms):.2f} ms/request" if cpu_ms else ""))
    direct_rps = statistics.fmean(r["rps"] for r in rows["direct"])
    for name in rows:
        if name != "direct":
            ratio = statistics.fmean(r["rps"] for r in rows[name]) / direct_rps
            print(f"{name} / direct throughput: {ratio:.3f}")
    print(f"invalid gateway scores: {invalid}")


def _commit(folder: str) -> str:
    done = subprocess.run(["git", "-C", folder, "log", "-1", "--format=%h %s"], capture_output=True, text=True,
                          check=False)
    return done.stdout.strip()[:80] or "(not a git checkout)"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", help="an existing vLLM /v1 URL (default: start the tiny CPU vLLM)")
    p.add_argument("--model", default="Qwen/Qwen2.5-VL-7B-Instruct", help="served model name")
    p.add_argument("--samples", type=int, default=512)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--size", type=int, default=64, help="image side in pixels")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--before", help="another judge-gateway checkout to serve beside this one (before/after)")
    p.add_argument("--api-key", help="serve the gateways with this API key (and send it): the key check's cost")
    p.add_argument("--tree", action="append", default=[], metavar="NAME=DIR",
                   help="one more checkout served beside this one in every round (repeatable)")
    p.add_argument("--profile", help="write a py-spy profile of this checkout's gateway (collapsed stacks) here")
    p.add_argument("--py-spy", default="py-spy", help="the py-spy executable (pip install py-spy)")
    args = p.parse_args()
    return run_on_vllm(main_async, args)


if __name__ == "__main__":
    sys.exit(main())
