"""Starting a template of your own from a released one (`judge-gateway prompts new`).

The new file is the source template's text with its `id` and `version` set to the new family
and version, and its `source` saying what it started from (ref and sha256). It is a draft until
its folder's lock is extended (`judge-gateway prompts lock --dir DIR`): from then on its bytes are
immutable, and a new wording is the next version (`prompts new FAMILY --from FAMILY@N` in the same
folder).
"""

from __future__ import annotations

import re
from pathlib import Path

from .lock import _sha256
from .parse import parse_template
from .registry import TemplateDirs, _folder_of, family_versions, load_template, parse_ref
from .template import TemplateError

_TOP_KEY_RE = r"(?m)^{key}\s*=\s*(\"(?:[^\"\\]|\\.)*\"|'[^']*')[ \t]*$"


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _set_top_key(text: str, key: str, value: str) -> str:
    """Set a top-level string key (before the first table), adding it after `version` if absent."""
    head, sep, tables = text.partition("\n[")
    pattern = re.compile(_TOP_KEY_RE.format(key=re.escape(key)))
    line = f"{key} = {_toml_string(value)}"
    if pattern.search(head):
        head = pattern.sub(lambda _: line, head, count=1)
    else:
        head = re.sub(r"(?m)^(version\s*=.*)$", lambda m: f"{m.group(1)}\n{line}", head, count=1)
    return head + sep + tables


def new_template(family: str, source_ref: str, folder: str | Path, dirs: TemplateDirs = ()) -> Path:
    """Write `<folder>/<family>/<next version>.toml` from `source_ref` and return its path.

    `family` must not be one of the package's (or of another folder of `dirs`); in `folder` it
    gets version 1, or the one after its highest. The source is looked up in the package, in
    `dirs` and in `folder`.
    """
    folder = Path(folder)
    parse_ref(f"{family}@1")  # the family name's rules
    search = [*dirs, folder] if folder.resolve() not in {Path(d).resolve() for d in dirs} else list(dirs)
    source = load_template(source_ref, search)  # refuses an edited released source
    home = _folder_of(family, search)
    if home is not None and home.root.resolve() != folder.resolve():
        what = "the package's" if home.package else f"in {home.root}"
        raise TemplateError(f"template family {family!r} is {what}: a family lives in one folder only; "
                            "start a family of your own with another name")
    versions = family_versions(family, search) if home is not None else []
    version = str(int(versions[-1].split(".")[0]) + 1) if versions else "1"
    text = source.path.read_text(encoding="utf-8")
    text = _set_top_key(text, "id", family)
    text = _set_top_key(text, "version", version)
    origin = f"judge-gateway prompts new: from {source.ref} (sha256 {source.sha256})"
    text = _set_top_key(text, "source", f"{origin}; {source.source}" if source.source else origin)
    path = folder / family / f"{version}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "x", encoding="utf-8") as handle:  # never overwrite
        handle.write(text)
    data = path.read_bytes()
    try:  # the written file parses as a template (a draft: no lock to check yet)
        parse_template(str(path), family, version, _sha256(data), data)
    except TemplateError:
        path.unlink()
        raise
    return path
