"""`judge-gateway prompts list|show|render|diff|lock|verify` (and `compare`, from tune.py)."""

from __future__ import annotations

import argparse
import json
import sys

from .tune import register_compare


def _cmd_prompts(args: argparse.Namespace) -> int:
    from .. import prompts

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
    if args.prompts_cmd == "diff":
        return _diff(args)
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


def _diff(args: argparse.Namespace) -> int:
    """A unified diff of two templates' files, or (--rendered) of the text each would send."""
    import difflib

    from .. import prompts

    a, b = prompts.load_template(args.ref_a), prompts.load_template(args.ref_b)
    if args.rendered:
        text_a, text_b = a.render_text(args.prompt), b.render_text(args.prompt)
    else:
        text_a, text_b = a.path.read_text(encoding="utf-8"), b.path.read_text(encoding="utf-8")
    diff = list(difflib.unified_diff(text_a.splitlines(keepends=True), text_b.splitlines(keepends=True),
                                     fromfile=f"{a.ref} sha256:{a.sha256[:16]}",
                                     tofile=f"{b.ref} sha256:{b.sha256[:16]}", n=args.context))
    sys.stdout.writelines(line if line.endswith("\n") else line + "\n" for line in diff)
    if not diff:
        print(f"{a.ref} and {b.ref} are the same" + (" once rendered" if args.rendered else ""), file=sys.stderr)
    return 1 if diff else 0


def register_prompts(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("prompts", help="versioned prompt templates")
    ps = s.add_subparsers(dest="prompts_cmd", required=True)
    ps.add_parser("list", help="every released template with its hash")
    x = ps.add_parser("show", help="the exact template file and its sha256")
    x.add_argument("ref", help="family@version")
    x = ps.add_parser("render", help="the messages a judge would send")
    x.add_argument("ref", help="family@version")
    x.add_argument("--prompt", default="a photo of a cat", help="the generation prompt")
    x.add_argument("--json", action="store_true", help="print OpenAI messages as JSON")
    x = ps.add_parser("diff", help="what changed between two template versions (exit 1 when they differ)")
    x.add_argument("ref_a", help="family@version")
    x.add_argument("ref_b", help="family@version")
    x.add_argument("--rendered", action="store_true",
                   help="compare the text each sends for --prompt instead of the files")
    x.add_argument("--prompt", default="a photo of a cat", help="the generation prompt (with --rendered)")
    x.add_argument("-U", "--context", type=int, default=3, help="lines of context")
    ps.add_parser("lock", help="add new template versions to the lock file")
    ps.add_parser("verify", help="check every released template against the lock")
    s.set_defaults(func=_cmd_prompts)
    register_compare(ps)  # sets its own func
