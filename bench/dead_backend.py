"""Native request latency while a VLM backend is down: the embedded default config's
`image_quality` judge (deadline_s = 60) with nothing listening at its backend's URL, as a new user
meets it before starting vLLM.

Each source tree given runs `judge-gateway serve` (the same interpreter, that tree first on
PYTHONPATH) on a copy of the shipped default config whose VLM backends point at a free port; a
client then sends --requests native requests (one 64x64 PNG, judges ["image_quality"]) one after
another and prints each one's latency and error, then per tree the median and the maximum, and the
last line the ratio of the medians against the first tree (the reference).

    git archive <commit-before> | tar -x -C /tmp/before
    .venv/bin/python bench/dead_backend.py --tree before=/tmp/before --tree after=. --requests 3

The reference before the fail-fast circuit takes the judge's whole deadline per request, so keep
its --requests small (3 x 60 s).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import httpx
import numpy as np
from _support import wait_healthy  # bench/_support.py
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config_text(dead_port: int) -> str:
    """configs/default.toml with every backend URL on `dead_port` (where nothing listens)."""
    text = (ROOT / "configs" / "default.toml").read_text()
    data = tomllib.loads(text)
    for backend in data.get("backends", {}).values():
        for url in backend["base_urls"]:
            port = url.rsplit(":", 1)[1].split("/")[0]
            text = text.replace(url, url.replace(f":{port}/", f":{dead_port}/"))
    return text


def png_b64() -> str:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


async def run_tree(label: str, tree: Path, requests: int, workdir: Path) -> list[float]:
    dead, port = free_port(), free_port()
    config = workdir / f"{label}.toml"
    config.write_text(config_text(dead))
    env = {**os.environ, "PYTHONPATH": str(tree.resolve()), "HF_HUB_OFFLINE": "1"}
    log_path = workdir / f"{label}.log"
    proc = subprocess.Popen([sys.executable, "-m", "judge_gateway.cli", "serve", "--config", str(config),
                             "--port", str(port)], env=env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT,
                            cwd=workdir)
    try:
        body = {"samples": [{"prompt": "a red apple on a table", "image": png_b64()}], "judges": ["image_quality"]}
        took = []
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=300) as client:
            await wait_healthy(client, log_path, 120)
            for i in range(requests):
                started = time.perf_counter()
                r = await client.post("/v1/rewards", json=body)
                took.append(time.perf_counter() - started)
                cell = r.json()["results"][0]["scores"]["image_quality"]
                error = cell["error"] or {}
                print(f"{label:>8} request {i + 1}: {took[-1]:8.3f} s  HTTP {r.status_code}  valid={cell['valid']}  "
                      f"{error.get('code')}: {str(error.get('message'))[:150]}", flush=True)
        return took
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", action="append", required=True, metavar="LABEL=DIR",
                   help="a source tree to serve from (repeat; the first is the reference)")
    p.add_argument("--requests", type=int, default=3)
    args = p.parse_args()
    trees = [(t.split("=", 1)[0], Path(t.split("=", 1)[1])) for t in args.tree]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    results = {}
    with tempfile.TemporaryDirectory(prefix="jg-dead-backend-") as tmp:
        for label, tree in trees:
            results[label] = asyncio.run(run_tree(label, tree, args.requests, Path(tmp)))
    print(f"\n{'tree':>8}  requests  median s  max s")
    for label, took in results.items():
        print(f"{label:>8}  {len(took):8d}  {statistics.median(took):8.3f}  {max(took):6.3f}")
    ref = statistics.median(next(iter(results.values())))
    for label, took in list(results.items())[1:]:
        print(f"{label} / {trees[0][0]} (medians): {statistics.median(took) / ref:.4f}")


if __name__ == "__main__":
    main()
