"""The README is a front page: short, and every link in it leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_readme_fits_on_two_screens():
    assert len(README.splitlines()) <= 150, "the README grew past 150 lines: move the detail into docs/"


def test_readme_links_to_files_that_exist():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [t for t in targets if not re.match(r"^[a-z]+://", t)]
    assert len(local) >= 20
    missing = [t for t in local if not (REPO / t).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_readme_keeps_the_set_up_commands_and_the_quickstart():
    assert "scripts/bootstrap.sh && .venv/bin/judge-gateway serve" in README
    assert "scripts/test.sh" in README
    assert 'judges=["ocr"]' in README and "# 1.0 True HelloWorld" in README


def _python_heredoc(text: str, end: str) -> str:
    """The Python of the page's first `.venv/bin/python - <<'END'` block."""
    match = re.search(rf"\.venv/bin/python - <<'{end}'\n(.*?)\n{end}\n", text, re.DOTALL)
    assert match, f"no python heredoc ending in {end}"
    return match.group(1)


def test_the_quickstart_snippet_prints_the_error_of_an_invalid_score(tmp_path, capsys):
    """Against a service whose OCR worker cannot start, the snippet (README and quickstart page,
    the same code) prints the score's error code and message, not a KeyError on `recognized`."""
    from judge_gateway.config import validate_config
    from judge_gateway.gateway import Gateway
    from judge_gateway.server import create_app
    from tests.support.live_server import LiveServer

    snippets = [_python_heredoc(README, "EOF"),
                _python_heredoc((REPO / "docs/getting-started/quickstart.md").read_text(encoding="utf-8"), "PY")]
    assert snippets[0] == snippets[1]
    cfg = validate_config({"judges": {"ocr": {"kind": "ocr", "options": {"python": str(tmp_path / "no" / "python")}}}})
    with LiveServer(create_app(Gateway(cfg))) as server:
        code = snippets[0].replace("http://127.0.0.1:8080", server.url)
        exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert out.startswith("None False head_error ") and "cannot start head 'ocr'" in out
