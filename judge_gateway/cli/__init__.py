"""The `judge-gateway` command (the console script `judge_gateway.cli:main`; `python -m
judge_gateway.cli`): main.py parses and dispatches, one module per command family."""

from .main import build_parser, main

__all__ = ["build_parser", "main"]
