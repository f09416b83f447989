"""The test harness itself: a hang fails (pytest-timeout bounds the reliability and Ray stages),
and the helpers that start servers leave nothing blocked or running behind."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

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
