"""The `judge-gateway` command: main parses and dispatches. `--help` lists every command the
register_* calls below add, each with its one-line help (argparse builds the list from them, so
none is left out); `--version` says the version and which install answered."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from .._version import __version__
from ..config import ConfigError
from ..extras import MissingExtraError
from .browse import register_browse
from .env import register_env
from .eval import register_eval
from .info import register_configs, register_judges, register_schema
from .parser import CommandParser
from .prepare import register_prepare
from .prompts import register_prompts
from .samples import register_samples
from .score import register_score
from .serve import register_serve
from .tune import register_tune
from .up import register_up


DESCRIPTION = ("Rewards for reinforcement learning of image and video generators: serve judges, score "
               "folders, browse and evaluate the results, and set up the judges' environments.")


def version_text() -> str:
    """What `--version` prints: the version and the package it runs (which install answered)."""
    return f"judge-gateway {__version__} ({Path(__file__).resolve().parents[1]}, Python {sys.version.split()[0]})"


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="judge-gateway", description=DESCRIPTION)
    p.add_argument("--version", action="version", version=version_text(),
                   help="print the version, the package that answers and its Python, then exit")
    p.add_argument("-v", "--verbose", action="store_true", help="log DEBUG and INFO messages too (the head workers' output among them); default: warnings")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND", title="commands")

    # The order here is the order `--help` lists the commands in.
    register_serve(sub)
    register_schema(sub)
    register_configs(sub)
    register_prompts(sub)
    register_tune(sub)
    register_judges(sub)
    register_samples(sub)
    register_score(sub)
    register_browse(sub)
    register_eval(sub)
    register_prepare(sub)
    register_up(sub)
    register_env(sub)
    p.epilog = "`judge-gateway COMMAND --help` shows a command's flags and their defaults."
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # inside the try: a reader gone before the last flush is handled below
        return status
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError, MissingExtraError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader of our output left (`judge-gateway schema | head`): not an error of ours.
        # Point stdout at /dev/null so the interpreter's last flush at exit cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
