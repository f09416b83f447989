"""One cache rule for every tiny model the tests (and the bench) build.

An entry is `<JG_TEST_CACHE or <repo>/.cache>/<name>-<digest>`, where the digest hashes the
builder's source (its module, the tests/support modules it imports, transitively, and the
judge_gateway modules they import by name), the builder's arguments, and the versions installed in
the venv whose interpreter runs it: change any of them and the model is rebuilt. A build writes to
a temporary folder renamed into place once its marker file exists, so a half-built entry never
counts. Entries are relocatable: a cached file that records a path records it relative to its entry
(`resolve_entry_paths` gives the absolute form a library needs, in a folder outside the cache).
"""

from __future__ import annotations

import ast
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    return Path(os.environ.get("JG_TEST_CACHE", ROOT / ".cache"))


def python_path() -> str:
    """The checkout first, then what PYTHONPATH already holds (e.g. wheels unpacked on a GPU box)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)


def _module_file(dotted: str) -> Path | None:
    """The source file of a module of this checkout, or None (a third-party or missing module)."""
    base = ROOT.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported_modules(path: Path) -> set[str]:
    """Every module an `import` / `from ... import` in the file names (also inside functions);
    for `from pkg import name`, both `pkg` and `pkg.name` (name may be a submodule)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def builder_sources(module: str) -> list[Path]:
    """The builder module's file, the tests.support modules it imports (transitively) and the
    judge_gateway modules those import by name (their own imports are not followed)."""
    seen: dict[Path, None] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        path = _module_file(name)
        if path is None or path in seen:
            continue
        seen[path] = None
        if name.startswith("tests."):
            todo.extend(m for m in _imported_modules(path) if m.startswith(("tests.support", "judge_gateway")))
    return sorted(seen)


def venv_versions(python: Path) -> list[str]:
    """The `name-version.dist-info` entries of the venv that `python` belongs to."""
    venv = Path(python).parent.parent
    return sorted(p.name for p in venv.glob("lib/python*/site-packages/*.dist-info"))


def builder_digest(module: str, python: Path, args: Iterable[str] = ()) -> str:
    h = hashlib.sha256()
    for path in builder_sources(module):
        h.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    h.update("\0".join(args).encode() + b"\0")
    h.update("\n".join(venv_versions(python)).encode())
    return h.hexdigest()[:12]


def cached_build(name: str, *, python: Path, module: str, marker: str, args: Iterable[str] = (),
                 timeout: float = 900) -> Path:
    """Run `python -m module OUT *args` once per digest; return the complete entry."""
    args = list(args)
    out = cache_dir() / f"{name}-{builder_digest(module, python, args)}"
    if (out / marker).exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{out.name}.tmp-", dir=out.parent))
    try:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "PYTHONPATH": python_path()}
        done = subprocess.run([str(python), "-m", module, str(tmp), *args], env=env, cwd=ROOT, timeout=timeout,
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{module} failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
        if not (tmp / marker).exists():
            raise RuntimeError(f"{module} finished without writing {marker} in {tmp}")
        if (out / marker).exists():  # another session finished the same build first
            shutil.rmtree(tmp)
        else:
            shutil.rmtree(out, ignore_errors=True)  # a half-built leftover of an older layout
            try:
                tmp.rename(out)
            except OSError:  # another session (an xdist worker) renamed the same build in between
                if not (out / marker).exists():
                    raise
                shutil.rmtree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def relative_to_entry(path: Path, entry: Path) -> str:
    """How a builder records a path inside its entry: relative, so the entry can move."""
    return Path(path).relative_to(entry).as_posix()


def resolved_dir(entry: Path) -> Path:
    """Where resolve_entry_paths puts an entry's resolved files: outside the cache, one folder per
    entry *location* (two checkouts cache the same `<name>-<digest>`; a folder named by that alone
    would link one checkout's tests into the other's cache, and break when that one is removed)."""
    import tempfile

    where = hashlib.sha256(str(Path(entry).resolve()).encode()).hexdigest()[:8]
    return Path(tempfile.gettempdir()) / "jg-tiny-resolved" / f"{Path(entry).name}-{where}"


def _link(link: Path, target: Path) -> None:
    """`link` -> `target`, replacing a link that points elsewhere or dangles; atomic (a rename), so
    concurrent sessions never see a missing link."""
    if link.is_symlink() and Path(os.readlink(link)) == target:
        return
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    os.replace(tmp, link)


def resolve_entry_paths(entry: Path, relpath: str, dest: Path, keys: Iterable[str]) -> Path:
    """A copy of the entry's JSON / YAML file `relpath` at `dest`, with the values under `keys`
    (dotted: "model_config.model_name_or_path") made absolute against the entry, for libraries
    that read a path from the file. Other files of the entry are linked beside it."""
    import json

    src = entry / relpath
    dest.mkdir(parents=True, exist_ok=True)
    for sibling in src.parent.iterdir():
        if sibling.name != src.name:
            _link(dest / sibling.name, sibling.resolve())
    is_json = src.suffix == ".json"
    if not is_json:
        import yaml  # only for YAML: PyYAML is not declared for .venv (it comes with the ocr extra)
    data = json.loads(src.read_text()) if is_json else yaml.safe_load(src.read_text())
    for key in keys:
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = str((entry / node[leaf]).resolve())
    out = dest / src.name
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")  # written whole, then renamed: readers never see half
    tmp.write_text(json.dumps(data, indent=2) if is_json else yaml.safe_dump(data, sort_keys=False))
    os.replace(tmp, out)
    return out
