"""Make a CUDA build of torchvision importable next to a CPU torch (idempotent).

torchvision registers fake kernels for ops its C extension would define; with the extension
unloadable (CUDA wheel, CPU torch) `import torchvision` then fails. Guard those registrations
so they are skipped when torchvision.extension._has_ops() is false. A guarded line no longer
matches the pattern, so running this twice changes nothing.

Run with the target venv's interpreter: `<venv>/bin/python scripts/patch_torchvision.py [tag]`.
"""

import importlib.util
import pathlib
import re
import sys

tag = sys.argv[1] if len(sys.argv) > 1 else "patch_torchvision"
spec = importlib.util.find_spec("torchvision")  # does not import the package
if spec is None or not spec.submodule_search_locations:
    sys.exit("torchvision is not installed in this venv")
path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "_meta_registrations.py"
src = path.read_text()
pattern = re.compile(
    r'^(?P<indent>[ \t]*)@torch\.library\.register_fake\((?P<arg>"torchvision::[A-Za-z0-9_.]+")\)[ \t]*$',
    re.MULTILINE,
)
guarded = (
    r"\g<indent>@(torch.library.register_fake(\g<arg>) "
    r"if torchvision.extension._has_ops() else (lambda fn: fn))  # patched by judge-gateway"
)
new, count = pattern.subn(guarded, src)
if count:
    path.write_text(new)
    for pyc in path.parent.joinpath("__pycache__").glob("_meta_registrations.*.pyc"):
        pyc.unlink()
    print(f"[{tag}] guarded {count} register_fake registration(s) in {path}")
else:
    print(f"[{tag}] {path} already patched (or nothing to patch)")
