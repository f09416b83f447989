"""Config files for the CLI's tests: one backend and VLM judges on it, written where the command
reads them (`--config PATH`)."""

from __future__ import annotations

from pathlib import Path

from tests.support.toml_text import to_toml


def vlm_config(base_url: str, model: str, judges: dict[str, str | dict], *, backend: str = "fake",
               **sections: dict) -> dict:
    """One backend (`model` at `base_url`) and a yes/no judge on it per name -> template, or per
    name -> the judge's own entry (its backend is filled in); `sections` are other tables."""
    entries = {name: ({"kind": "yes_no", "template": judge} if isinstance(judge, str) else judge) | {"backend": backend}
               for name, judge in judges.items()}
    return {"backends": {backend: {"model": model, "base_urls": [base_url]}}, "judges": entries, **sections}


def write_config(folder: Path, config: dict | str, name: str = "c.toml") -> str:
    """`config` (a dict, or TOML text) as folder/name; its path, as --config takes it."""
    path = Path(folder) / name
    path.write_text(config if isinstance(config, str) else to_toml(config))
    return str(path)
