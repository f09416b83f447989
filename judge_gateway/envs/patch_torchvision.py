"""Make a CUDA build of torchvision importable next to a CPU torch (idempotent).

torchvision registers fake kernels for ops its C extension would define; with the extension
unloadable (CUDA wheel, CPU torch) `import torchvision` then fails. Guard those registrations
so they are skipped when torchvision.extension._has_ops() is false: where the extension loads,
nothing changes. A guarded line no longer matches the pattern, so running this twice changes nothing.

Run by path with the target venv's interpreter (that venv need not hold judge-gateway):
`<venv>/bin/python judge_gateway/envs/patch_torchvision.py [tag]`; the environment builder does.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import sys

PATTERN = re.compile(
    r'^(?P<indent>[ \t]*)@torch\.library\.register_fake\((?P<arg>"torchvision::[A-Za-z0-9_.]+")\)[ \t]*$',
    re.MULTILINE,
)
GUARDED = (
    r"\g<indent>@(torch.library.register_fake(\g<arg>) "
    r"if torchvision.extension._has_ops() else (lambda fn: fn))  # patched by judge-gateway"
)


def guard(source: str) -> tuple[str, int]:
    """The source with every unguarded registration guarded, and how many were."""
    return PATTERN.subn(GUARDED, source)


def main(tag: str) -> int:
    spec = importlib.util.find_spec("torchvision")  # does not import the package
    if spec is None or not spec.submodule_search_locations:
        print(f"[{tag}] torchvision is not installed in this venv", file=sys.stderr)
        return 1
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "_meta_registrations.py"
    new, count = guard(path.read_text())
    if count:
        # A new file renamed over the old one, never a write in place: the installed file may be a
        # hard link shared with sibling venvs (judge_gateway/envs/share.py), patched or not.
        tmp = path.with_name(f".{path.name}.patching")
        tmp.write_text(new)
        tmp.chmod(path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
        for pyc in path.parent.joinpath("__pycache__").glob("_meta_registrations.*.pyc"):
            pyc.unlink()
        print(f"[{tag}] guarded {count} register_fake registration(s) in {path}")
    else:
        print(f"[{tag}] {path} already patched (or nothing to patch)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "patch_torchvision"))
