"""Files a venv has in common with its sibling venvs share one copy on disk (hard links).

Every environment installs the same torch wheel (754 MB unpacked for the CPU build, several GB with
CUDA's libraries), and most also hold the same transformers, numpy, sympy, opencv: the nine venvs
of a fresh checkout took 15 GB, and a CI machine with less free disk stopped mid set-up.

Contract: a file of the venv's site-packages is replaced by a hard link only when a sibling venv
(a folder with a `pyvenv.cfg` in the same parent folder) holds a regular file at the same path
relative to its site-packages with the same size, mode and SHA-256. The link is made under a
temporary name and renamed over the file, so a reader sees the old file or the new link, never
neither; the link is kept only when it points at the very inode whose content was hashed.
A shared file carries the sibling's mtime, which a module's compiled .pyc records: a .py is shared
only together with the sibling's .pyc files that are valid for it (else it stays our own), so no
import finds its bytecode stale.
Sharing is safe because nothing writes an installed file in place: pip removes a file before it
writes it again, Python writes its .pyc files to a temporary name and renames them, and the
torchvision patch (patch_torchvision.py) replaces its file the same way. A filesystem without
hard links (or a sibling on another device) leaves every file as it is; sharing never fails a build.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# Files under this size hold 7% of an environment's bytes and 90% of its files: not worth a hash.
MIN_SIZE = 16 * 1024
_NO_LINKS = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP}


@dataclass
class ShareResult:
    files: int = 0  # files now hard links to a sibling's copy
    bytes: int = 0  # disk those files no longer take twice
    unavailable: str = ""  # why no link could be made (the filesystem refused), when one could not


def site_packages(venv: Path) -> list[Path]:
    return sorted(p for p in (venv / "lib").glob("python3*/site-packages") if p.is_dir())


def sibling_venvs(venv: Path, marker: str = "pyvenv.cfg") -> list[Path]:
    """The other venvs in the venv's parent folder that hold `marker` (those being built too: see
    the contract). The builder names the file it writes into each venv it builds, so a venv of
    the user's own in the same folder is never linked to: an edit in place there would show here."""
    venv = venv.absolute()
    try:
        entries = list(venv.parent.iterdir())
    except OSError:
        return []
    return sorted(p for p in entries if p != venv and (p / "pyvenv.cfg").is_file() and (p / marker).is_file())


def _sha256(path: Path, expect: os.stat_result) -> str | None:
    """The file's digest, or None when the file is not the inode `expect` describes any more."""
    try:
        with open(path, "rb") as fh:
            now = os.fstat(fh.fileno())
            if (now.st_ino, now.st_dev, now.st_size) != (expect.st_ino, expect.st_dev, expect.st_size):
                return None
            return hashlib.file_digest(fh, "sha256").hexdigest()
    except OSError:
        return None


def share_identical_files(venv: Path, siblings: Iterable[Path] | None = None,
                          min_size: int = MIN_SIZE) -> ShareResult:
    """Hard-link the venv's files that a sibling venv holds identically (see the module's contract)."""
    result = ShareResult()
    others = [sp for s in (sibling_venvs(venv) if siblings is None else siblings) for sp in site_packages(Path(s))]
    if not others:
        return result
    for own_root in site_packages(venv):
        for dirpath, _dirs, files in os.walk(own_root):
            for name in files:
                path = Path(dirpath, name)
                try:
                    own = path.lstat()
                except OSError:
                    continue
                if not _is_regular(own) or own.st_size < min_size:
                    continue
                rel = path.relative_to(own_root)
                outcome = _share_one(path, own, [root / rel for root in others])
                if isinstance(outcome, str):
                    result.unavailable = outcome
                    return result
                if outcome:
                    result.files += 1
                    result.bytes += own.st_size
    return result


def _is_regular(st: os.stat_result) -> bool:
    return stat.S_ISREG(st.st_mode)


def _share_one(path: Path, own: os.stat_result, candidates: list[Path]) -> bool | str:
    """True when `path` now links to a candidate's copy; a string when the filesystem refuses links."""
    matches = []
    for cand in candidates:
        try:
            st = cand.lstat()
        except OSError:
            continue
        if not _is_regular(st) or st.st_size != own.st_size or st.st_mode != own.st_mode or st.st_dev != own.st_dev:
            continue
        if st.st_ino == own.st_ino:
            return False  # already one copy
        matches.append((cand, st))
    if not matches:
        return False
    own_digest = _sha256(path, own)
    if own_digest is None:
        return False
    # The copy most venvs already share first: every venv ends up on one inode.
    for cand, st in sorted(matches, key=lambda m: -m[1].st_nlink):
        if _sha256(cand, st) != own_digest:
            continue
        pycs: list[tuple[Path, os.stat_result, Path]] = []
        if path.suffix == ".py":
            found = _bytecode_to_share(path, cand, st)
            if found is None:
                continue
            pycs = found
        linked = _link_over(cand, st, path)
        if isinstance(linked, str):
            return linked
        if not linked:
            continue
        for src, src_st, dst in pycs:
            _link_over(src, src_st, dst)
        return True
    return False


def _bytecode_to_share(path: Path, cand: Path, cand_st: os.stat_result) -> list[tuple[Path, os.stat_result, Path]] | None:
    """The (sibling's .pyc, its stat, our .pyc) pairs to link along with a shared .py, or None when
    the .py must stay our own.

    A .pyc records its source's mtime and size; the shared .py carries the sibling's mtime, so our
    own .pyc would be stale from then on: every import would compile the module again (and never
    write the result where PYTHONDONTWRITEBYTECODE is set, as on many CI machines). The .py is
    shared only when each of our .pyc files has a sibling .pyc valid for the sibling's .py.
    """
    ours = sorted(path.parent.joinpath("__pycache__").glob(f"{path.stem}.*.pyc"))
    pairs = []
    for pyc in ours:
        src = cand.parent / "__pycache__" / pyc.name
        try:
            with open(src, "rb") as fh:
                header = fh.read(16)
                src_st = os.fstat(fh.fileno())
            own_st = pyc.lstat()
        except OSError:
            return None
        if len(header) < 16 or int.from_bytes(header[4:8], "little") != 0:
            return None  # not a timestamp-checked .pyc
        recorded = (int.from_bytes(header[8:12], "little"), int.from_bytes(header[12:16], "little"))
        if recorded != (int(cand_st.st_mtime) & 0xFFFFFFFF, cand_st.st_size & 0xFFFFFFFF):
            return None
        if src_st.st_dev != own_st.st_dev or src_st.st_mode != own_st.st_mode:
            return None
        pairs.append((src, src_st, pyc))
    return pairs


def _link_over(src: Path, src_st: os.stat_result, dst: Path) -> bool | str:
    """Replace `dst` by a hard link to `src`, if `src` is still the inode `src_st` describes.
    True when done; a string when the filesystem refuses hard links."""
    try:
        if src_st.st_ino == dst.lstat().st_ino:
            return True
    except OSError:
        return False
    tmp = dst.with_name(f".{dst.name}.jg-share-{os.getpid()}")
    try:
        os.link(src, tmp)
    except FileExistsError:
        tmp.unlink(missing_ok=True)
        return False
    except OSError as exc:
        if exc.errno in _NO_LINKS:
            return f"{type(exc).__name__}: {exc.strerror} ({src} -> {dst})"
        return False
    try:
        linked = tmp.lstat()
        if linked.st_ino != src_st.st_ino or linked.st_dev != src_st.st_dev:
            tmp.unlink()  # the source was replaced after it was checked
            return False
        os.replace(tmp, dst)
    except OSError:
        tmp.unlink(missing_ok=True)
        return False
    return True
