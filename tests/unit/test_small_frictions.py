"""The smaller frictions a new user met (from a fresh clone and from a wheel), each pinned by a
test: `--version`, a help that lists every command and shows the flags' defaults, `prompts lock`
with nothing new, a fix hint for a head that is not ready, `score`'s progress per sample, the
client's config by path or name and its error naming the URL of a stopped gateway, one prefix of
environment variables, a sample folder to score, a port already in use, and the A/B page's
interval and empty pairing."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from judge_gateway import __version__
from judge_gateway.cli import build_parser
from judge_gateway.cli import main as cli_main
from tests.support.cli_configs import write_config

ROOT = Path(__file__).resolve().parents[2]


# --- --version, the command list, the flags' defaults -----------------------------------------

def test_version_names_the_version_and_the_package_that_answered(capsys):
    with pytest.raises(SystemExit) as done:
        cli_main(["--version"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"judge-gateway {__version__} (") and str(ROOT / "judge_gateway") in out


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_the_top_level_help_lists_every_command():
    parser = build_parser()
    text = parser.format_help()
    assert {"prepare", "up", "env", "ray-status"} <= set(_commands(parser))
    for name in _commands(parser):  # each on a line of its own, with its one-line help
        assert re.search(rf"^    {re.escape(name)} +\S", text, re.MULTILINE), name


def _help(*command: str) -> str:
    parser = build_parser()
    for name in command:
        parser = _commands(parser)[name]
    return " ".join(parser.format_help().split())  # unwrapped


def test_flag_help_shows_each_default_that_exists():
    score = _help("score")
    assert "samples per request (default: 16)" in score and "requests in flight (default: 4)" in score
    assert "(default: None)" not in score and "(default: False)" not in score  # unset flags and switches
    assert "fps of videos given as frame folders (default" not in score  # unset: no default to show
    assert _help("env", "build").count("default auto") == 1
    assert "the generation prompt (default: a photo of a cat)" in _help("prompts", "render")
    assert "uvicorn's log level (critical, error, warning, info, debug) (default: info)" in _help("serve")
    # Help that already names its default is left as written (no second "default").
    assert _help("up").count("default run/up") == 1 and "(default: run/up)" not in _help("up")


# --- prompts lock with nothing new --------------------------------------------------------------

def test_prompts_lock_says_when_there_is_nothing_new_to_lock(tmp_path, monkeypatch, capsys):
    import shutil

    from judge_gateway.prompts import registry

    root = tmp_path / "prompts"
    shutil.copytree(registry.TEMPLATES_DIR, root, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    monkeypatch.setattr(registry, "TEMPLATES_DIR", root)
    monkeypatch.setattr(registry, "LOCK_PATH", root / "templates.lock")
    (root / "image_quality" / "9.toml").write_text(
        (root / "image_quality" / "1.toml").read_text().replace('version = "1"', 'version = "9"'))
    assert cli_main(["prompts", "lock"]) == 0
    assert capsys.readouterr().out == "locked image_quality@9\n"
    assert cli_main(["prompts", "lock"]) == 0
    assert capsys.readouterr().out == ("nothing new to lock: every template version in the package's templates "
                                       "is already in its lock file\n")
    mine = tmp_path / "mine"
    mine.mkdir()
    assert cli_main(["prompts", "lock", "--dir", str(mine)]) == 0
    assert f"every template version in {mine} is already" in capsys.readouterr().out
