"""`judge-gateway prompts list|show|render|diff|lock|verify|new` (and `compare`, from tune.py).

Your own template folders are named with `--dir DIR` (repeatable) or read from a config's
`[prompts] dirs` (`--config FILE`); the package's own templates are always there too.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path

from .tune import register_compare

DEFAULT_NEW_DIR = "templates"


def _dirs(args: argparse.Namespace) -> list[str]:
    """The folders the flags name: --dir ones (from the working directory), then the config's
    [prompts] dirs (from the config file's folder)."""
    dirs = [str(Path(d).resolve()) for d in args.dir or []]
    if args.config:
        from ..config import ConfigError, PromptsConfig

        path = Path(args.config)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise ConfigError(f"{path}: {err}") from None
        section = PromptsConfig.model_validate(data.get("prompts") or {},
                                               context={"base_dir": str(path.resolve().parent)})
        dirs += [d for d in section.dirs if d not in dirs]
    return dirs


def _cmd_prompts(args: argparse.Namespace) -> int:
    from .. import prompts

    dirs = _dirs(args)
    if args.prompts_cmd == "list":
        for t in prompts.list_templates(dirs):
            print(f"{t.ref:32s} {t.kind:12s} sha256:{t.sha256[:16]}  {t.description}")
        return 0
    if args.prompts_cmd == "show":
        t = prompts.load_template(args.ref, dirs)
        sys.stdout.write(t.path.read_text(encoding="utf-8"))
        print(f"\n# {t.ref} sha256:{t.sha256}")
        return 0
    if args.prompts_cmd == "render":
        t = prompts.load_template(args.ref, dirs)
        if args.json:
            parts = {slot: [{"type": "video_url" if slot == "video" else "image_url",
                             ("video_url" if slot == "video" else "image_url"): {"url": f"<{slot}>"}}]
                     * t.media_slots.count(slot) for slot in set(t.media_slots)}
            print(json.dumps(t.render(args.prompt, parts), indent=2))
        else:
            print(t.render_text(args.prompt))
        return 0
    if args.prompts_cmd == "new":
        folder = Path(args.dir[0]) if args.dir else Path(dirs[0]) if dirs else Path(DEFAULT_NEW_DIR)
        path = prompts.new_template(args.family, args.source, folder, dirs)
        print(f"wrote {path} (a draft): edit it, then release it with "
              f"`judge-gateway prompts lock --dir {folder}`; pin it as {args.family}@{path.stem}")
        if not args.config:
            print(f"configs find it with: [prompts] dirs = [\"{folder}\"] (relative to the config file)")
        return 0
    if args.prompts_cmd == "diff":
        return _diff(args, dirs)
    if args.prompts_cmd == "lock":
        added = [ref for folder in dirs for ref in prompts.lock_new_templates(folder)] if dirs \
            else prompts.lock_new_templates()
        problems = prompts.verify_lock(dirs)
        for ref in added:
            print(f"locked {ref}")
        if not added:  # said, so that a lock that changed nothing is not taken for one that failed
            where = ", ".join(dirs) if dirs else "the package's templates"
            print(f"nothing new to lock: every template version in {where} is already in its lock file")
        for p in problems:
            print(f"error: {p}", file=sys.stderr)
        return 1 if problems else 0
    if args.prompts_cmd == "verify":
        problems = prompts.verify_lock(dirs)
        for p in problems:
            print(f"error: {p}", file=sys.stderr)
        if not problems:
            print("all released templates match the lock")
        return 1 if problems else 0
    raise AssertionError(args.prompts_cmd)


def _folders(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", action="append", metavar="DIR",
                   help="a folder of your own template families (repeatable)")
    p.add_argument("--config", help="read the template folders from this config's [prompts] dirs")


def _diff(args: argparse.Namespace, dirs: list[str]) -> int:
    """A unified diff of two templates' files, or (--rendered) of the text each would send."""
    import difflib

    from .. import prompts

    a, b = prompts.load_template(args.ref_a, dirs), prompts.load_template(args.ref_b, dirs)
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
    _folders(ps.add_parser("list", help="every released template with its hash"))
    x = ps.add_parser("show", help="the exact template file and its sha256")
    x.add_argument("ref", help="family@version")
    _folders(x)
    x = ps.add_parser("render", help="the messages a judge would send")
    x.add_argument("ref", help="family@version")
    x.add_argument("--prompt", default="a photo of a cat", help="the generation prompt")
    x.add_argument("--json", action="store_true", help="print OpenAI messages as JSON")
    _folders(x)
    x = ps.add_parser("diff", help="what changed between two template versions (exit 1 when they differ)")
    x.add_argument("ref_a", help="family@version")
    x.add_argument("ref_b", help="family@version")
    x.add_argument("--rendered", action="store_true",
                   help="compare the text each sends for --prompt instead of the files")
    x.add_argument("--prompt", default="a photo of a cat", help="the generation prompt (with --rendered)")
    x.add_argument("-U", "--context", type=int, default=3, help="lines of context")
    _folders(x)
    _folders(ps.add_parser("lock", help="add new template versions to the lock file (of each --dir, else the package's)"))
    _folders(ps.add_parser("verify", help="check every released template against its lock"))
    x = ps.add_parser("new", help="start a template family of your own (or its next version) from a released template")
    x.add_argument("family", help="the new family's name (or one of yours, for its next version)")
    x.add_argument("--from", dest="source", required=True, metavar="REF",
                   help="family@version to start from, e.g. cosmos_reason1@1")
    _folders(x)
    s.set_defaults(func=_cmd_prompts)
    register_compare(ps)  # sets its own func
