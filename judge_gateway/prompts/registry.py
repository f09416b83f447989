"""Templates by `family@version`: the files `<family>/<version>.toml` of the package's folder and
of your own folders (`[prompts] dirs`), loading (hash-checked against the folder's lock), listing,
and checking or extending a folder's lock over its files.

Every folder is checked the same way: its own `templates.lock` holds the sha256 of each released
file, and a released file whose bytes changed is refused. A family lives in one folder only (the
package's families are never extended from outside: a new wording of ours is a family of yours).
A user folder without a lock file has released nothing yet; the package's lock must exist.

verify_lock and lock_new_templates live here, not in lock.py: they walk this module's files,
and load_template needs the lock's hashes, so lock.py stays the lower of the two.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .lock import _read_lock, _sha256, _write_lock
from .parse import parse_template
from .template import Template, TemplateError

log = logging.getLogger(__name__)

# Read at call time (not bound as defaults), so tests can point the module at a copy.
TEMPLATES_DIR: Path = Path(__file__).resolve().parent
LOCK_PATH: Path = TEMPLATES_DIR / "templates.lock"
LOCK_NAME = "templates.lock"  # a user folder's lock file, in the folder

_FAMILY_RE = re.compile(r"[a-z0-9][a-z0-9_]*")
_VERSION_RE = re.compile(r"[0-9]+(?:\.[0-9]+)*")

TemplateDirs = Sequence[str | Path]  # user folders ([prompts] dirs), after the package's


@dataclass(frozen=True)
class _Folder:
    """One folder of template families and its lock file."""

    root: Path
    lock: Path
    package: bool

    def read_lock(self) -> dict[str, str]:
        if not self.package and not self.lock.exists():
            return {}  # nothing released from this folder yet
        return _read_lock(self.lock)


def _folders(dirs: TemplateDirs = ()) -> list[_Folder]:
    folders = [_Folder(TEMPLATES_DIR, LOCK_PATH, True)]
    for d in dirs:
        root = Path(d)
        if root.resolve() != TEMPLATES_DIR.resolve():
            folders.append(_Folder(root, root / LOCK_NAME, False))
    return folders


def parse_ref(ref: str, dirs: TemplateDirs = ()) -> tuple[str, str]:
    """Split and validate `family@version`; an unpinned family is refused."""
    if not isinstance(ref, str):
        raise TemplateError(f"template ref must be a string 'family@version', got {ref!r}")
    if "@" not in ref:
        hint = _available_hint(ref, dirs) if _FAMILY_RE.fullmatch(ref) else _families_hint(dirs)
        raise TemplateError(
            f"template ref {ref!r} is not pinned: use 'family@version' (released templates are "
            f"immutable, so configs must name the version); {hint}"
        )
    family, _, version = ref.partition("@")
    if not _FAMILY_RE.fullmatch(family):
        raise TemplateError(
            f"template ref {ref!r}: family {family!r} must match {_FAMILY_RE.pattern}; "
            f"{_families_hint(dirs)}"
        )
    if not _VERSION_RE.fullmatch(version):
        raise TemplateError(
            f"template ref {ref!r}: version {version!r} must be a number like '1' or '2'; "
            f"{_available_hint(family, dirs)}"
        )
    return family, version


def _folder_of(family: str, dirs: TemplateDirs) -> _Folder | None:
    """The one folder holding `family`; TemplateError when several do."""
    found = [f for f in _folders(dirs) if (f.root / family).is_dir()]
    if len(found) > 1:
        raise TemplateError(f"template family {family!r} is in {len(found)} folders "
                            f"({', '.join(str(f.root) for f in found)}): a family lives in one folder only")
    return found[0] if found else None


def load_template(ref: str, dirs: TemplateDirs = ()) -> Template:
    """Load, hash-check and validate `family@version`, from the package's folder or one of `dirs`.

    A released (locked) template whose bytes no longer match its folder's lock is refused. A file
    not yet in the lock loads with a warning (drafting a new version); `verify_lock` fails the
    build until it is locked.
    """
    family, version = parse_ref(ref, dirs)
    folder = _folder_of(family, dirs)
    if folder is None:
        raise TemplateError(f"unknown template family {family!r} in {ref!r}; {_families_hint(dirs)}")
    path = folder.root / family / f"{version}.toml"
    if not path.is_file():
        raise TemplateError(f"unknown template version {ref!r}; {_available_hint(family, dirs)}")
    data = path.read_bytes()
    digest = _sha256(data)
    locked = folder.read_lock().get(f"{family}@{version}")
    if locked is None:
        how = "judge-gateway prompts lock" + ("" if folder.package else f" --dir {folder.root}")
        log.warning("template %s (%s) is not in %s: unreleased draft (`%s` releases it)", ref, path,
                    folder.lock, how)
    elif locked != digest:
        raise TemplateError(
            f"released template {path} changed: lock has sha256 {locked}, file has {digest}. "
            "Released templates are immutable: restore the file and put new wording in a new "
            "version."
        )
    # Parsing is cached by content hash, so an edited file is never served from the cache.
    return parse_template(str(path), family, version, digest, data)


def list_templates(dirs: TemplateDirs = ()) -> list[Template]:
    """Every template file of the package and of `dirs`, loaded, sorted by (id, numeric version)."""
    files: dict[str, Path] = {}
    for folder in _folders(dirs):
        files.update(_template_files(folder.root))
    return [load_template(ref, dirs) for ref in _sorted_refs(files)]


def show_template(ref: str, dirs: TemplateDirs = ()) -> str:
    """The template file's exact text plus its sha256 line (for the CLI)."""
    template = load_template(ref, dirs)
    text = template.path.read_text(encoding="utf-8")
    if not text.endswith("\n"):
        text += "\n"
    return f"{text}# sha256: {template.sha256}\n"


# --------------------------------------------------------------------------- lock


def verify_lock(dirs: TemplateDirs = ()) -> list[str]:
    """Problems with the package's lock and each of `dirs`' locks: changed released bytes,
    unlocked files, dangling entries, a family in two folders."""
    problems: list[str] = []
    seen: dict[str, Path] = {}
    for folder in _folders(dirs):
        problems += _verify_folder(folder)
        for family in sorted({ref.partition("@")[0] for ref in _template_files(folder.root)}):
            if family in seen:
                problems.append(f"template family {family!r} is in {seen[family]} and {folder.root}: "
                                "a family lives in one folder only")
            seen.setdefault(family, folder.root)
    return problems


def _verify_folder(folder: _Folder) -> list[str]:
    try:
        lock = folder.read_lock()
    except TemplateError as exc:
        return [str(exc)]
    problems: list[str] = []
    if not folder.package and not folder.root.is_dir():
        return [f"template folder {folder.root} does not exist"]
    files = _template_files(folder.root, problems)
    for ref in _sorted_refs(files):
        path = files[ref]
        digest = _sha256(path.read_bytes())
        if ref not in lock:
            how = "judge-gateway prompts lock" + ("" if folder.package else f" --dir {folder.root}")
            problems.append(f"unlocked template {path} ({ref}, sha256 {digest}): release it with `{how}`")
        elif lock[ref] != digest:
            problems.append(
                f"released template {path} ({ref}) changed: lock has sha256 {lock[ref]}, "
                f"file has {digest}; restore it and put new wording in a new version"
            )
    for ref in sorted(set(lock) - set(files)):
        problems.append(f"dangling lock entry {ref!r} in {folder.lock}: no such template file")
    return problems


def lock_new_templates(folder: str | Path | None = None) -> list[str]:
    """Lock every valid template file not yet in the lock of `folder` (default: the package's);
    existing entries are never changed.

    Each new file is validated first, so a broken template cannot become a released one; a user
    folder may not hold a family of the package's. Returns the refs added, sorted.
    """
    target = _folders()[0] if folder is None else _Folder(Path(folder), Path(folder) / LOCK_NAME, False)
    if not target.root.is_dir():
        raise TemplateError(f"template folder {target.root} does not exist")
    lock = target.read_lock() if target.lock.exists() else {}
    problems: list[str] = []
    files = _template_files(target.root, problems)
    if not target.package:
        ours = {ref.partition("@")[0] for ref in _template_files(TEMPLATES_DIR)}
        problems += [f"{files[ref]}: family {ref.partition('@')[0]!r} is one of the package's; name yours "
                     "differently (`judge-gateway prompts new NEW_FAMILY --from REF`)"
                     for ref in _sorted_refs(files) if ref.partition("@")[0] in ours]
    if problems:
        raise TemplateError("; ".join(problems))
    added: list[str] = []
    for ref in _sorted_refs(files):
        if ref in lock:
            continue
        family, version = parse_ref(ref)
        data = files[ref].read_bytes()
        parse_template(str(files[ref]), family, version, _sha256(data), data)  # validate
        lock[ref] = _sha256(data)
        added.append(ref)
    if added or not target.lock.exists():
        _write_lock(target.lock, lock)
    return added


# --------------------------------------------------------------------------- files


def _template_files(root: Path, problems: list[str] | None = None) -> dict[str, Path]:
    """`family@version` -> path for every `<family>/<version>.toml`; bad names go to problems."""
    files: dict[str, Path] = {}
    if not root.is_dir():
        return files
    for path in sorted(root.glob("*/*.toml")):
        family, version = path.parent.name, path.stem
        if _FAMILY_RE.fullmatch(family) and _VERSION_RE.fullmatch(version):
            files[f"{family}@{version}"] = path
        elif problems is not None:
            problems.append(
                f"template file {path} is not named <family>/<version>.toml "
                f"(family {_FAMILY_RE.pattern}, version like '1')"
            )
    return files


def family_versions(family: str, dirs: TemplateDirs = ()) -> list[str]:
    """The versions of `family` in its folder, numerically sorted ([] for an unknown family)."""
    folder = _folder_of(family, dirs)
    if folder is None:
        return []
    refs = _sorted_refs([r for r in _template_files(folder.root) if r.startswith(f"{family}@")])
    return [r.partition("@")[2] for r in refs]


def _sorted_refs(refs: Mapping[str, Path] | Iterable[str]) -> list[str]:
    def key(ref: str) -> tuple[str, tuple[int, ...]]:
        family, _, version = ref.partition("@")
        return family, tuple(int(n) for n in version.split("."))

    return sorted(refs, key=key)


def _all_refs(dirs: TemplateDirs) -> list[str]:
    refs: list[str] = []
    for folder in _folders(dirs):
        refs += _template_files(folder.root)
    return _sorted_refs(refs)


def _available_hint(family: str, dirs: TemplateDirs = ()) -> str:
    refs = [ref for ref in _all_refs(dirs) if ref.startswith(f"{family}@")]
    if refs:
        return f"available versions: {', '.join(refs)}"
    return f"no template family {family!r}; {_families_hint(dirs)}"


def _families_hint(dirs: TemplateDirs = ()) -> str:
    refs = _all_refs(dirs)
    where = f" (looked in the package and in {', '.join(map(str, dirs))})" if dirs else ""
    return f"available templates: {', '.join(refs) if refs else '(none)'}{where}"
