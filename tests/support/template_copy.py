"""A copy of the package's prompt templates that a test may change: the registry is pointed at it
(registry.TEMPLATES_DIR and LOCK_PATH, read at call time), and an unreleased template version is
added, as a user's `prompts new` leaves one before `prompts lock`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


def templates_with_an_unlocked_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The copy's folder; it holds image_quality@9 (image_quality@1's text), not in its lock."""
    from judge_gateway.prompts import registry

    root = tmp_path / "prompts"
    shutil.copytree(registry.TEMPLATES_DIR, root, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    monkeypatch.setattr(registry, "TEMPLATES_DIR", root)
    monkeypatch.setattr(registry, "LOCK_PATH", root / "templates.lock")
    (root / "image_quality" / "9.toml").write_text(
        (root / "image_quality" / "1.toml").read_text().replace('version = "1"', 'version = "9"'))
    return root
