"""`judge-gateway prepare --config X`: build each judge's environment, fetch its weights ahead of
time, and check that it loads and scores a probe; a table, and exit 1 when anything is not ready."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..config import load_config
from ..envs import EnvBuilder, choose_torch, load_specs
from .env import add_torch_options


def _cmd_prepare(args: argparse.Namespace) -> int:
    from ..prepare import Options, plan_prepare, run_prepare

    cfg = load_config(args.config)
    specs = load_specs()
    choice = choose_torch(args.torch, specs.torch, index_url=args.torch_index)
    builder = EnvBuilder(choice, specs=specs, wheel_cache=args.wheel_cache,
                         share_files=not args.no_shared_files)
    judges = [j.strip() for j in args.judges.split(",") if j.strip()] if args.judges else None
    if args.download_dir:
        # The workers and vLLM read the same cache: `up` / `serve` need this variable too.
        os.environ["HF_HUB_CACHE"] = str(args.download_dir.absolute())
    if args.offline:
        os.environ["HF_HUB_OFFLINE"] = "1"
    opts = Options(offline=args.offline, download_dir=args.download_dir, start=args.start, build=not args.no_build,
                   force=args.rebuild, judges=judges, run_dir=Path(args.run_dir))
    if args.dry_run:
        print("\n".join(plan_prepare(cfg, choice, builder, opts)))
        return 0
    status, _ = run_prepare(cfg, choice, builder, opts)
    if args.download_dir and status == 0:
        print(f"weights are in {args.download_dir}: export HF_HUB_CACHE={args.download_dir.absolute()} "
              "before `judge-gateway up` / `serve`")
    return status


def register_prepare(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("prepare", help="build each judge's environment, fetch its weights, check it loads and scores")
    s.add_argument("--config", help="TOML config file, or a shipped config by name (`judge-gateway configs` "
                                    "lists them; default: the embedded `default`)")
    s.add_argument("--judges", help="comma-separated judge names (default: every configured judge)")
    s.add_argument("--offline", action="store_true",
                   help="download nothing: check local paths and the hub cache, report what is missing")
    s.add_argument("--download-dir", type=Path, metavar="DIR",
                   help="hub cache to download into (default: huggingface_hub's, e.g. ~/.cache/huggingface/hub)")
    s.add_argument("--no-start", dest="start", action="store_false",
                   help="do not start a launched backend's vLLM servers for the probe (default: start the ones "
                        "not already answering, probe their judges, stop them)")
    s.add_argument("--start", dest="start", action="store_true", help=argparse.SUPPRESS)  # the default; kept
    s.add_argument("--no-build", action="store_true", help="check the environments, never build or change one")
    s.add_argument("--rebuild", action="store_true", help="run every environment's steps even when it imports")
    s.add_argument("--run-dir", default="run/prepare", help="logs of the vLLM servers started for the probes (default run/prepare)")
    s.add_argument("--dry-run", action="store_true",
                   help="print every step (torch build, index, pins, environments, each judge's and the latent "
                        "decoder's weights, the servers and probes); do nothing")
    add_torch_options(s)
    s.set_defaults(func=_cmd_prepare)
