"""`judge-gateway schema` and `judges`: what the service takes and which judges a config has."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from ..config import load_config


def _cmd_schema(args: argparse.Namespace) -> int:
    from ..schema import RewardRequest, RewardResponse

    model = RewardRequest if args.request else RewardResponse
    print(json.dumps(model.model_json_schema(), indent=2))
    return 0


def _cmd_judges(args: argparse.Namespace) -> int:
    from ..gateway import Gateway

    async def run() -> list[Any]:
        gw = Gateway(load_config(args.config))
        try:
            return await gw.judge_infos()
        finally:
            await gw.aclose()

    for info in asyncio.run(run()):
        template = f"{info.template.id}@{info.template.version}" if info.template else "-"
        state = "ready" if info.ready else f"NOT READY ({info.ready_reason})"
        print(f"{info.name:24s} {info.kind:12s} {template:28s} w={info.weight:<5g} {state}")
    return 0


def register_schema(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("schema", help="print the score schema (JSON Schema)")
    s.add_argument("--request", action="store_true", help="print the request schema instead")
    s.set_defaults(func=_cmd_schema)


def register_judges(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("judges", help="configured judges and their readiness")
    s.add_argument("--config", help="TOML config (default: the embedded one)")
    s.set_defaults(func=_cmd_judges)
