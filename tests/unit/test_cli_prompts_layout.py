"""The layout of the command, the input readers and the prompt templates:

- `judge_gateway/cli/` is a package (main, serve, info, prompts, tune, score, browse, eval) and
  every command, flag, default and `python -m judge_gateway.cli` stay what they were;
- the JSONL / folder readers live in `judge_gateway/inputs.py`, below score, eval and tune;
- `judge_gateway/prompts/` is template, parse, lock, registry under a face that re-exports them,
  and no submodule imports the face.
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "judge_gateway"

# Every command path -> its arguments as (flags or dest, required, default), in order, read from
# the parser before the split (cli.py at d317846), plus those added since on purpose (configs,
# judges NAME/--server/--json, prompts diff). The test checks these alone: commands, flags,
# required-ness and defaults are unchanged; help texts, metavars and choices are not compared.
COMMANDS = {
    '': [('--version', False, '==SUPPRESS=='), ('-v/--verbose', False, False)],  # --version: added with samples
    'browse': [('run_dirs', True, None), ('--host', False, '127.0.0.1'), ('--port', False, 8765),
               ('--allowed-host', False, None), ('--export', False, None), ('--refresh', False, 10),
               ('--gateway', False, None), ('--api-key', False, None)],
    'eval': [('labels', True, None), ('--judge', True, None), ('--config', False, None), ('--server', False, None),
             ('--api-key', False, None), ('--threshold', False, None), ('--plot', False, None),
             ('--cache', False, None), ('--batch-size', False, 16), ('--concurrency', False, 4),
             ('--no-progress', False, False)],
    'configs': [('name', False, None)],
    'judges': [('names', True, None), ('--config', False, None), ('--server', False, None), ('--api-key', False, None),
               ('--json', False, False)],
    'prompts': [],
    'prompts compare': [('ref_a', True, None), ('ref_b', True, None), ('--judge', False, None), ('--data', True, None),
                        ('--config', False, None), ('--cache', False, None), ('--cache-only', False, False),
                        ('--batch-size', False, 16), ('--concurrency', False, 4), ('--no-progress', False, False)],
    # --dir / --config: your own template folders ([prompts] dirs), added with `prompts new`
    'prompts diff': [('ref_a', True, None), ('ref_b', True, None), ('--rendered', False, False),
                     ('--prompt', False, 'a photo of a cat'), ('-U/--context', False, 3), ('--dir', False, None),
                     ('--config', False, None)],
    'prompts list': [('--dir', False, None), ('--config', False, None)],
    'prompts lock': [('--dir', False, None), ('--config', False, None)],
    'prompts new': [('family', True, None), ('--from', True, None), ('--dir', False, None), ('--config', False, None)],
    'prompts render': [('ref', True, None), ('--prompt', False, 'a photo of a cat'), ('--json', False, False),
                       ('--dir', False, None), ('--config', False, None)],
    'prompts show': [('ref', True, None), ('--dir', False, None), ('--config', False, None)],
    'prompts verify': [('--dir', False, None), ('--config', False, None)],
    'ray-status': [('--config', False, None), ('--address', False, None), ('--json', False, False)],
    'schema': [('--request', False, False)],
    'score': [('input', True, None), ('-o/--output', True, None), ('--config', False, None), ('--server', False, None),
              ('--api-key', False, None), ('--judges', False, None), ('--batch-size', False, 16),
              ('--concurrency', False, 4), ('--fps', False, None), ('--no-progress', False, False)],
    'serve': [('--config', False, None), ('--host', False, None), ('--port', False, None), ('--api-key', False, None),
              ('--log-level', False, 'info'), ('--ray', False, None)],
    'tune': [],
    **{f'tune {cmd}': [(flag, True, None), ('--data', True, None), ('--config', False, None), ('--cache', False, None),
                       ('--cache-only', False, False), ('--server', False, None), ('--api-key', False, None),
                       ('--batch-size', False, 16), ('--concurrency', False, 4), ('--no-progress', False, False),
                       ('--folds', False, 5), ('--seed', False, 0), ('--out-dir', False, None),
                       ('--name', False, None), ('--plot', False, None)]
       for cmd, flag in (('rubric', '--judge'), ('weights', '--judges'))},
    # Commands added after the split: env, prepare, up, samples.
    'samples': [('folder', False, 'samples')],
    'env': [],
    'env list': [],
    'env build': [('name', True, None), ('--venv', False, None), ('--force', False, False), ('--dry-run', False, False),
                  ('--torch', False, 'auto'), ('--torch-index', False, None), ('--wheel-cache', False, None),
                  ('--no-shared-files', False, False)],
    'prepare': [('--config', False, None), ('--judges', False, None), ('--offline', False, False),
                # issue 33: prepare starts a launched backend's servers for its probes unless --no-start
                ('--download-dir', False, None), ('--no-start', False, True), ('--start', False, False),
                ('--no-build', False, False),
                ('--rebuild', False, False), ('--run-dir', False, 'run/prepare'), ('--dry-run', False, False),
                ('--torch', False, 'auto'), ('--torch-index', False, None), ('--wheel-cache', False, None),
                ('--no-shared-files', False, False)],
    'up': [('--config', False, None), ('--host', False, None), ('--port', False, None), ('--api-key', False, None),
           ('--run-dir', False, 'run/up'), ('--stop-timeout', False, 30.0), ('--no-gateway', False, False),
           ('--dry-run', False, False)],
}


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    args = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.update(_commands(sub, (*path, name)))
        elif not isinstance(action, argparse._HelpAction):
            name = "/".join(action.option_strings) if action.option_strings else action.dest
            args.append((name, action.required, action.default))
    out[" ".join(path)] = args
    return out


def test_every_command_flag_and_default_is_unchanged():
    from judge_gateway.cli import build_parser

    assert _commands(build_parser()) == COMMANDS


def test_the_console_script_and_python_dash_m_run_the_cli_packages_main(capsys, monkeypatch):
    import importlib

    import judge_gateway.cli

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"judge-gateway": "judge_gateway.cli:main"}
    # The face's `main` is main.py's (the attribute `cli.main` is the function, not the module).
    assert judge_gateway.cli.main is importlib.import_module("judge_gateway.cli.main").main

    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as done:
        judge_gateway.cli.main(["score", "--help"])
    assert done.value.code == 0
    printed = capsys.readouterr().out
    proc = subprocess.run([sys.executable, "-m", "judge_gateway.cli", "score", "--help"], capture_output=True,
                          text=True, timeout=60, check=False, env={**os.environ, "COLUMNS": "100"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == printed
    assert printed.startswith("usage: judge-gateway score [-h] -o OUTPUT")


def _imports(path: Path) -> list[tuple[int, str | None, list[str]]]:
    """(level, module, names) of every `from ... import ...` in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(n.level, n.module, [a.name for a in n.names]) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]


@pytest.mark.parametrize(("user", "level"), [("cli/score.py", 2), ("evaluation.py", 1), ("tuning/prefs.py", 2)])
def test_score_eval_and_tune_read_samples_from_the_inputs_module_below_them(user, level):
    found = [names for lvl, module, names in _imports(PACKAGE / user) if (lvl, module) == (level, "inputs")]
    assert found and "InputItem" in found[0] and "sample_key" in found[0]
    # and none of them reads its samples through the score command
    assert not [m for _, m, _ in _imports(PACKAGE / user) if m and ("score" in m or m == "scoring")]


def test_only_the_cli_imports_the_cli():
    importers = sorted(str(f.relative_to(PACKAGE)) for f in PACKAGE.rglob("*.py")
                       if "cli" not in f.relative_to(PACKAGE).parts
                       and any(m and (m == "cli" or m.startswith(("cli.", "judge_gateway.cli")))
                               for _, m, _ in _imports(f)))
    assert importers == []


PROMPTS_SUBMODULES = ("derive", "lock", "parse", "registry", "template")


def test_prompts_submodules_import_their_siblings_never_the_face():
    prompts = PACKAGE / "prompts"
    assert sorted(p.stem for p in prompts.glob("*.py") if p.stem != "__init__") == list(PROMPTS_SUBMODULES)
    for name in PROMPTS_SUBMODULES:
        for level, module, names in _imports(prompts / f"{name}.py"):
            # absolute: `.x` is judge_gateway.prompts.x, `..x` is judge_gateway.x
            base = ["judge_gateway", "prompts"][: 2 - (level - 1)] if level else []
            target = ".".join([*base, *([module] if module else [])])
            if target == "judge_gateway.prompts":  # `from . import y`: y must be a sibling module
                assert set(names) <= set(PROMPTS_SUBMODULES), (name, names)
            elif target.startswith("judge_gateway.prompts."):
                assert target.split(".")[2] in PROMPTS_SUBMODULES, (name, target)


def test_the_prompts_face_re_exports_the_submodules_objects():
    from judge_gateway import prompts
    from judge_gateway.prompts import derive, parse, registry, template

    homes = {"TEMPLATE_KINDS": parse, "MEDIA_SLOTS": template,
             "Aspect": template, "Template": template, "TemplateError": template, "list_templates": registry,
             "load_template": registry, "lock_new_templates": registry, "parse_ref": registry,
             "show_template": registry, "verify_lock": registry, "TemplateDirs": registry,
             "family_versions": registry, "new_template": derive}
    assert sorted(prompts.__all__) == sorted(homes)
    for name, home in homes.items():
        assert getattr(prompts, name) is getattr(home, name), name
    # The paths live in registry alone (its functions read them there): a copy on the face would
    # take a setting and change nothing.
    assert not hasattr(prompts, "TEMPLATES_DIR") and not hasattr(prompts, "LOCK_PATH")
    assert registry.LOCK_PATH == registry.TEMPLATES_DIR / "templates.lock" == PACKAGE / "prompts" / "templates.lock"
    assert prompts.load_template("vqa_alignment@1").ref == "vqa_alignment@1"
