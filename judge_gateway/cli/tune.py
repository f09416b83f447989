"""`judge-gateway tune ...` and `judge-gateway prompts compare`: their arguments, over the tuning package."""

from __future__ import annotations

import argparse

from ..config import load_config
from ..extras import require_extra


def add_scoring_args(p: argparse.ArgumentParser, *, server: bool = True) -> None:
    p.add_argument("--data", required=True, help="preference pairs JSONL (prompt, a, b, label)")
    p.add_argument("--config", help="TOML config with the judges (default: the embedded one)")
    p.add_argument("--cache", help="score cache JSONL: read first, new scores appended")
    p.add_argument("--cache-only", action="store_true", help="never score: fail if the cache lacks a cell")
    if server:
        p.add_argument("--server", help="score through a running service at this URL instead of in-process")
        p.add_argument("--api-key", help="Bearer token for --server")
    p.add_argument("--batch-size", type=int, default=16, help="samples per request")
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (stderr)")


def add_tune_args(p: argparse.ArgumentParser) -> None:
    add_scoring_args(p)
    p.add_argument("--folds", type=int, default=5, help="k of k-fold cross-validation")
    p.add_argument("--seed", type=int, default=0, help="seed of the fold split")
    p.add_argument("--out-dir", help="write the profile <name>@<next version>.json here")
    p.add_argument("--name", help="profile name (default: the judge's name / judge_weights)")
    p.add_argument("--plot", help="PNG of accuracy per fold and the weights "
                                  "(default with --out-dir: next to the profile)")


def _opts(args: argparse.Namespace):
    from ..tuning.run import ScoringOptions

    if args.batch_size < 1 or args.concurrency < 1:
        raise ValueError("--batch-size and --concurrency must be >= 1")
    return ScoringOptions(cache=args.cache, cache_only=args.cache_only, server=getattr(args, "server", None),
                          api_key=getattr(args, "api_key", None), batch_size=args.batch_size,
                          concurrency=args.concurrency, progress=not args.no_progress)


def _plot_path(args: argparse.Namespace, name: str) -> str | None:
    if args.plot:
        return args.plot
    if args.out_dir:
        from pathlib import Path

        from ..aggregation_profiles import next_version

        d = Path(args.out_dir)
        return str(d / f"{name}@{next_version(d, name) if d.is_dir() else 1}.png")
    return None


def cmd_tune(args: argparse.Namespace) -> int:
    from ..tuning.collect import MissingScoresError
    from ..tuning.run import tune_rubric, tune_weights

    cfg = load_config(args.config)
    if args.plot:  # asked for by name: say what is missing before anything is scored
        require_extra("tune", "tune --plot", ("matplotlib",))
    try:
        if args.tune_cmd == "rubric":
            name = args.name or args.judge
            tune_rubric(cfg, args.judge, args.data, _opts(args), k=args.folds, seed=args.seed,
                        out_dir=args.out_dir, name=name, plot=_plot_path(args, name))
        else:
            judges = [j.strip() for j in args.judges.split(",") if j.strip()]
            name = args.name or "judge_weights"
            tune_weights(cfg, judges, args.data, _opts(args), k=args.folds, seed=args.seed,
                         out_dir=args.out_dir, name=name, plot=_plot_path(args, name))
    except MissingScoresError as err:
        raise ValueError(str(err)) from None
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from ..tuning.collect import MissingScoresError
    from ..tuning.compare import compare_templates

    cfg = load_config(args.config)
    try:
        compare_templates(cfg, args.ref_a, args.ref_b, args.data, _opts(args), judge=args.judge)
    except MissingScoresError as err:
        raise ValueError(str(err)) from None
    return 0


def register_tune(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("tune", help="fit aggregation weights to human preference pairs")
    ts = s.add_subparsers(dest="tune_cmd", required=True)
    x = ts.add_parser("rubric", help="a rubric judge's aspect weights (a multi_axis judge's axes, a checklist's "
                      "probes), N/A policy and tie threshold")
    x.add_argument("--judge", required=True, help="the rubric, multi_axis or checklist judge's configured name")
    add_tune_args(x)
    x = ts.add_parser("weights", help="the weights of several judges in the combined reward")
    x.add_argument("--judges", required=True, help="comma-separated judge names")
    add_tune_args(x)
    s.set_defaults(func=cmd_tune)


def register_compare(prompts_sub: argparse._SubParsersAction) -> None:
    x = prompts_sub.add_parser("compare", help="score the same samples with two template versions")
    x.add_argument("ref_a", help="family@version")
    x.add_argument("ref_b", help="family@version")
    x.add_argument("--judge", help="configured judge whose backend/options to use "
                                   "(default: the first using the family)")
    add_scoring_args(x, server=False)
    x.set_defaults(func=cmd_compare)
