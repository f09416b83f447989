"""The mmcv build's unity step, measured: compile mmcv's op wrappers one unit each (as mmcv's own
build does) and folded into one unit (judge_gateway/envs/mmcv.py), with and without debug info,
and print the compiler's CPU seconds (user + system of g++, summed over units) and the ratios.

    .venv/bin/python bench/mmcv_unity.py --torch-venv .venv-geneval --sdist DIR_OR_TARBALL [--files 12]

--sdist: mmcv-2.1.0.tar.gz or its unpacked folder (`pip download --no-deps --no-binary :all:
--no-build-isolation mmcv==2.1.0`). --files N compiles the first N wrappers (default 12: the
measurement takes ~3 min of CPU); the unity unit holds the same N. Units compile one at a time,
so the CPU seconds do not depend on the machine's other load as much as wall time would.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sysconfig
import tarfile
import tempfile
from pathlib import Path


def compile_cpu_s(args: list[str]) -> float:
    """CPU seconds (user + system) the compiler's processes used for one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(args, capture_output=True, text=True, check=False)  # torch's headers warn a lot
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"g++ failed on {args[-1]}:\n{done.stderr[-3000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--torch-venv", type=Path, required=True, help="a venv with torch (its headers)")
    ap.add_argument("--sdist", type=Path, required=True)
    ap.add_argument("--files", type=int, default=12)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mmcv-unity-"))
    src = args.sdist
    if src.is_file():
        with tarfile.open(src) as tar:
            tar.extractall(work, filter="data")
        src = next(work.glob("mmcv-*"))
    site = next(args.torch_venv.glob("lib/python*/site-packages"))
    inc = site / "torch" / "include"
    wrappers = sorted((src / "mmcv" / "ops" / "csrc" / "pytorch").glob("*.cpp"))[: args.files]
    unity = work / "unity.cpp"
    unity.write_text("".join(f'#include "{w}"\n' for w in wrappers))
    base = ["g++", "-c", "-o", os.devnull, f"-I{inc}", f"-I{inc / 'torch/csrc/api/include'}",
            f"-I{sysconfig.get_paths()['include']}", f"-I{src / 'mmcv/ops/csrc/common'}",
            "-DTORCH_EXTENSION_NAME=_ext", "-DTORCH_API_INCLUDE_EXTENSION_H", "-D_GLIBCXX_USE_CXX11_ABI=1",
            "-std=c++17", "-fPIC", "-DNDEBUG", "-fwrapv", "-O3", "-Wall"]
    rows = {}
    for debug in ("-g", "-g0"):
        rows[("one unit each", debug)] = sum(compile_cpu_s([*base, debug, str(w)]) for w in wrappers)
        rows[("unity", debug)] = compile_cpu_s([*base, debug, str(unity)])
    reference = rows[("one unit each", "-g")]
    print(f"{len(wrappers)} of mmcv's op wrappers, g++ CPU seconds (user + sys):")
    for (how, debug), cpu in rows.items():
        print(f"  {how:14s} {debug:4s} {cpu:7.1f} s   {cpu / reference:5.2f} of mmcv's own way (one unit each, -g)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
