"""The test harness itself: a hang fails (pytest-timeout bounds the reliability and Ray stages),
and the helpers that start servers leave nothing blocked or running behind."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]


def test_the_long_stages_run_under_a_per_test_timeout():
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert any(req.startswith("pytest-timeout") for req in dev), dev
    script = (ROOT / "scripts" / "test.sh").read_text()
    for stage in ("tests/reliability", "tests/ray"):
        (line,) = [ln for ln in script.splitlines() if re.search(rf"-m pytest {stage}\b", ln)]
        assert re.search(r"--timeout=(\d+)", line) and int(re.search(r"--timeout=(\d+)", line).group(1)) >= 600, line


def test_redis_server_output_goes_to_a_file_not_an_unread_pipe(tmp_path):
    server = RedisServer(tmp_path)
    try:
        assert server.proc.stdout is None
        log = server.log_path.read_text()
    finally:
        server.stop()
    assert "Ready to accept connections" in log


# ---- the test layout itself: markers, one cache rule for tiny models (the bench's imports: test_import_rules) ----


def test_everything_outside_tests_unit_carries_the_integration_marker():
    """`pytest -m "not integration"` is the unit tests: files of the set-up stages that never
    named the marker themselves (a Redis test, a config test) are deselected too."""
    files = ["tests/integration/test_store_redis.py", "tests/integration/test_cosmos_rl_config.py"]
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-m", "not integration", *files], cwd=ROOT, capture_output=True, text=True, check=False)
    assert "no tests collected" in done.stdout and re.search(r"\b(\d+) deselected", done.stdout), done.stdout[-2000:]
    assert int(re.search(r"\b(\d+) deselected", done.stdout).group(1)) >= 3, done.stdout[-2000:]


def test_no_tiny_model_is_cached_outside_the_one_rule():
    """Every tiny-model build goes through tests/support/tiny_cache.py: nothing else names the cache."""
    others = [p for p in [*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").glob("*.py")]
              if p.name != "tiny_cache.py" and p != Path(__file__).resolve()
              and ("JG_TEST_CACHE" in p.read_text() or '".cache"' in p.read_text())]
    assert others == []


def test_no_test_names_a_worker_venv_itself():
    """A worker venv's interpreter comes from heads_env (venv_python: $JG_*_VENV, else .venv-*) or
    vllm_server: a test that joins the default path itself ignores the override."""
    others = [str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*.py")
              if p.name not in ("heads_env.py", "vllm_server.py") and re.search(r'/ "\.venv', p.read_text())]
    assert others == []


def _cached_builder_modules() -> set[str]:
    """The `module=` of every cached_build call in tests/support (the builders the cache runs)."""
    found = set()
    for path in (ROOT / "tests" / "support").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "cached_build":
                found.update(kw.value.value for kw in node.keywords
                             if kw.arg == "module" and isinstance(kw.value, ast.Constant))
    return found


def test_no_builders_hash_holds_the_cache_or_its_wrapper():
    """A builder's digest covers the modules it imports: one whose `build_tiny_*` wrapper sat in the
    builder module hashed tiny_cache.py (and rebuilt on every cache-rule edit). Wrappers live in
    heads_env / vllm_server, outside the builders."""
    from tests.support.tiny_cache import builder_sources

    builders = _cached_builder_modules()
    assert "tests.support.tiny_wan" in builders and "tests.support.tiny_heads" in builders, builders
    wrappers = {ROOT / "tests/support/tiny_cache.py", ROOT / "tests/support/heads_env.py",
                ROOT / "tests/support/vllm_server.py"}
    assert {m: sorted(p.name for p in wrappers & set(builder_sources(m))) for m in builders
            if wrappers & set(builder_sources(m))} == {}


def _fake_builders(root: Path, helper: str = "SCALE = 1\n") -> None:
    support = root / "tests" / "support"
    support.mkdir(parents=True)
    (root / "tests" / "__init__.py").write_text("")
    (support / "__init__.py").write_text("")
    (support / "tiny_helper.py").write_text(helper)
    (support / "tiny_fake.py").write_text(
        "import sys\nfrom pathlib import Path\n"
        "def main():\n"
        "    from tests.support.tiny_helper import SCALE\n"
        "    out = Path(sys.argv[1])\n"
        "    (out / 'weights.txt').write_text(str(SCALE) + ' ' + ' '.join(sys.argv[2:]))\n"
        "    (out / 'runs').mkdir(exist_ok=True)\n"
        "    with open(out.parent / 'runs.log', 'a') as f:\n"
        "        f.write('built\\n')\n"
        "    (out / 'done.json').write_text('{\"model\": \"weights.txt\"}')\n"
        "main()\n")


def test_tiny_models_are_cached_by_a_hash_of_their_builder(tmp_path, monkeypatch):
    from tests.support import tiny_cache

    root, cache = tmp_path / "repo", tmp_path / "cache"
    _fake_builders(root)
    monkeypatch.setattr(tiny_cache, "ROOT", root)
    monkeypatch.setenv("JG_TEST_CACHE", str(cache))
    venv = tmp_path / "venv"
    (venv / "lib" / "python3.12" / "site-packages" / "torch-2.13.0.dist-info").mkdir(parents=True)
    (venv / "bin").mkdir()
    python = venv / "bin" / "python"
    python.symlink_to(sys.executable)
    monkeypatch.setenv("PYTHONPATH", str(root))

    def build(*args: str) -> Path:
        return tiny_cache.cached_build("fake", python=python, module="tests.support.tiny_fake", marker="done.json",
                                       args=args)

    first = build()
    assert first.parent == cache and first.name.startswith("fake-") and len(first.name) == len("fake-") + 12
    assert (first / "weights.txt").read_text().strip() == "1"
    assert build() == first  # cached: not run again
    assert (cache / "runs.log").read_text().count("built") == 1
    # the builder's own source, a tests.support module it imports, its arguments and the venv's versions
    # each make another entry, built once
    assert tiny_cache.builder_sources("tests.support.tiny_fake") == [root / "tests/support/tiny_fake.py",
                                                                      root / "tests/support/tiny_helper.py"]
    (root / "tests" / "support" / "tiny_helper.py").write_text("SCALE = 2\n")
    second = build()
    assert second != first and (second / "weights.txt").read_text().strip() == "2"
    third = build("--size", "base")
    assert third not in (first, second) and (third / "weights.txt").read_text() == "2 --size base"
    (venv / "lib" / "python3.12" / "site-packages" / "torch-2.13.0.dist-info").rename(
        venv / "lib" / "python3.12" / "site-packages" / "torch-2.14.0.dist-info")
    fourth = build()
    assert fourth not in (first, second, third)
    assert (cache / "runs.log").read_text().count("built") == 4
    assert sorted(p.name for p in cache.iterdir() if ".tmp-" in p.name) == []  # builds were renamed into place


def test_a_failed_build_leaves_no_entry(tmp_path, monkeypatch):
    from tests.support import tiny_cache

    root, cache = tmp_path / "repo", tmp_path / "cache"
    _fake_builders(root, helper="raise SystemExit('broken builder')\n")
    monkeypatch.setattr(tiny_cache, "ROOT", root)
    monkeypatch.setenv("JG_TEST_CACHE", str(cache))
    monkeypatch.setenv("PYTHONPATH", str(root))
    with pytest.raises(RuntimeError, match="broken builder"):
        tiny_cache.cached_build("fake", python=Path(sys.executable), module="tests.support.tiny_fake",
                                marker="done.json")
    assert list(cache.iterdir()) == []


def test_a_path_recorded_relative_in_an_entry_resolves_outside_it(tmp_path):
    from tests.support.tiny_cache import resolve_entry_paths

    entry = tmp_path / "cache" / "model-0123456789ab"
    (entry / "ckpt" / "checkpoint-1").mkdir(parents=True)
    (entry / "base").mkdir()
    (entry / "ckpt" / "model_config.json").write_text(json.dumps({"model_config": {"model_name_or_path": "base"}}))
    resolved = resolve_entry_paths(entry, "ckpt/model_config.json", tmp_path / "resolved" / "ckpt",
                                   ["model_config.model_name_or_path"])
    assert json.loads(resolved.read_text())["model_config"]["model_name_or_path"] == str(entry / "base")
    assert (resolved.parent / "checkpoint-1").resolve() == entry / "ckpt" / "checkpoint-1"
    # the cached file itself still says "base": the entry can move
    assert json.loads((entry / "ckpt" / "model_config.json").read_text())["model_config"]["model_name_or_path"] == "base"


def test_a_json_entry_resolves_without_pyyaml(tmp_path, monkeypatch):
    """PyYAML is not declared for .venv: only a YAML file needs it."""
    from tests.support.tiny_cache import resolve_entry_paths

    monkeypatch.setitem(sys.modules, "yaml", None)  # `import yaml` raises ImportError
    entry = tmp_path / "cache" / "model-0123456789ab"
    (entry / "base").mkdir(parents=True)
    (entry / "config.json").write_text(json.dumps({"model_name_or_path": "base"}))
    resolved = resolve_entry_paths(entry, "config.json", tmp_path / "resolved", ["model_name_or_path"])
    assert json.loads(resolved.read_text())["model_name_or_path"] == str(entry / "base")


def _fake_videoalign_entry(root: Path) -> Path:
    """An entry as the cache holds it: a checkpoint whose config names the base model relative."""
    entry = root / ".cache" / "videoalign-tiny-0123456789ab"
    (entry / "ckpt" / "checkpoint-7").mkdir(parents=True)
    (entry / "ckpt" / "checkpoint-7" / "weights.bin").write_bytes(root.name.encode())
    (entry / "base").mkdir()
    (entry / "ckpt" / "model_config.json").write_text(json.dumps({"model_config": {"model_name_or_path": "base"}}))
    return entry


def test_two_checkouts_resolved_entries_never_share_links(tmp_path, monkeypatch):
    """Two checkouts (a worktree and a clean clone) cache the same builder under the same
    `<name>-<digest>`: each one's resolved checkpoint links into its own entry, and removing one
    checkout leaves the other's working (the links once pointed into whichever came first)."""
    import shutil
    import tempfile

    from tests.support import heads_env

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    first, second = _fake_videoalign_entry(tmp_path / "wt-a"), _fake_videoalign_entry(tmp_path / "wt-b")
    ckpt_first = heads_env.videoalign_checkpoint(first)
    ckpt_second = heads_env.videoalign_checkpoint(second)
    assert ckpt_first != ckpt_second
    assert (ckpt_second / "checkpoint-7").resolve() == second / "ckpt" / "checkpoint-7"
    assert json.loads((ckpt_second / "model_config.json").read_text())["model_config"]["model_name_or_path"] == \
        str(second / "base")
    shutil.rmtree(tmp_path / "wt-a")
    again = heads_env.videoalign_checkpoint(second)
    assert (again / "checkpoint-7" / "weights.bin").read_bytes() == b"wt-b"


def test_a_dangling_link_in_a_resolved_folder_is_pointed_at_the_entry(tmp_path):
    """A resolved folder whose links dangle (their entry was removed or moved) is repaired, not a
    FileExistsError from creating the link again."""
    from tests.support.tiny_cache import resolve_entry_paths

    entry = _fake_videoalign_entry(tmp_path / "wt")
    dest = tmp_path / "resolved" / "ckpt"
    dest.mkdir(parents=True)
    (dest / "checkpoint-7").symlink_to(tmp_path / "gone" / "checkpoint-7")  # dangling
    resolved = resolve_entry_paths(entry, "ckpt/model_config.json", dest, ["model_config.model_name_or_path"])
    assert (resolved.parent / "checkpoint-7" / "weights.bin").read_bytes() == b"wt"


def test_a_venv_the_test_command_still_builds_is_waited_for(tmp_path, monkeypatch):
    """JG_SETUP_PENDING (scripts/test.sh): a test that needs a venv still being built waits until
    the build's marker is gone, then finds the interpreter (or says it is missing)."""
    import threading

    from tests.support import heads_env

    pending = tmp_path / "pending"
    pending.mkdir()
    marker = pending.joinpath(".venv-geneval")  # the venv's default folder name
    marker.touch()
    venv = tmp_path / "venv-geneval"
    monkeypatch.setenv("JG_SETUP_PENDING", str(pending))
    monkeypatch.setenv("JG_GENEVAL_VENV", str(venv))

    def build() -> None:  # the set-up stage: the interpreter appears, then the marker goes
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "python").touch()
        marker.unlink()

    timer = threading.Timer(0.5, build)
    timer.start()
    try:
        assert heads_env.geneval_python() == venv / "bin" / "python"
    finally:
        timer.join()
    assert not marker.exists()
