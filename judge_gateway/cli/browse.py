"""`judge-gateway browse RUN_DIR...`: a local web page over scored run folders, or one HTML file."""

from __future__ import annotations

import argparse
import sys

from ..config import is_loopback


def _cmd_browse(args: argparse.Namespace) -> int:
    from ..extras import require_extra

    require_extra("browse", "browse")  # jinja2 and matplotlib: checked before any page is drawn
    from pathlib import Path

    from ..browse.data import load_runs

    if not args.run_dirs and not args.gateway:
        print("error: name a run folder (RUN_DIR) or a gateway to follow (--gateway URL)", file=sys.stderr)
        return 2
    runs = load_runs(args.run_dirs)
    if args.export:
        if not runs:
            print("error: --export needs run folders", file=sys.stderr)
            return 2
        from ..browse.export import export_report

        size = export_report(runs, Path(args.export))
        print(f"wrote {args.export} ({size / 1e6:.1f} MB, {sum(len(r.lines) for r in runs)} samples)")
        return 0
    import uvicorn

    from ..browse.app import allowed_hosts, create_browse_app
    from ..browse.watch import GatewayWatch

    if not is_loopback(args.host):
        print(f"warning: the browser has no authentication; {args.host} serves these runs' media to "
              "anyone who can reach it", file=sys.stderr)
    following = f" and the watch of {args.gateway}" if args.gateway else ""
    print(f"browsing {len(runs)} run(s){following} at http://{args.host}:{args.port}/", file=sys.stderr)
    hosts = allowed_hosts(args.host, args.allowed_host)
    gateway = GatewayWatch(args.gateway, args.api_key) if args.gateway else None
    uvicorn.run(create_browse_app(runs, hosts, refresh_s=args.refresh, gateway=gateway), host=args.host,
                port=args.port, log_level="warning")
    return 0


def register_browse(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("browse", help="a local web page over scored run folders (or --export one HTML file)")
    s.add_argument("run_dirs", nargs="*", metavar="RUN_DIR",
                   help="folders written by `score -o`, or a watch run's folder (watch.folder/RUN): its watch page "
                        "follows the gateway writing it")
    s.add_argument("--host", default="127.0.0.1", help="bind address (default: this machine only)")
    s.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1")
    s.add_argument("--allowed-host", action="append", metavar="NAME",
                   help="a Host header to answer besides localhost, 127.0.0.1 and --host (repeatable; "
                        "needed with --host 0.0.0.0)")
    s.add_argument("--export", metavar="REPORT.html", help="write one self-contained HTML file instead")
    s.add_argument("--refresh", type=int, default=10, metavar="S",
                   help="a watch page reloads itself every S seconds (0: never; default 10)")
    s.add_argument("--gateway", metavar="URL", help="follow the watch of a running gateway (GET /v1/watch): "
                                                   "the /live page")
    s.add_argument("--api-key", help="Bearer token for --gateway")
    s.set_defaults(func=_cmd_browse)
