"""`judge-gateway prepare` on a config with the OCR head, a tiny CLIP-family head, hpsv3 and the
tiny vLLM model (local paths, offline): environments reused, weights found, every judge loaded
and probed; a broken venv and a missing weight reported per judge while the others pass; a
re-run with nothing to build."""

from __future__ import annotations

import re
import stat
import time

import pytest

from tests.support.heads_env import build_tiny_heads, heads_python
from tests.support.operate_configs import operate_config, run_cli
from tests.support.toml_text import to_toml

pytestmark = pytest.mark.integration


def _rows(out: str) -> dict[str, str]:
    """judge name -> its line of the table."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"^judge\s+env\s+weights\s+load\s+probe\s+time", line))
    rows = {}
    for line in lines[start + 1:]:
        if not line.strip():
            break
        rows[line.split()[0]] = line
    return rows


def test_prepare_checks_each_judge_and_reports_a_broken_venv_and_a_missing_weight(vllm, tiny_model_dir, tmp_path):
    # The launched backend's URL is the session's server: it answers, so it is probed as it is.
    cfg = operate_config(tiny_model_dir, vllm.port)
    broken = tmp_path / "broken-venv" / "bin" / "python"
    broken.parent.mkdir(parents=True)
    broken.write_text("#!/bin/sh\necho 'broken interpreter' >&2\nexit 3\n")
    broken.chmod(broken.stat().st_mode | stat.S_IXUSR)
    models = build_tiny_heads()
    cfg["judges"]["clip_broken_env"] = {"kind": "clip", "default": False,
                                        "options": {**cfg["judges"]["clip"]["options"], "python": str(broken)}}
    cfg["judges"]["hpsv2_missing"] = {"kind": "hpsv2", "default": False, "options": {
        "python": str(heads_python()), "model": "jg-tiny-clip", "checkpoint": str(tmp_path / "missing" / "hps.pt"),
        "model_config_file": str(models / "openclip_cfg" / "jg-tiny-clip.json")}}
    config = tmp_path / "prepare.toml"
    config.write_text(to_toml(cfg))

    started = time.monotonic()
    done = run_cli(["prepare", "--config", str(config), "--offline"], cwd=tmp_path)
    first_s = time.monotonic() - started
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    rows = _rows(out)
    for good in ("ocr", "clip", "hpsv3", "alignment"):
        assert re.search(r"\(reused\)|gateway's interpreter", rows[good]), rows[good]
        assert "ok (reward " in rows[good], f"{good}: {rows[good]}\n{out}\n{done.stderr[-3000:]}"
    assert "local" in rows["clip"] and "local" in rows["hpsv3"] and "local" in rows["alignment"]
    assert "(FAILED)" in rows["clip_broken_env"] and "MISSING 1 of 2" in rows["hpsv2_missing"]
    problems = out.split("not ready:", 1)[1]
    assert re.search(r"clip_broken_env: env: environment 'heads': install torch failed \(exit 3\).*broken interpreter",
                     problems, re.S), problems
    assert f"hpsv2_missing: weights: options.checkpoint: {tmp_path / 'missing' / 'hps.pt'} not found" in problems
    assert "4 of 6 judges ready" in out

    started = time.monotonic()
    again = run_cli(["prepare", "--config", str(config), "--offline", "--judges", "ocr,clip,hpsv3,alignment"],
                    cwd=tmp_path)
    second_s = time.monotonic() - started
    assert again.returncode == 0, again.stdout + again.stderr
    assert "4 of 4 judges ready" in again.stdout
    said = again.stdout + again.stderr
    assert said.count("nothing to do") == 3 and "step 1/" not in said  # heads, hpsv3, vllm: none rebuilt
    print(f"[prepare] first run {first_s:.1f} s (6 judges, 2 not ready), re-run {second_s:.1f} s (4 judges)")
