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

    runs = load_runs(args.run_dirs)
    if args.export:
        from ..browse.export import export_report

        size = export_report(runs, Path(args.export))
        print(f"wrote {args.export} ({size / 1e6:.1f} MB, {sum(len(r.lines) for r in runs)} samples)")
        return 0
    import uvicorn

    from ..browse.app import allowed_hosts, create_browse_app

    if not is_loopback(args.host):
        print(f"warning: the browser has no authentication; {args.host} serves these runs' media to "
              "anyone who can reach it", file=sys.stderr)
    print(f"browsing {len(runs)} run(s) at http://{args.host}:{args.port}/", file=sys.stderr)
    hosts = allowed_hosts(args.host, args.allowed_host)
    uvicorn.run(create_browse_app(runs, hosts), host=args.host, port=args.port, log_level="warning")
    return 0


def register_browse(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("browse", help="a local web page over scored run folders (or --export one HTML file)")
    s.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="folders written by `score -o`")
    s.add_argument("--host", default="127.0.0.1", help="bind address (default: this machine only)")
    s.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1")
    s.add_argument("--allowed-host", action="append", metavar="NAME",
                   help="a Host header to answer besides localhost, 127.0.0.1 and --host (repeatable; "
                        "needed with --host 0.0.0.0)")
    s.add_argument("--export", metavar="REPORT.html", help="write one self-contained HTML file instead")
    s.set_defaults(func=_cmd_browse)
