"""Sibling venvs share identical files as hard links (judge_gateway/envs/share.py), and nothing that
writes into a venv afterwards changes a sibling's copy through the link."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from judge_gateway.envs import EnvBuilder, choose_torch
from judge_gateway.envs import share as share_mod
from judge_gateway.envs.share import MIN_SIZE, share_identical_files, sibling_venvs
from judge_gateway.envs.spec import parse_specs
from tests.support.wheels import pure_wheel

PATCH_SCRIPT = Path(share_mod.__file__).with_name("patch_torchvision.py")
NO_GPU: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
BIG = b"".join(i.to_bytes(4, "little") for i in range(MIN_SIZE // 2))  # 2 * MIN_SIZE bytes


def _venv(parent: Path, name: str, files: dict[str, bytes], mode: int = 0o644) -> Path:
    venv = parent / name
    (venv / "pyvenv.cfg").parent.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    sp = venv / "lib" / "python3.11" / "site-packages"
    for rel, data in files.items():
        path = sp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
    return venv


def _file(venv: Path, rel: str) -> Path:
    return venv / "lib" / "python3.11" / "site-packages" / rel


def test_identical_files_become_one_copy_and_different_ones_stay_apart(tmp_path):
    other = BIG[:-1] + b"!"  # same size, one byte differs
    a = _venv(tmp_path, "env-a", {"pkg/lib.so": BIG, "pkg/other.bin": BIG, "pkg/small.py": b"x = 1\n",
                                     "only_a/big.bin": BIG})
    b = _venv(tmp_path, "env-b", {"pkg/lib.so": BIG, "pkg/other.bin": other, "pkg/small.py": b"x = 1\n"})
    (tmp_path / "not-a-venv" / "lib").mkdir(parents=True)
    assert sibling_venvs(b) == [a]

    done = share_identical_files(b)
    assert (done.files, done.bytes, done.unavailable) == (1, len(BIG), "")
    assert os.path.samefile(_file(a, "pkg/lib.so"), _file(b, "pkg/lib.so"))
    assert _file(b, "pkg/lib.so").read_bytes() == BIG
    assert not os.path.samefile(_file(a, "pkg/other.bin"), _file(b, "pkg/other.bin"))
    assert _file(b, "pkg/other.bin").read_bytes() == other
    assert not os.path.samefile(_file(a, "pkg/small.py"), _file(b, "pkg/small.py"))  # under MIN_SIZE: not hashed
    assert not any(p.name.startswith(".") for p in _file(b, "pkg").iterdir())  # no temporary left behind
    assert share_identical_files(b).files == 0  # a second pass finds nothing more
    assert share_identical_files(a).files == 0  # nor does the sibling: the file is already one copy


def test_a_third_venv_joins_the_copy_most_venvs_share(tmp_path):
    a = _venv(tmp_path, "env-a", {"t/lib.so": BIG})
    b = _venv(tmp_path, "env-b", {"t/lib.so": BIG})
    share_identical_files(b)
    c = _venv(tmp_path, "env-c", {"t/lib.so": BIG})
    assert share_identical_files(c).files == 1
    assert _file(a, "t/lib.so").stat().st_nlink == 3


def test_a_file_of_another_mode_is_left_alone(tmp_path):
    _venv(tmp_path, "env-a", {"bin/tool": BIG}, mode=0o755)
    b = _venv(tmp_path, "env-b", {"bin/tool": BIG}, mode=0o644)
    assert share_identical_files(b).files == 0
    assert _file(b, "bin/tool").stat().st_mode & 0o777 == 0o644


def test_a_filesystem_without_hard_links_leaves_every_file_and_says_why(tmp_path, monkeypatch):
    a = _venv(tmp_path, "env-a", {"t/lib.so": BIG, "t/two.so": BIG[::-1]})
    b = _venv(tmp_path, "env-b", {"t/lib.so": BIG, "t/two.so": BIG[::-1]})

    def refuse(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(share_mod.os, "link", refuse)
    done = share_identical_files(b)
    assert done.files == 0 and "Operation not permitted" in done.unavailable
    for rel in ("t/lib.so", "t/two.so"):
        assert not os.path.samefile(_file(a, rel), _file(b, rel))
        assert _file(b, rel).read_bytes() == _file(a, rel).read_bytes()


def test_patching_torchvision_in_one_venv_leaves_the_shared_copy_of_its_sibling(tmp_path):
    # the patched file shared first (min_size 0), as a real torchvision's would be when it is large enough
    source = b'import torch\n@torch.library.register_fake("torchvision::nms")\ndef meta_nms(dets, scores, t):\n    pass\n'
    files = {"torchvision/__init__.py": b"", "torchvision/_meta_registrations.py": source}
    a = _venv(tmp_path, "env-a", files)
    b = _venv(tmp_path, "env-b", files)
    assert share_identical_files(b, min_size=0).files == 2
    env = {**os.environ, "PYTHONPATH": str(_file(b, ""))}
    done = subprocess.run([sys.executable, str(PATCH_SCRIPT), "t"], env=env, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "guarded 1 register_fake" in done.stdout
    assert b"patched by judge-gateway" in _file(b, "torchvision/_meta_registrations.py").read_bytes()
    assert _file(a, "torchvision/_meta_registrations.py").read_bytes() == source
    assert os.path.samefile(_file(a, "torchvision/__init__.py"), _file(b, "torchvision/__init__.py"))


def _compiled(venv: Path, rel: str, source: bytes, mtime: int) -> Path:
    """A module with its .pyc, as pip leaves it: compiled against the file's own mtime."""
    import py_compile

    path = _file(venv, rel)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(source)
    os.utime(path, (mtime, mtime))
    py_compile.compile(str(path), doraise=True, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    return path


def _imports_from_bytecode(venv: Path, module: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(_file(venv, "")), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-v", "-c", f"import {module}"], env=env, capture_output=True, text=True,
                          check=True)
    return "\n".join(line for line in done.stderr.splitlines() if module in line)


MODULE = b"".join(b"X%d = %d\n" % (i, i) for i in range(3000))  # ~30 KB of source


def test_a_shared_module_brings_its_bytecode_so_no_import_finds_it_stale(tmp_path):
    a = _venv(tmp_path, "env-a", {})
    b = _venv(tmp_path, "env-b", {})
    _compiled(a, "jg_mod.py", MODULE, mtime=1_700_000_000)
    _compiled(b, "jg_mod.py", MODULE, mtime=1_700_000_500)  # installed later: another mtime in its .pyc
    assert "code object from" in _imports_from_bytecode(b, "jg_mod")
    assert share_identical_files(b).files == 1
    assert os.path.samefile(_file(a, "jg_mod.py"), _file(b, "jg_mod.py"))
    pyc = f"__pycache__/jg_mod.{sys.implementation.cache_tag}.pyc"
    assert os.path.samefile(_file(a, pyc), _file(b, pyc))
    said = _imports_from_bytecode(b, "jg_mod")
    assert "code object from" in said and "stale" not in said, said


def test_a_module_whose_sibling_has_no_valid_bytecode_stays_our_own(tmp_path):
    a = _venv(tmp_path, "env-a", {})
    b = _venv(tmp_path, "env-b", {})
    _compiled(a, "jg_mod.py", MODULE, mtime=1_700_000_000)
    os.utime(_file(a, "jg_mod.py"), (1_700_000_100, 1_700_000_100))  # its .pyc is stale now
    _compiled(b, "jg_mod.py", MODULE, mtime=1_700_000_500)
    assert share_identical_files(b).files == 0
    assert not os.path.samefile(_file(a, "jg_mod.py"), _file(b, "jg_mod.py"))
    said = _imports_from_bytecode(b, "jg_mod")
    assert "code object from" in said and "stale" not in said, said


def _wheel(folder: Path, name: str, payload: bytes) -> Path:
    """A wheel of one package holding a large data file."""
    return pure_wheel(folder, name, {f"{name}/__init__.py": b"", f"{name}/data.bin": payload})


@pytest.mark.parametrize("share_files", [True, False])
def test_the_builder_links_what_a_sibling_venv_already_holds(tmp_path, share_files):
    wheel = _wheel(tmp_path, "jg_share_probe", BIG)
    specs = parse_specs(f'[torch]\nversion = "2.13.0"\n[envs.tiny]\nsummary = "a test"\nvenv = "env-tiny"\n'
                        f'imports = ["jg_share_probe"]\nsteps = [{{ pip = ["{wheel}"], no_deps = true }}]\n')
    lines: list[str] = []
    builder = EnvBuilder(choose_torch("cpu", specs.torch, gpus=NO_GPU, find_links=[]), specs=specs,
                         log=lines.append, verbose_pip=False, share_files=share_files)
    venvs = tmp_path / "envs"
    # a venv of the user's own beside them, holding the very same file: never linked to
    own = _venv(venvs, "users-own", {})
    mine = own / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" / "jg_share_probe"
    mine.mkdir(parents=True)
    (mine / "data.bin").write_bytes(BIG)
    (mine / "data.bin").chmod(0o644)
    builder.ensure("tiny", venvs / "env-one")
    builder.ensure("tiny", venvs / "env-two")
    assert (mine / "data.bin").stat().st_nlink == 1
    data = [next((venvs / v / "lib").glob("python3*/site-packages/jg_share_probe/data.bin")) for v in ("env-one",
                                                                                                      "env-two")]
    assert os.path.samefile(*data) is share_files
    assert data[1].read_bytes() == BIG
    said = [line for line in lines if "hard links to identical files of sibling venvs" in line]
    assert len(said) == (1 if share_files else 0), lines

