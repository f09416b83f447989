"""Model files named in head options: a local path, or `repo_id/filename` on the Hugging Face hub.

Shared by the heads whose workers run in different venvs (heads, hpsv3, imagereward), so it
imports only huggingface_hub, and that lazily.
"""

from __future__ import annotations

from pathlib import Path

from .base import HeadLoadError


def resolve_model_file(spec: str, head: str, option: str) -> Path:
    """The file `options.<option>` of a `head` names: a local file, or `repo_id/filename` (the
    repo id has one slash) fetched with huggingface_hub, which honours HF_HUB_OFFLINE and its cache."""
    path = Path(spec).expanduser()
    if path.is_file():
        return path
    parts = spec.split("/")
    if path.is_absolute() or spec.startswith(".") or len(parts) < 3:
        raise HeadLoadError(f"{head}: options.{option} {spec!r} is neither a file nor `repo_id/filename`")
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download("/".join(parts[:2]), "/".join(parts[2:])))
    except Exception as exc:  # noqa: BLE001 - offline, unknown repo or file ...: all a load error
        raise HeadLoadError(f"{head}: options.{option}: cannot fetch {spec!r}: {type(exc).__name__}: {exc}") from None
