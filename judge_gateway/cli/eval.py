"""`judge-gateway eval LABELS.jsonl --judge NAME` (evaluation.py computes the figures)."""

from __future__ import annotations

import argparse


def _cmd_eval(args: argparse.Namespace) -> int:
    from ..evaluation import run_eval_command

    return run_eval_command(args)


def register_eval(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("eval", help="a judge's accuracy against labelled samples or preference pairs")
    s.add_argument("labels", metavar="LABELS.jsonl",
                   help="binary labels ({prompt, image|video, label: 0|1}) or pairs ({prompt, a, b, label: a|b|tie})")
    s.add_argument("--judge", required=True, help="the configured judge to evaluate")
    s.add_argument("--config", help="TOML config (default: the embedded one)")
    s.add_argument("--server", help="score through a running service at this URL instead of in-process")
    s.add_argument("--api-key", help="Bearer token for --server")
    s.add_argument("--threshold", type=float, help="reward at or above which a sample is called good "
                                                   "(default: the config's eval.threshold)")
    s.add_argument("--plot", help="calibration plot PNG (default: LABELS.calibration.png beside the labels)")
    s.add_argument("--cache", help="score cache JSONL: read first, new scores appended")
    s.add_argument("--batch-size", type=int, default=16, help="samples per request")
    s.add_argument("--concurrency", type=int, default=4, help="requests in flight")
    s.add_argument("--no-progress", action="store_true", help="no progress bar (stderr)")
    s.set_defaults(func=_cmd_eval)
