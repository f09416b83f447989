"""The environments get the judge-gateway that is running, never a version from the package index
(issue 33: a wheel install could build no head environment, `judge-gateway==0.1.0` is not on the
index). From a checkout: the checkout, editable. From an installed wheel: a wheel rebuilt from
the installed files (the integration test tests/integration/test_wheel_install.py compares it
with the wheel pip installed, and builds .venv-heads and the vLLM venv from it)."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from judge_gateway.envs import EnvBuilder, choose_torch, load_specs
from judge_gateway.envs.self_install import self_install, source_checkout

ROOT = Path(__file__).resolve().parents[2]


def test_from_a_checkout_it_is_the_checkout_editable(tmp_path):
    assert source_checkout() == ROOT
    installs, what = self_install(("ocr",), tmp_path)
    assert installs == [["-e", f"{ROOT}[ocr]"]] and "this checkout" in what
    specs = load_specs()
    builder = EnvBuilder(choose_torch("cpu", specs.torch, find_links=[]), specs=specs, wheel_cache=tmp_path)
    plan = "\n".join(builder.plan(specs.env("heads"), tmp_path.joinpath(".venv-heads")))
    assert f"pip install -c constraints -e {ROOT}" in plan
    assert "judge-gateway==" not in plan  # never the index's


def _record_line(site: Path, rel: str) -> list[str]:
    data = (site / rel).read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [rel, f"sha256={digest}", str(len(data))]


SCRIPT = """
import json, sys, zipfile
from pathlib import Path
from judge_gateway.envs import self_install as si
si.source_checkout = lambda: None   # as from a wheel: site-packages has no pyproject.toml
installs, what = si.self_install(("heads",), Path(sys.argv[1]))
wheel = Path(installs[1][-1])
with zipfile.ZipFile(wheel) as zf:
    names = zf.namelist()
    record = zf.read([n for n in names if n.endswith("/RECORD")][0]).decode()
print(json.dumps({"installs": installs, "what": what, "names": names, "record": record,
                  "again": str(si.running_wheel(Path(sys.argv[1])))}))
"""


def test_from_an_installed_distribution_it_is_a_wheel_of_the_installed_files(tmp_path):
    """A site folder holding the package (a link to this checkout's) and a dist-info whose RECORD
    lists its files, as pip leaves them: the wheel holds those files and a new RECORD, no bytecode,
    no installer files, no console script; the index is never named."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "judge_gateway").symlink_to(ROOT / "judge_gateway")
    info = site / "judge_gateway-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: judge-gateway\nVersion: 0.1.0\n")
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "direct_url.json").write_text('{"url": "file:///gone/judge_gateway-0.1.0-py3-none-any.whl"}')
    rels = sorted(str(p.relative_to(site)) for p in (site / "judge_gateway").rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)
    rels = [r for r in rels if r.startswith("judge_gateway/envs/") or r == "judge_gateway/__init__.py"][:40]
    with (info / "RECORD").open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        for rel in [*rels, "judge_gateway-0.1.0.dist-info/METADATA", "judge_gateway-0.1.0.dist-info/WHEEL",
                    "judge_gateway-0.1.0.dist-info/INSTALLER", "judge_gateway-0.1.0.dist-info/direct_url.json"]:
            w.writerow(_record_line(site, rel))
        w.writerow(["judge_gateway/__pycache__/__init__.cpython-311.pyc", "", ""])
        w.writerow(["../../../bin/judge-gateway", "", ""])
        w.writerow(["judge_gateway-0.1.0.dist-info/RECORD", "", ""])
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "cache")], env=env, capture_output=True,
                          text=True, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    wheel = tmp_path / "cache" / "self"
    assert out["installs"][0][0].endswith("judge_gateway-0.1.0-py3-none-any.whl[heads]")
    assert out["installs"][1][:2] == ["--no-deps", "--force-reinstall"]
    assert Path(out["installs"][1][2]).is_relative_to(wheel) and out["again"] == out["installs"][1][2]
    assert "rebuilt from the running installation" in out["what"]
    assert sorted(out["names"]) == sorted([*rels, "judge_gateway-0.1.0.dist-info/METADATA",
                                           "judge_gateway-0.1.0.dist-info/WHEEL",
                                           "judge_gateway-0.1.0.dist-info/RECORD"])
    record = {row[0]: row for row in csv.reader(io.StringIO(out["record"]))}
    assert record[rels[0]] == _record_line(site, rels[0])  # hashes of the installed bytes
    with zipfile.ZipFile(out["installs"][1][2]) as zf:
        assert zf.read(rels[0]) == (site / rels[0]).read_bytes()
    assert json.dumps(out).count("judge-gateway==") == 0
