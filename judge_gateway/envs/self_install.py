"""judge-gateway itself, as the environments it builds get it: the package that is running, never
a version looked up on a package index (which may not hold it, or hold another build of it).

From a source checkout (an editable install, or PYTHONPATH): that checkout, editable. From an
installed wheel: a wheel rebuilt from the installed files themselves (the dist-info's RECORD
names them), so each venv holds, byte for byte, the judge_gateway that built it; the package's
dependencies still come from the configured index.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import zipfile
from importlib import metadata
from pathlib import Path

from .spec import EnvBuildError

DIST = "judge-gateway"
PACKAGE = Path(__file__).resolve().parents[1]  # the running judge_gateway
# Installer bookkeeping of a dist-info, never part of a wheel (RECORD is written anew).
NOT_IN_A_WHEEL = ("INSTALLER", "REQUESTED", "direct_url.json", "RECORD")


def source_checkout() -> Path | None:
    """The repository this package runs from, when it is a source checkout (editable installs)."""
    root = PACKAGE.parent
    project = root / "pyproject.toml"
    if project.is_file() and 'name = "judge-gateway"' in project.read_text(encoding="utf-8"):
        return root
    return None


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _installed_files() -> tuple[metadata.Distribution, Path, list[tuple[str, Path]]]:
    """(the distribution, its dist-info folder's name, [(path in the wheel, file)]) of the running
    package; EnvBuildError when the running package is not the installed distribution's."""
    try:
        dist = metadata.distribution(DIST)
    except metadata.PackageNotFoundError:
        raise EnvBuildError(f"judge_gateway runs from {PACKAGE}, which is neither a source checkout nor an "
                            "installed distribution: install judge-gateway (pip install a wheel or a checkout) "
                            "to build environments") from None
    root = Path(dist.locate_file("")).resolve()
    if (root / "judge_gateway").resolve() != PACKAGE:
        raise EnvBuildError(f"the running judge_gateway ({PACKAGE}) is not the installed distribution's "
                            f"({root / 'judge_gateway'}, {DIST} {dist.version}): run the installed one, or build "
                            "from a checkout")
    files, info = [], None
    for entry in dist.files or []:
        parts = Path(str(entry)).parts
        if not parts or parts[0] == ".." or "__pycache__" in parts or str(entry).endswith(".pyc"):
            continue  # console scripts (pip writes them from entry_points.txt), bytecode
        if parts[0].endswith(".dist-info"):
            info = parts[0]
            if parts[-1] in NOT_IN_A_WHEEL:
                continue
        elif parts[0] != "judge_gateway":
            continue
        files.append((Path(*parts).as_posix(), root / Path(*parts)))
    if info is None or not any(p.startswith("judge_gateway/") for p, _ in files):
        raise EnvBuildError(f"{DIST} {dist.version} at {root} lists no files of its own (no RECORD in its "
                            "dist-info): reinstall it with pip")
    return dist, Path(info), files


def running_wheel(cache: Path) -> Path:
    """The running, installed package as a wheel under `cache` (one per content: reused)."""
    dist, info, files = _installed_files()
    contents = []
    for arcname, path in sorted(files):
        try:
            contents.append((arcname, path.read_bytes(), path.stat().st_mode))
        except OSError as exc:
            raise EnvBuildError(f"{DIST}'s installed file {path} cannot be read ({exc}): reinstall it") from None
    tag = "py3-none-any"
    wheel_meta = next((data for name, data, _ in contents if name == f"{info}/WHEEL"), b"")
    for line in wheel_meta.decode(errors="replace").splitlines():
        if line.startswith("Tag:"):
            tag = line.split(":", 1)[1].strip()
    key = hashlib.sha256(b"".join(n.encode() + b"\0" + d for n, d, _ in contents)).hexdigest()[:16]
    name = f"{dist.metadata['Name'].replace('-', '_')}-{dist.version}-{tag}.whl"
    out = cache / "self" / key / name
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    tmp = out.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for arcname, data, mode in contents:
            item = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
            item.external_attr = (mode & 0xFFFF) << 16
            item.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(item, data)
            writer.writerow([arcname, _digest(data), len(data)])
        writer.writerow([f"{info.as_posix()}/RECORD", "", ""])
        zf.writestr(f"{info.as_posix()}/RECORD", record.getvalue())
    tmp.replace(out)
    return out


def self_install(extras: tuple[str, ...], cache: Path) -> tuple[list[list[str]], str]:
    """The pip install argument lists that put the running judge-gateway (with `extras`) into a
    venv, in order, and a line saying what it is. A rebuilt wheel is installed with its
    dependencies, then once more alone with --force-reinstall: a venv holding the same version of
    another build gets these bytes too."""
    suffix = f"[{','.join(extras)}]" if extras else ""
    root = source_checkout()
    if root is not None:
        return [["-e", f"{root}{suffix}"]], f"judge-gateway from this checkout, editable ({root})"
    wheel = running_wheel(cache)
    return ([[f"{wheel}{suffix}"], ["--no-deps", "--force-reinstall", str(wheel)]],
            f"judge-gateway {wheel.name.split('-')[1]} rebuilt from the running installation ({PACKAGE})")


def self_install_plan(extras: tuple[str, ...]) -> str:
    """What self_install would install, without building anything (for --dry-run)."""
    suffix = f"[{','.join(extras)}]" if extras else ""
    root = source_checkout()
    if root is not None:
        return f"-e {root}{suffix}"
    try:
        version = metadata.version(DIST)
    except metadata.PackageNotFoundError:
        version = "?"
    return (f"judge_gateway-{version}-py3-none-any.whl{suffix} (a wheel rebuilt from the running installation, "
            f"{PACKAGE}; never the package index's)")
