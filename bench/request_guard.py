"""The request guard's CPU per request with and without the checks a gateway without API keys runs
(server/origin.py: Host, Origin / Sec-Fetch-Site, JSON content type), on a trivial inner app, so
what is timed is the guard alone. Rounds alternate, so drift in the machine's load hits both.

    .venv/bin/python bench/request_guard.py --requests 50000 --rounds 4
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from judge_gateway.config import MediaConfig  # noqa: E402
from judge_gateway.server.guards import RequestGuardMiddleware  # noqa: E402
from judge_gateway.server.origin import OriginPolicy  # noqa: E402

# what python-requests sends with json= (Flow-Factory's client), to the native route
HEADERS = [(b"host", b"localhost:8080"), (b"user-agent", b"python-requests/2.32.3"),
           (b"accept-encoding", b"gzip, deflate"), (b"accept", b"*/*"), (b"connection", b"keep-alive"),
           (b"content-type", b"application/json"), (b"content-length", b"1234")]


async def inner(scope, receive, send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def receive():
    return {"type": "http.request", "body": b"", "more_body": False}


async def send(message) -> None:
    return None


async def per_request_us(app, n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        await app({"type": "http", "method": "POST", "path": "/v1/rewards", "headers": HEADERS}, receive, send)
    return (time.perf_counter() - started) / n * 1e6


async def main(requests: int, rounds: int) -> None:
    limits = MediaConfig().limits()
    plain = RequestGuardMiddleware(inner, 100, 16384, limits)
    policy = OriginPolicy(None, json_paths=("/v1/rewards",), json_suffix_under=("/flow-factory/", "/compute"))
    checked = RequestGuardMiddleware(inner, 100, 16384, limits, origin=policy)
    times: dict[str, list[float]] = {"with API keys (no browser checks)": [], "without API keys (browser checks)": []}
    for _ in range(rounds):
        times["with API keys (no browser checks)"].append(await per_request_us(plain, requests))
        times["without API keys (browser checks)"].append(await per_request_us(checked, requests))
    base = statistics.mean(times["with API keys (no browser checks)"])
    for name, values in times.items():
        mean = statistics.mean(values)
        print(f"{name}: {mean:.1f} us/request (rounds {', '.join(f'{v:.1f}' for v in values)}), "
              f"{mean / base:.2f}x, +{mean - base:.1f} us")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=50000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.rounds))
