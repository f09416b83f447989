"""`judge-gateway up`: the config's vLLM servers (its `launch` tables), then the gateway, supervised
together until Ctrl-C / SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from ..config import load_config, resolve_config_path
from ..launch import LaunchError, plan_up, run_up
from .serve import add_gateway_options


def _cmd_up(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    serve_args = [a for key in args.api_key or [] for a in ("--api-key", key)]
    try:
        plan = plan_up(cfg, str(resolve_config_path(args.config)), run_dir=Path(args.run_dir).absolute(),
                       host=args.host, port=args.port, serve_args=serve_args, gateway=not args.no_gateway)
    except LaunchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(plan.describe(), flush=True)
    if args.dry_run:
        return 0
    return asyncio.run(run_up(plan, grace_s=args.stop_timeout))


def register_up(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("up", help="start the config's vLLM servers and the gateway; Ctrl-C stops them all")
    add_gateway_options(s)
    s.add_argument("--run-dir", default="run/up", help="logs, pid files and up.json (default run/up)")
    s.add_argument("--stop-timeout", type=float, default=30.0,
                   help="seconds a process gets after SIGTERM before SIGKILL (default 30)")
    s.add_argument("--no-gateway", action="store_true", help="start the vLLM servers only")
    s.add_argument("--dry-run", action="store_true", help="print the plan (commands, GPUs, ports); start nothing")
    s.set_defaults(func=_cmd_up)
