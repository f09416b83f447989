"""Minimal pure-Python wheels built in a test's folder: what pip needs to install one (METADATA,
WHEEL, RECORD with each file's hash), no index and no build backend."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def pure_wheel(folder: Path, name: str, files: dict[str, bytes]) -> Path:
    """The wheel `name`-1.0 holding `files` (paths inside the wheel -> contents), in `folder`."""
    dist = f"{name}-1.0.dist-info"
    files = {**files,
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n"
                     for p, d in files.items()) + f"{dist}/RECORD,,\n"
    path = Path(folder) / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, d in files.items():
            z.writestr(p, d)
        z.writestr(f"{dist}/RECORD", record)
    return path
