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
    from ..prepare import Options, Row, environment_needs, judge_weights, run_prepare

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
    if args.dry_run:
        names = judges or list(cfg.judges)
        rows = {n: Row(n, cfg.judges[n].kind) for n in names}
        print(choice.describe())
        for need in environment_needs(cfg, names, specs, rows):
            print(f"environment {need.spec} for {', '.join(need.users)}:")
            for line in builder.plan(specs.env(need.spec), need.venv):
                print(f"  {line}")
        for name in names:
            jc = cfg.judges[name]
            refs = judge_weights(jc) if jc.kind_spec.runs_on == "head" else []
            weights = ", ".join(f"{r.option}={r.ref} ({r.form})" for r in refs) or "none named"
            print(f"judge {name} ({jc.kind}): weights {weights}; then load and probe")
        return 0
    opts = Options(offline=args.offline, download_dir=args.download_dir, start=args.start, build=not args.no_build,
                   force=args.rebuild, judges=judges, run_dir=Path(args.run_dir))
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
    s.add_argument("--start", action="store_true",
                   help="also start the launched vLLM servers and probe their judges (then stop them)")
    s.add_argument("--no-build", action="store_true", help="check the environments, never build or change one")
    s.add_argument("--rebuild", action="store_true", help="run every environment's steps even when it imports")
    s.add_argument("--run-dir", default="run/prepare", help="logs of servers started by --start (default run/prepare)")
    s.add_argument("--dry-run", action="store_true",
                   help="print the torch build, index, pins, environments and weights; do nothing")
    add_torch_options(s)
    s.set_defaults(func=_cmd_prepare)
