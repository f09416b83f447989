"""The `judge-gateway` command: serve, score, browse, eval, schema, prompts, judges, tune."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from typing import Any

from .config import ConfigError, check_api_key, load_config
from .tuning.commands import register_compare, register_tune


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .gateway import Gateway
    from .server import create_app
    from .server.guards import uvicorn_options

    cfg = load_config(args.config)
    # An empty --api-key would accept requests without a key: refused (main prints the error).
    keys = cfg.server.resolved_api_keys() + [check_api_key(k, "--api-key") for k in args.api_key or []]
    if args.ray is not None or cfg.ray is not None:  # a [ray] section means Ray mode
        unused = [name for name, given in (("--host", bool(args.host)), ("--port", args.port is not None),
                                           ("server.host", "host" in cfg.server.model_fields_set),
                                           ("server.port", "port" in cfg.server.model_fields_set)) if given]
        if unused:
            print(f"warning: {', '.join(unused)} not used in Ray mode: Serve's proxy listens on "
                  "ray.http_host / ray.http_port", file=sys.stderr)
        return _serve_on_ray(cfg, keys, args.ray or None)
    if args.host:
        cfg.server.host = args.host
    if args.port is not None:
        cfg.server.port = args.port
    if cfg.server.host not in ("127.0.0.1", "localhost", "::1") and not keys \
            and not cfg.server.allow_unauthenticated_public:
        print(f"error: refusing to bind {cfg.server.host} without API keys (use --api-key or "
              "server.api_keys; or set server.allow_unauthenticated_public)", file=sys.stderr)
        return 2
    app = create_app(Gateway(cfg), api_keys=keys)
    uvicorn.run(app, host=cfg.server.host, port=cfg.server.port, log_level=args.log_level,
                **uvicorn_options(cfg.server))
    return 0


def _serve_on_ray(cfg: Any, keys: list[str], address: str | None) -> int:
    from .config import RayConfig

    if cfg.ray is None:
        cfg.ray = RayConfig()
    if cfg.ray.http_host not in ("127.0.0.1", "localhost", "::1") and not keys \
            and not cfg.server.allow_unauthenticated_public:
        print(f"error: refusing to bind Serve's proxy on {cfg.ray.http_host} without API keys", file=sys.stderr)
        return 2
    try:
        from .ray_mode.deploy import deploy
    except ImportError as err:
        print(f"error: Ray mode needs the `ray` extra (scripts/setup_ray.sh): {err}", file=sys.stderr)
        return 2
    url = deploy(cfg, keys, address)
    print(f"deployed {cfg.ray.app_name} on Ray: {url} (judge-gateway ray-status shows its replicas)")
    return 0


def _cmd_ray_status(args: argparse.Namespace) -> int:
    from .config import RayConfig

    cfg = load_config(args.config)
    rc = cfg.ray or RayConfig()
    try:
        from .ray_mode.deploy import connect, format_status, status
    except ImportError as err:
        print(f"error: Ray mode needs the `ray` extra (scripts/setup_ray.sh): {err}", file=sys.stderr)
        return 2
    connect(rc, args.address)
    app_status, deployments = status(rc.app_name)
    if args.json:
        from dataclasses import asdict

        print(json.dumps({"application": rc.app_name, "status": app_status,
                          "deployments": [{**asdict(d), "queue_depth": d.queue_depth} for d in deployments]}))
    else:
        print(format_status(rc.app_name, app_status, deployments))
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    from .schema import RewardRequest, RewardResponse

    model = RewardRequest if args.request else RewardResponse
    print(json.dumps(model.model_json_schema(), indent=2))
    return 0


def _cmd_prompts(args: argparse.Namespace) -> int:
    from . import prompts

    if args.prompts_cmd == "list":
        for t in prompts.list_templates():
            print(f"{t.ref:32s} {t.kind:12s} sha256:{t.sha256[:16]}  {t.description}")
        return 0
    if args.prompts_cmd == "show":
        t = prompts.load_template(args.ref)
        sys.stdout.write(t.path.read_text(encoding="utf-8"))
        print(f"\n# {t.ref} sha256:{t.sha256}")
        return 0
    if args.prompts_cmd == "render":
        t = prompts.load_template(args.ref)
        if args.json:
            parts = {slot: [{"type": "video_url" if slot == "video" else "image_url",
                             ("video_url" if slot == "video" else "image_url"): {"url": f"<{slot}>"}}]
                     * t.media_slots.count(slot) for slot in set(t.media_slots)}
            print(json.dumps(t.render(args.prompt, parts), indent=2))
        else:
            print(t.render_text(args.prompt))
        return 0
    if args.prompts_cmd == "lock":
        added = prompts.lock_new_templates()
        problems = prompts.verify_lock()
        for ref in added:
            print(f"locked {ref}")
        for p in problems:
            print(f"error: {p}", file=sys.stderr)
        return 1 if problems else 0
    if args.prompts_cmd == "verify":
        problems = prompts.verify_lock()
        for p in problems:
            print(f"error: {p}", file=sys.stderr)
        if not problems:
            print("all released templates match the lock")
        return 1 if problems else 0
    raise AssertionError(args.prompts_cmd)


def _cmd_judges(args: argparse.Namespace) -> int:
    from .gateway import Gateway

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


def _cmd_score(args: argparse.Namespace) -> int:
    from .score_command import run_score_command

    return run_score_command(args)


def _cmd_browse(args: argparse.Namespace) -> int:
    try:
        from .browse.data import load_runs
    except ImportError as err:  # jinja2 comes with the `browse` extra
        print(f"error: browse needs the browse extra (pip install 'judge-gateway[browse]'): {err}", file=sys.stderr)
        return 2
    from pathlib import Path

    runs = load_runs(args.run_dirs)
    if args.export:
        from .browse.export import export_report

        size = export_report(runs, Path(args.export))
        print(f"wrote {args.export} ({size / 1e6:.1f} MB, {sum(len(r.lines) for r in runs)} samples)")
        return 0
    import uvicorn

    from .browse.app import allowed_hosts, create_browse_app

    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: the browser has no authentication; {args.host} serves these runs' media to "
              "anyone who can reach it", file=sys.stderr)
    print(f"browsing {len(runs)} run(s) at http://{args.host}:{args.port}/", file=sys.stderr)
    hosts = allowed_hosts(args.host, args.allowed_host)
    uvicorn.run(create_browse_app(runs, hosts), host=args.host, port=args.port, log_level="warning")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from .evaluation import run_eval_command

    return run_eval_command(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="judge-gateway", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("serve", help="run the HTTP service")
    s.add_argument("--config", help="TOML config (default: the embedded configs/default.toml)")
    s.add_argument("--host", help="override server.host")
    s.add_argument("--port", type=int, help="override server.port")
    s.add_argument("--api-key", action="append", help="accepted Bearer token (repeatable)")
    s.add_argument("--log-level", default="info")
    s.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                   help="deploy on Ray Serve and return (also when the config has a [ray] section; "
                        "ADDRESS overrides ray.address)")
    s.set_defaults(func=_cmd_serve)

    s = sub.add_parser("ray-status", help="Ray mode: deployments, replicas and their queue depths")
    s.add_argument("--config")
    s.add_argument("--address", help="Ray cluster (default: ray.address)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_ray_status)

    s = sub.add_parser("schema", help="print the score schema (JSON Schema)")
    s.add_argument("--request", action="store_true", help="print the request schema instead")
    s.set_defaults(func=_cmd_schema)

    s = sub.add_parser("prompts", help="versioned prompt templates")
    ps = s.add_subparsers(dest="prompts_cmd", required=True)
    ps.add_parser("list", help="every released template with its hash")
    x = ps.add_parser("show", help="the exact template file and its sha256")
    x.add_argument("ref", help="family@version")
    x = ps.add_parser("render", help="the messages a judge would send")
    x.add_argument("ref", help="family@version")
    x.add_argument("--prompt", default="a photo of a cat", help="the generation prompt")
    x.add_argument("--json", action="store_true", help="print OpenAI messages as JSON")
    ps.add_parser("lock", help="add new template versions to the lock file")
    ps.add_parser("verify", help="check every released template against the lock")
    s.set_defaults(func=_cmd_prompts)
    register_compare(ps)  # sets its own func

    register_tune(sub)

    s = sub.add_parser("judges", help="configured judges and their readiness")
    s.add_argument("--config")
    s.set_defaults(func=_cmd_judges)

    s = sub.add_parser("score", help="score a folder or JSONL of prompts + media into a run folder")
    s.add_argument("input", help="a JSONL file (prompt, image/video paths) or a folder of media "
                                 "(png/jpg/webp, mp4/avi/mov/webm/mkv; prompt from a same-named .txt)")
    s.add_argument("-o", "--output", required=True,
                   help="run folder to write (scores.jsonl, summary.json, run.json); an existing "
                        "one is resumed: samples already scored there are not sent again")
    src = s.add_mutually_exclusive_group()
    src.add_argument("--config", help="score in-process with this config (default: embedded)")
    src.add_argument("--server", help="score through a running service at this URL")
    s.add_argument("--api-key", help="Bearer token for --server")
    s.add_argument("--judges", help="comma-separated judge names (default: the config's defaults)")
    s.add_argument("--batch-size", type=int, default=16, help="samples per request")
    s.add_argument("--concurrency", type=int, default=4, help="requests in flight")
    s.add_argument("--fps", type=float, default=None, help="fps of videos given as frame folders")
    s.add_argument("--no-progress", action="store_true")
    s.set_defaults(func=_cmd_score)

    s = sub.add_parser("browse", help="a local web page over scored run folders (or --export one HTML file)")
    s.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="folders written by `score -o`")
    s.add_argument("--host", default="127.0.0.1", help="bind address (default: this machine only)")
    s.add_argument("--port", type=int, default=8765)
    s.add_argument("--allowed-host", action="append", metavar="NAME",
                   help="a Host header to answer besides localhost, 127.0.0.1 and --host (repeatable; "
                        "needed with --host 0.0.0.0)")
    s.add_argument("--export", metavar="REPORT.html", help="write one self-contained HTML file instead")
    s.set_defaults(func=_cmd_browse)

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
    s.add_argument("--batch-size", type=int, default=16)
    s.add_argument("--concurrency", type=int, default=4)
    s.add_argument("--no-progress", action="store_true")
    s.set_defaults(func=_cmd_eval)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
