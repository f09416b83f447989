"""`judge-gateway schema`, `configs` and `judges`: what the service takes, the configs that ship
with it, and which judges a config (or a running service) has and whether they can score."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from ..config import load_config, resolve_config_path, shipped_configs


def _cmd_schema(args: argparse.Namespace) -> int:
    from ..schema import RewardRequest, RewardResponse

    model = RewardRequest if args.request else RewardResponse
    print(json.dumps(model.model_json_schema(), indent=2))
    return 0


def _cmd_configs(args: argparse.Namespace) -> int:
    configs = shipped_configs()
    if args.name is None:
        for name, path in configs.items():
            print(f"{name:16s} {path}")
        print("(load one by name: --config NAME; copy one to edit: judge-gateway configs NAME > my.toml)",
              file=sys.stderr)
        return 0
    if args.name not in configs:
        raise ValueError(f"no shipped config {args.name!r} (shipped: {', '.join(configs)})")
    sys.stdout.write(configs[args.name].read_text(encoding="utf-8"))
    return 0


HEAD_NOT_LOADED = "not loaded: a head loads at first use (`judge-gateway judges NAME` loads it now)"


async def _infos_in_process(cfg: Any, names: list[str]) -> list[tuple[Any, bool | None]]:
    """(info, default) per judge. VLM judges' backends are probed; a head is loaded only when
    named, since loading one is what its first request would do (seconds to minutes)."""
    from ..gateway import Gateway

    gw = Gateway(cfg)
    try:
        if names:
            infos = await gw.judge_infos(names, wait=True)
        else:
            vlm = [n for n, j in cfg.judges.items() if j.kind_spec.runs_on == "vlm"]
            probed = {i.name: i for i in await gw.judge_infos(vlm)}
            infos = [probed.get(n) or gw.judges[n].info(False, HEAD_NOT_LOADED) for n in cfg.judges]
    finally:
        await gw.aclose()
    return [(info, cfg.judges[info.name].default) for info in infos]


async def _infos_from_server(args: argparse.Namespace) -> list[tuple[Any, bool | None]]:
    from ..client import AsyncRewardClient

    client = AsyncRewardClient(args.server, api_key=args.api_key, max_retries=0, timeout=60)
    try:
        return [(info, None) for info in await client.judges.list(args.names or None)]
    finally:
        await client.close()


def _cmd_judges(args: argparse.Namespace) -> int:
    from ..preflight import classify

    if args.server:
        import httpx

        try:
            rows = asyncio.run(_infos_from_server(args))
        except httpx.HTTPError as err:
            raise ValueError(f"cannot ask {args.server}: {type(err).__name__}: {err}") from None
        print(f"judges of the service at {args.server}:", file=sys.stderr)
        cfg = None
    else:
        cfg = load_config(args.config)
        print(f"judges of {resolve_config_path(args.config)}:", file=sys.stderr)
        rows = asyncio.run(_infos_in_process(cfg, args.names))
    if args.json:
        print(json.dumps([{**info.model_dump(mode="json"), **({"default": d} if d is not None else {})}
                          for info, d in rows], indent=2))
        return 0
    for info, default in rows:
        template = f"{info.template.id}@{info.template.version}" if info.template else "-"
        if info.ready:
            state = "ready"
        elif info.ready_reason == HEAD_NOT_LOADED:
            state = HEAD_NOT_LOADED
        else:
            state = f"NOT READY ({info.ready_reason})"
            hint = classify(info, cfg, args.config).hint
            if hint:
                state += f"\n{'':26s}-> {hint}"
        flag = "" if default is None else ("default " if default else "        ")
        if info.residency is not None and info.residency.mode == "colocated":
            state += f", colocated ({info.residency.state})"
        print(f"{info.name:24s} {info.kind:12s} {template:28s} w={info.weight:<5g} {flag}{state}")
    return 0


def register_schema(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("schema", help="print the score schema (JSON Schema)")
    s.add_argument("--request", action="store_true", help="print the request schema instead")
    s.set_defaults(func=_cmd_schema)


def register_configs(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("configs", help="the configs shipped with judge-gateway (load one with --config NAME)")
    s.add_argument("name", nargs="?", help="print this shipped config (to copy and edit it)")
    s.set_defaults(func=_cmd_configs)


def register_judges(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("judges", help="configured judges and whether they can score here")
    s.add_argument("names", nargs="*", metavar="NAME",
                   help="only these judges (in-process, a head named here is loaded to check it)")
    src = s.add_mutually_exclusive_group()
    src.add_argument("--config", help="TOML config or shipped config name (default: the embedded one)")
    src.add_argument("--server", help="ask a running service at this URL instead")
    s.add_argument("--api-key", help="Bearer token for --server")
    s.add_argument("--json", action="store_true", help="print the judges as JSON")
    s.set_defaults(func=_cmd_judges)
