"""`judge-gateway serve` (the HTTP service, here or on Ray Serve) and `ray-status`."""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import socket
import sys
from pathlib import Path
from typing import Any

from ..config import (
    check_api_key,
    is_loopback,
    load_config,
    load_config_report,
    resolve_config_path,
    shipped_configs,
)
from ..extras import install_command, require_extra
from ..exceptions import Unavailable


def startup_lines(cfg: Any, config_ref: str | None) -> list[str]:
    """What the serve log opens with: the version, the config file it loaded and the judges."""
    from .. import __version__
    from ..runs import config_sha256

    path = resolve_config_path(config_ref)
    shipped = {p.resolve(): name for name, p in shipped_configs().items()}
    name = shipped.get(path.resolve())
    what = f" (shipped config `{name}`)" if name else ""
    default = [n for n, j in cfg.judges.items() if j.default]
    named = [n for n, j in cfg.judges.items() if not j.default]

    def listed(names: list[str]) -> str:
        return ", ".join(f"{n} ({cfg.judges[n].kind})" for n in names) or "none"

    return [f"judge-gateway {__version__}, package {Path(__file__).resolve().parents[1]}",
            f"config {path}{what}, sha256 {config_sha256(cfg.model_dump(mode='json'))[:16]}",
            f"{len(cfg.judges)} judges; scored by default: {listed(default)}; on request: {listed(named)}"]


def port_in_use(host: str, port: int) -> str | None:
    """Why `judge-gateway serve` could not listen on host:port, or None when it can. Checked
    before anything starts: uvicorn only finds a port taken after its startup (head workers
    loaded, "Application startup complete"), then exits. Bound as uvicorn binds (SO_REUSEADDR,
    so a port in TIME_WAIT is free) and released at once; port 0 (any free port) is never taken."""
    if port == 0:
        return None
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except OSError as err:
        return f"cannot resolve {host}: {err}"
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as err:
            reason = "the port is already in use" if err.errno == errno.EADDRINUSE else err.strerror or str(err)
            return f"cannot listen on {host}:{port}: {reason}"
    return None


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from ..gateway import Gateway
    from ..server import create_app
    from ..server.guards import uvicorn_options
    from ..server.heap import freeze_startup_objects, tune_gc_for_serving
    from . import local_redis

    cfg, rewards_toml = load_config_report(args.config)
    if rewards_toml is not None:  # cosmos-rl's own rewards.toml: say what each field became
        print(f"{args.config}: cosmos-rl reward service config (rewards.toml), mapped onto judge-gateway's:")
        for line in rewards_toml.lines:
            print(f"  {line}")
    if cfg.store.kind == "redis":  # checked before anything starts, like every extra a command needs
        require_extra("redis", "store.kind = 'redis'")
    if args.log_level.lower() in ("trace", "debug", "info"):
        for line in startup_lines(cfg, args.config):
            print(f"INFO:     {line}", file=sys.stderr, flush=True)
    # An empty --api-key would accept requests without a key: refused (main prints the error).
    keys = cfg.server.resolved_api_keys() + [check_api_key(k, "--api-key") for k in args.api_key or []]
    if args.ray is not None or cfg.ray is not None:  # a [ray] section means Ray mode
        colocated = [n for n, j in cfg.judges.items() if j.residency.colocated]
        if colocated:
            print(f"error: judges {', '.join(colocated)} are colocated (residency): colocated judges run on one "
                  "machine, beside the trainer; Ray Serve places replicas itself and several gateway replicas "
                  "would each put the same servers to sleep: keep them resident in Ray mode", file=sys.stderr)
            return 2
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
    if not cfg.server.public_bind_ok(keys):
        print(f"error: refusing to bind {cfg.server.host} without API keys (use --api-key or "
              "server.api_keys; or list the clients' networks in server.allow_networks; or set "
              "server.allow_unauthenticated_public)", file=sys.stderr)
        return 2
    taken = port_in_use(cfg.server.host, cfg.server.port)
    if taken:
        print(f"error: {taken} (another `judge-gateway serve`, or another program: `ss -ltnp 'sport = "
              f":{cfg.server.port}'` names it); stop it, or choose another port with --port or server.port",
              file=sys.stderr)
        return 2
    redis = None
    if rewards_toml is not None and rewards_toml.redis is not None:
        try:
            redis = local_redis.ensure_redis(*rewards_toml.redis)
        except local_redis.RedisUnavailable as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        host, port = rewards_toml.redis
        print(f"  Redis at {host}:{port}: " + (f"started (pid {redis.pid}, data in run/redis-{port})"
                                               if redis is not None else "running"))
    try:
        gateway = Gateway(cfg)
        if gateway.residency.colocated:  # refuse now, with the reason, what the app's start would refuse
            from ..residency import ResidencyUnsupported

            try:
                asyncio.run(gateway.residency.verify())
            except ResidencyUnsupported as err:
                print(f"error: {err}", file=sys.stderr)
                return 2
        app = create_app(gateway, api_keys=keys)
        freeze_startup_objects()  # full GC passes walk what requests make, not the started process
        tune_gc_for_serving()  # and young ones come less often (server/heap.py)
        uvicorn.run(app, host=cfg.server.host, port=cfg.server.port, log_level=args.log_level,
                    **uvicorn_options(cfg.server))
    finally:
        local_redis.stop(redis)
    return 0


def _serve_on_ray(cfg: Any, keys: list[str], address: str | None) -> int:
    from ..config import RayConfig

    if cfg.ray is None:
        cfg.ray = RayConfig()
    if not is_loopback(cfg.ray.http_host) and not keys \
            and not cfg.server.allow_unauthenticated_public:
        print(f"error: refusing to bind Serve's proxy on {cfg.ray.http_host} without API keys", file=sys.stderr)
        return 2
    try:
        from ..ray_mode.deploy import deploy
    except ImportError as err:
        print(f"error: Ray mode needs the `ray` extra ({install_command('ray')}; in a checkout "
              f"scripts/setup_ray.sh): {err}", file=sys.stderr)
        return 2
    try:
        url = deploy(cfg, keys, address)
    except Unavailable as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"deployed {cfg.ray.app_name} on Ray: {url} (judge-gateway ray-status shows its replicas)")
    return 0


def _cmd_ray_status(args: argparse.Namespace) -> int:
    from ..config import RayConfig

    cfg = load_config(args.config)
    rc = cfg.ray or RayConfig()
    try:
        from ..ray_mode.deploy import connect, format_status, status
    except ImportError as err:
        print(f"error: Ray mode needs the `ray` extra ({install_command('ray')}; in a checkout "
              f"scripts/setup_ray.sh): {err}", file=sys.stderr)
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


def add_gateway_options(s: argparse.ArgumentParser) -> None:
    """The options of a served gateway (serve, and up, which passes them on to serve)."""
    s.add_argument("--config", help="TOML config file, or a shipped config by name (`judge-gateway configs` "
                                    "lists them; default: the embedded `default`)")
    s.add_argument("--host", help="override server.host")
    s.add_argument("--port", type=int, help="override server.port")
    s.add_argument("--api-key", action="append", help="accepted Bearer token (repeatable)")


def register_serve(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("serve", help="run the HTTP service")
    add_gateway_options(s)
    s.add_argument("--log-level", default="info", help="uvicorn's log level (critical, error, warning, info, debug)")
    s.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                   help="deploy on Ray Serve and return (also when the config has a [ray] section; "
                        "ADDRESS overrides ray.address)")
    s.set_defaults(func=_cmd_serve)

    s = sub.add_parser("ray-status", help="Ray mode: deployments, replicas and their queue depths")
    s.add_argument("--config", help="TOML config with the [ray] section (default: the embedded one)")
    s.add_argument("--address", help="Ray cluster (default: ray.address)")
    s.add_argument("--json", action="store_true", help="print the status as JSON")
    s.set_defaults(func=_cmd_ray_status)
