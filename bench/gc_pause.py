"""How long a full cyclic-GC pass holds a built gateway's event loop, before and after
`server.heap.freeze_startup_objects` (what `judge-gateway serve` calls once its app is built).

    .venv/bin/python bench/gc_pause.py [--repeats 7]

Builds the gateway and app of bench/gateway_vs_direct.py's config (one yes/no judge), then times
gc.collect() (the median of --repeats) with every start-up object tracked, and again after the
freeze, with as many request-sized objects alive as --live asks (what a loaded gateway holds).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gateway_vs_direct import config_toml  # noqa: E402  (the same config as the overhead bench)

from judge_gateway.config import validate_config  # noqa: E402
from judge_gateway.gateway import Gateway  # noqa: E402
from judge_gateway.server import create_app  # noqa: E402
from judge_gateway.server.heap import freeze_startup_objects  # noqa: E402



def full_collection_ms(repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        gc.collect()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--live", type=int, default=2000, help="request-sized objects alive during the timing (dicts)")
    args = ap.parse_args()
    app = create_app(Gateway(validate_config(tomllib.loads(config_toml("http://127.0.0.1:9/v1", "m")))))
    live = [{"sample": i, "scores": {"image_quality": [0.5, 0.5]}, "details": {"n": [i]}} for i in range(args.live)]
    before = len(gc.get_objects())
    before_ms = full_collection_ms(args.repeats)
    del live
    freeze_startup_objects()
    live = [{"sample": i, "scores": {"image_quality": [0.5, 0.5]}, "details": {"n": [i]}} for i in range(args.live)]
    after = len(gc.get_objects())
    after_ms = full_collection_ms(args.repeats)
    print(f"full collection, every object tracked: {before:,} objects, {before_ms:.1f} ms (median of {args.repeats})")
    print(f"after the freeze ({gc.get_freeze_count():,} frozen): {after:,} objects, {after_ms:.2f} ms")
    print(f"ratio after/before: {after_ms / before_ms:.3f}")
    del live, app


if __name__ == "__main__":
    main()
