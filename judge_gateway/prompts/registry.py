"""Templates by `family@version`: the files `<family>/<version>.toml`, loading (hash-checked
against the lock), listing, and checking or extending the lock over every file.

verify_lock and lock_new_templates live here, not in lock.py: they walk this module's files,
and load_template needs the lock's hashes, so lock.py stays the lower of the two.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from .lock import _read_lock, _sha256, _write_lock
from .parse import parse_template
from .template import Template, TemplateError

log = logging.getLogger(__name__)

# Read at call time (not bound as defaults), so tests can point the module at a copy.
TEMPLATES_DIR: Path = Path(__file__).resolve().parent
LOCK_PATH: Path = TEMPLATES_DIR / "templates.lock"

_FAMILY_RE = re.compile(r"[a-z0-9][a-z0-9_]*")
_VERSION_RE = re.compile(r"[0-9]+(?:\.[0-9]+)*")


def parse_ref(ref: str) -> tuple[str, str]:
    """Split and validate `family@version`; an unpinned family is refused."""
    if not isinstance(ref, str):
        raise TemplateError(f"template ref must be a string 'family@version', got {ref!r}")
    if "@" not in ref:
        hint = _available_hint(ref) if _FAMILY_RE.fullmatch(ref) else _families_hint()
        raise TemplateError(
            f"template ref {ref!r} is not pinned: use 'family@version' (released templates are "
            f"immutable, so configs must name the version); {hint}"
        )
    family, _, version = ref.partition("@")
    if not _FAMILY_RE.fullmatch(family):
        raise TemplateError(
            f"template ref {ref!r}: family {family!r} must match {_FAMILY_RE.pattern}; "
            f"{_families_hint()}"
        )
    if not _VERSION_RE.fullmatch(version):
        raise TemplateError(
            f"template ref {ref!r}: version {version!r} must be a number like '1' or '2'; "
            f"{_available_hint(family)}"
        )
    return family, version


def load_template(ref: str) -> Template:
    """Load, hash-check and validate `family@version`.

    A released (locked) template whose bytes no longer match the lock is refused. A file not yet
    in the lock loads with a warning (drafting a new version); `verify_lock` fails the build
    until it is locked.
    """
    family, version = parse_ref(ref)
    path = TEMPLATES_DIR / family / f"{version}.toml"
    if not path.is_file():
        if (TEMPLATES_DIR / family).is_dir():
            raise TemplateError(f"unknown template version {ref!r}; {_available_hint(family)}")
        raise TemplateError(f"unknown template family {family!r} in {ref!r}; {_families_hint()}")
    data = path.read_bytes()
    digest = _sha256(data)
    locked = _read_lock(LOCK_PATH).get(f"{family}@{version}")
    if locked is None:
        log.warning("template %s (%s) is not in %s: unreleased draft", ref, path, LOCK_PATH)
    elif locked != digest:
        raise TemplateError(
            f"released template {path} changed: lock has sha256 {locked}, file has {digest}. "
            "Released templates are immutable: restore the file and put new wording in a new "
            "version."
        )
    # Parsing is cached by content hash, so an edited file is never served from the cache.
    return parse_template(str(path), family, version, digest, data)


def list_templates() -> list[Template]:
    """Every template file, loaded, sorted by (id, numeric version)."""
    return [load_template(ref) for ref in _sorted_refs(_template_files())]


def show_template(ref: str) -> str:
    """The template file's exact text plus its sha256 line (for the CLI)."""
    template = load_template(ref)
    text = template.path.read_text(encoding="utf-8")
    if not text.endswith("\n"):
        text += "\n"
    return f"{text}# sha256: {template.sha256}\n"


# --------------------------------------------------------------------------- lock


def verify_lock() -> list[str]:
    """Problems with the lock: changed released bytes, unlocked files, dangling entries."""
    try:
        lock = _read_lock(LOCK_PATH)
    except TemplateError as exc:
        return [str(exc)]
    problems: list[str] = []
    files = _template_files(problems)
    for ref in _sorted_refs(files):
        path = files[ref]
        digest = _sha256(path.read_bytes())
        if ref not in lock:
            problems.append(
                f"unlocked template {path} ({ref}, sha256 {digest}): "
                "release it with lock_new_templates()"
            )
        elif lock[ref] != digest:
            problems.append(
                f"released template {path} ({ref}) changed: lock has sha256 {lock[ref]}, "
                f"file has {digest}; restore it and put new wording in a new version"
            )
    for ref in sorted(set(lock) - set(files)):
        problems.append(f"dangling lock entry {ref!r} in {LOCK_PATH}: no such template file")
    return problems


def lock_new_templates() -> list[str]:
    """Lock every valid template file not yet in the lock; existing entries are never changed.

    Each new file is validated first, so a broken template cannot become a released one.
    Returns the refs added, sorted.
    """
    lock = _read_lock(LOCK_PATH) if LOCK_PATH.exists() else {}
    problems: list[str] = []
    files = _template_files(problems)
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
    if added or not LOCK_PATH.exists():
        _write_lock(LOCK_PATH, lock)
    return added


# --------------------------------------------------------------------------- files


def _template_files(problems: list[str] | None = None) -> dict[str, Path]:
    """`family@version` -> path for every `<family>/<version>.toml`; bad names go to problems."""
    files: dict[str, Path] = {}
    if not TEMPLATES_DIR.is_dir():
        return files
    for path in sorted(TEMPLATES_DIR.glob("*/*.toml")):
        family, version = path.parent.name, path.stem
        if _FAMILY_RE.fullmatch(family) and _VERSION_RE.fullmatch(version):
            files[f"{family}@{version}"] = path
        elif problems is not None:
            problems.append(
                f"template file {path} is not named <family>/<version>.toml "
                f"(family {_FAMILY_RE.pattern}, version like '1')"
            )
    return files


def _sorted_refs(refs: Mapping[str, Path] | Sequence[str]) -> list[str]:
    def key(ref: str) -> tuple[str, tuple[int, ...]]:
        family, _, version = ref.partition("@")
        return family, tuple(int(n) for n in version.split("."))

    return sorted(refs, key=key)


def _available_hint(family: str) -> str:
    refs = [ref for ref in _sorted_refs(_template_files()) if ref.startswith(f"{family}@")]
    if refs:
        return f"available versions: {', '.join(refs)}"
    return f"no template family {family!r}; {_families_hint()}"


def _families_hint() -> str:
    refs = _sorted_refs(_template_files())
    return f"available templates: {', '.join(refs) if refs else '(none)'}"
