"""`judge-gateway env list | build NAME`: the environments of judge_gateway/envs/specs.toml, one at
a time (scripts/setup_*.sh and scripts/test.sh build theirs this way; `prepare` builds the ones
a config needs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..envs import EnvBuilder, EnvBuildError, choose_torch, load_specs


def add_torch_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--torch", default="auto", choices=("auto", "cuda", "cpu"),
                   help="torch build: auto = CUDA when nvidia-smi lists a GPU, else CPU (default auto)")
    p.add_argument("--torch-index", metavar="URL",
                   help="package index of the torch build (default: PyTorch's CPU index for cpu unless a "
                        "local wheel is found; PyPI for cuda)")
    p.add_argument("--wheel-cache", type=Path, metavar="DIR",
                   help="built wheels (mmcv) kept here (default $JG_WHEEL_CACHE or ~/.cache/judge-gateway/wheels)")
    p.add_argument("--no-shared-files", action="store_true",
                   help="give each venv its own copy of every file (default: a file identical to one of a sibling "
                        "venv in the same folder, torch's libraries above all, is a hard link to that one copy)")


def _cmd_env_list(args: argparse.Namespace) -> int:
    specs = load_specs()
    for spec in specs.envs.values():
        kinds = f" (heads: {', '.join(spec.kinds)})" if spec.kinds else ""
        print(f"{spec.name:12s} {spec.venv:20s} {spec.summary}{kinds}")
    return 0


def _cmd_env_build(args: argparse.Namespace) -> int:
    specs = load_specs()
    spec = specs.env(args.name)
    choice = choose_torch(args.torch, specs.torch, index_url=args.torch_index)
    builder = EnvBuilder(choice, specs=specs, wheel_cache=args.wheel_cache, share_files=not args.no_shared_files)
    venv = Path(args.venv or spec.venv)
    if args.dry_run:
        print(f"environment {spec.name}: {spec.summary}")
        print(f"  {choice.describe()}")
        for line in builder.plan(spec, venv.absolute()):
            print(f"  {line}")
        return 0
    try:
        builder.ensure(spec.name, venv, force=args.force)
    except EnvBuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


def register_env(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("env", help="the Python environments of the heads, vLLM and the tests (list, build)")
    env_sub = s.add_subparsers(dest="env_cmd", required=True)
    ls = env_sub.add_parser("list", help="the environments judge-gateway knows, with the head kinds each runs")
    ls.set_defaults(func=_cmd_env_list)
    b = env_sub.add_parser("build", help="build (or reuse) one environment")
    b.add_argument("name", help="an environment of `judge-gateway env list`")
    b.add_argument("--venv", help="where (default: the environment's own folder, e.g. .venv-heads)")
    b.add_argument("--force", action="store_true", help="run every step even when the venv already imports everything")
    b.add_argument("--dry-run", action="store_true", help="print the torch build, index, pins and steps; build nothing")
    add_torch_options(b)
    b.set_defaults(func=_cmd_env_build)
