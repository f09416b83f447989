"""Run the fuzz families against a fresh gateway in this process and print its figures as JSON:
`python -m tests.support.fuzz_run N [SEED] [CONCURRENCY] [KIND]`, KIND `requests` (the request
families of fuzz_cases.py, the default) or `containers` (container_fuzz.py's mutated media).

In-process ASGI (no sockets: the cases, not the HTTP server, are under test; slow clients have
their own tests), the fake VLM backend in a thread, the in-memory result store. RSS is this
process's (VmRSS), sampled while the cases run: a subprocess, so nothing else counts.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.support import container_fuzz
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.fuzz_cases import Fuzzer
from tests.support.io_watch import FileOpens, PortWatch
from tests.support.media_files import write_video

HANG_S = 60.0  # a request without a reply after this is a hang
ROOT = Path(__file__).resolve().parents[2]


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def trim() -> None:
    """Give freed heap back to the OS (glibc keeps it otherwise): what is left is held by objects."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc
        pass


def config(base_url: str) -> dict:
    backend = {"model": "fake-yes", "base_urls": [base_url], "timeout_s": 30, "max_retries": 0}
    return {
        "backends": {"yes": backend},
        "judges": {
            "quality": {"kind": "yes_no", "backend": "yes", "template": "image_quality@1",
                        "image": {"max_pixels": 1003520}},
            "cosmos_reason1": {"kind": "yes_no", "backend": "yes", "template": "cosmos_reason1@1", "default": False,
                               "video": {"max_frames": 160, "total_pixels": 7225344, "even_frames": True}},
        },
        "flow_factory": {"profiles": {"t2i": {"judges": {"quality": 1.0}}}},
    }


class Peak:
    def __init__(self) -> None:
        self.peak = rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss_mb())

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return max(self.peak, rss_mb())


async def run(n: int, seed: int, concurrency: int, kind: str = "requests") -> dict:
    backend = FakeOpenAIServer().start()
    canary = None
    if kind == "containers":
        gw = Gateway(validate_config(container_fuzz.config(backend.base_url)))
        fuzzer: Fuzzer | container_fuzz.ContainerFuzzer = container_fuzz.ContainerFuzzer(seed)
        # The demuxer scripts name canary.mp4 and UDP ports: it exists in the working directory, and
        # any open of it or bind of those ports is counted.
        workdir = Path(tempfile.mkdtemp(prefix="jg-container-fuzz-"))
        write_video(workdir / "canary.mp4", frames=2)
        os.chdir(workdir)
        canary = (FileOpens(workdir / "canary.mp4"), PortWatch(set(container_fuzz.SDP_PORTS)))
    else:
        gw = Gateway(validate_config(config(backend.base_url)))
        fuzzer = Fuzzer(seed)
    app = create_app(gw)
    codes: Counter[int] = Counter()
    by_family: dict[str, Counter[int]] = {}
    server_errors: list[dict] = []
    hangs: list[str] = []
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=HANG_S) as client:
            async def send(case) -> None:
                try:
                    r = await asyncio.wait_for(client.request(case.method, case.path, headers=case.headers,
                                                              content=case.body), HANG_S)
                except (TimeoutError, httpx.TimeoutException):
                    hangs.append(f"{case.family} {case.method} {case.path}")
                    return
                codes[r.status_code] += 1
                by_family.setdefault(case.family, Counter())[r.status_code] += 1
                if r.status_code >= 500:
                    server_errors.append({"family": case.family, "path": case.path, "status": r.status_code,
                                          "body": r.text[:300]})

            async def batch(cases) -> None:
                sem = asyncio.Semaphore(concurrency)

                async def one(case) -> None:
                    async with sem:
                        await send(case)
                await asyncio.gather(*(one(c) for c in cases))

            await batch(list(fuzzer.cases(200)))  # warm-up: imports, pools, first decodes
            codes.clear()  # counted apart; its 5xx and hangs still count
            by_family.clear()
            gc.collect()
            rss_warm = rss_mb()
            peak = Peak()
            started = time.monotonic()
            done = 0
            while done < n:
                chunk = min(500, n - done)
                await batch(list(fuzzer.cases(chunk)))
                done += chunk
            wall = time.monotonic() - started
            await asyncio.sleep(1.5)  # idle, as a server between steps: a scheduled trim runs
            rss_peak = peak.stop()
            gc.collect()
            rss_end = rss_mb()
            trim()
            rss_trimmed = rss_mb()
            retained = {"store_entries": len(app.state.cosmos_rl.store), "objects": len(gc.get_objects()),
                        "media_budget_in_use": gw.media_budget.in_use}
            if canary is not None:
                retained |= {"canary_opens": canary[0].count(), "ports_bound": sorted(canary[1].stop())}
    finally:
        await app.state.cosmos_rl.aclose()
        await gw.aclose()
        backend.stop()
        if canary is not None:
            canary[0].close()
            os.chdir(ROOT)
            shutil.rmtree(workdir, ignore_errors=True)
    return {"cases": n, "seed": seed, "status": {str(k): v for k, v in sorted(codes.items())},
            "families": {f: {str(k): v for k, v in sorted(c.items())} for f, c in sorted(by_family.items())},
            "server_errors": server_errors[:20], "n_5xx": len(server_errors),
            "hangs": len(hangs), "hang_examples": hangs[:5], "wall_s": round(wall, 1),
            "rss_warm_mb": round(rss_warm, 1), "rss_peak_mb": round(rss_peak, 1), "rss_end_mb": round(rss_end, 1),
            "rss_after_malloc_trim_mb": round(rss_trimmed, 1), "retained": retained}


def main() -> None:
    n = int(sys.argv[1])
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    concurrency = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    kind = sys.argv[4] if len(sys.argv) > 4 else "requests"
    print(json.dumps(asyncio.run(run(n, seed, concurrency, kind))))


if __name__ == "__main__":
    main()
