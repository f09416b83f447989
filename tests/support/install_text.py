"""The install commands the README and the docs give (the block after their `<!-- install -->`
marker): one text in three places, read by the unit test that keeps them equal and by the
integration test that runs it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("README.md", "docs/index.md", "docs/getting-started/install.md")


def install_block(page: str = "README.md") -> str:
    text = (ROOT / page).read_text(encoding="utf-8")
    found = re.search(r"<!-- install -->\n```bash\n(.*?)```", text, re.S)
    if found is None:
        raise AssertionError(f"{page} has no `<!-- install -->` bash block")
    return found.group(1)


def install_commands(page: str = "README.md") -> list[str]:
    """Its command lines, comments dropped; the clone line is the caller's (a copy of this checkout)."""
    lines = []
    for line in install_block(page).splitlines():
        command = line.split("  #", 1)[0].strip()
        if command and not command.startswith("#"):
            lines.append(command)
    return lines
