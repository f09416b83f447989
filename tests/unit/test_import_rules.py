"""Import rules, read from the source with `ast` (nothing is imported):

- the package's floors run one way: a module imports only from its own floor or lower;
- no circle among the package's modules, nor among its top-level parts;
- no test module imports another test module (shared helpers live in tests/support or conftest).
- the bench imports nothing from tests/ (it runs the tiny-model builders as a command).

Every import counts, at the top of a file or inside a function or `if TYPE_CHECKING:`: a lazy
import is still a dependency of the module that writes it. So do the kind table's imports by
string (config/kinds.py: `module:Name`, imported by `import_named`): the table is the one module
imported here, and each row is an import by the module that calls `import_named` with its field.
`python tests/unit/test_import_rules.py` prints what the tests below read.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "judge_gateway"

# The floors, lowest first; a module sits on the floor of its longest listed prefix, and every
# module must sit on one (a new top-level module or package is placed here on purpose).
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("media, prompts, parsers", (
        "media", "prompts", "parsers", "bands", "json_body", "jsonl", "metrics",
        "aggregation_profiles",  # aggregation profiles: written by tuning, read by config and the rubric judge
        "inputs",  # samples on disk: score's readers; InputItem, sample_key: shared by score, eval, tune
        "atoms",  # GenEval 2's VQA atoms of a prompt: read by config (the atoms file) and the judge
        "exceptions", "_version",  # the exception tree's root and branches; the version string
        "extras",  # the pip extras and the check that names a missing one
        "env_vars",  # the JG_ environment variables and their deprecated JUDGE_GATEWAY_ spellings
        "envs",  # the environment specs and their builder: pip and venvs, nothing of the gateway
        "comparisons",  # comparative judging's arithmetic: schedules, outcomes, aggregations, report
    )),
    ("config, schema", (
        "config", "schema",
        "runs",  # the run-folder format: written by score and the watch, read by browse, eval and tune
    )),
    ("backends, store, combine", (
        "backends", "store", "combine",
        "chat_http",  # the backends' chat completions over aiohttp
        "latents", "latent_worker",  # the cosmos-rl latent decoder
        "device_video",  # judges' videos decoded and resized on the device, by the latent decoder's torch worker
        "work_queue",  # the durable queue of accepted cosmos-rl work, beside the store
        "workers",  # the one framing and supervisor of worker subprocesses (heads, latent decoder)
        "launch",  # `up`: the vLLM servers and the gateway as supervised processes
        "residency",  # colocated judges' sleep and wake: the units, vLLM's sleep mode
    )),
    ("heads, judges", ("heads", "judges")),
    ("judge_factory", ("judge_factory",)),
    ("gateway", ("gateway",)),
    ("watch", ("watch",)),  # shadow judges over live traffic: scores through the gateway, fed by the server
    ("server, client", ("server", "client", "", "ray_mode")),  # ray_mode: the same app on Serve  # "": the package face, judge_gateway/__init__
    ("tuning", (  # the offline tools over run folders and preference data
        "tuning", "evaluation", "browse",
        "preflight",  # which of a command's judges can score here, through a client
        "prepare",  # environments, weights and a probe per judge before serving
    )),
    ("cli", ("cli",)),
]

# Imports that still run up a floor, as "importer -> imported": a ratchet, it may only shrink.
# Each entry says why it is still there.
ALLOWED_UPWARD: dict[str, str] = {}

# A module longer than this says why at its top: its docstring holds LONG_REASON and the reason.
MAX_LINES = 500
LONG_REASON = "Over 500 lines:"


@dataclass(frozen=True)
class Edge:
    source: str  # importing module, dotted
    target: str  # imported module, dotted (the longest existing module the import names)
    where: str   # path:line of the import


def module_files(top: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under `top` (a package directory)."""
    mods = {}
    for f in sorted(top.rglob("*.py")):
        parts = f.relative_to(top.parent).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return mods


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _existing(name: str, mods: dict[str, Path]) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def import_edges(mods: dict[str, Path], prefix: str, root: Path = ROOT) -> list[Edge]:
    """Every import of a module under `prefix`, by every module of `mods` (paths shown from `root`)."""
    edges: set[Edge] = set()
    for mod, path in mods.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(mod, is_package, node.level, node.module)
                # `from pkg import sub` depends on pkg.sub; `from pkg import name` on pkg itself
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            where = f"{path.relative_to(root)}:{node.lineno}"
            for name in names:
                if not (name == prefix or name.startswith(prefix + ".")):
                    continue
                target = _existing(name, mods)
                if target and target != mod:
                    edges.add(Edge(mod, target, where))
    return sorted(edges, key=lambda e: (e.source, e.target, e.where))


KIND_FIELDS = ("judge", "head_model")  # KindSpec's `module:Name` fields


def kind_table_edges(mods: dict[str, Path], kinds: dict[str, Any] | None = None,
                     root: Path = ROOT) -> list[Edge]:
    """The imports by string: for each call `import_named(x.FIELD)` (judge_factory: `.judge`, the head
    worker: `.head_model`), an edge from its module to the module each row of the kind table names
    in FIELD. A call whose argument is not `x.FIELD` is an Edge to "?" (the rule cannot read it)."""
    if kinds is None:
        from judge_gateway.config.kinds import KINDS as kinds  # the table: its strings are imports
    edges: set[Edge] = set()
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            func = getattr(node, "func", None)
            if not (isinstance(node, ast.Call) and (getattr(func, "id", None) == "import_named"
                                                    or getattr(func, "attr", None) == "import_named")):
                continue
            where = f"{path.relative_to(root)}:{node.lineno}"
            arg = node.args[0] if node.args else None
            if not (isinstance(arg, ast.Attribute) and arg.attr in KIND_FIELDS):
                edges.add(Edge(mod, "?", where))
                continue
            for spec in kinds.values():
                ref = getattr(spec, arg.attr)
                target = ref and _existing(f"{PACKAGE}.{ref.partition(':')[0]}", mods)
                if target and target != mod:
                    edges.add(Edge(mod, target, f"{where} ({spec.name}.{arg.attr})"))
    return sorted(edges, key=lambda e: (e.source, e.target, e.where))


def circles(nodes: set[str], pairs: set[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in pairs:
        succ[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(succ[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(succ[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return sorted(found)


def floor_of(module: str) -> int | None:
    rel = module[len(PACKAGE) + 1:] if module != PACKAGE else ""
    best: tuple[int, int] | None = None  # (prefix length, floor)
    for floor, (_, prefixes) in enumerate(FLOORS):
        for p in prefixes:
            matches = rel == p or (p and rel.startswith(p + "."))
            if matches and (best is None or len(p) > best[0]):
                best = (len(p), floor)
    return None if best is None else best[1]


def _part(module: str) -> str:
    return ".".join(module.split(".")[:2])


@dataclass
class PackageReport:
    modules: dict[str, Path]
    edges: list[Edge]

    @property
    def file_circles(self) -> list[list[str]]:
        return circles(set(self.modules), {(e.source, e.target) for e in self.edges})

    @property
    def part_circles(self) -> list[list[str]]:
        pairs = {(_part(e.source), _part(e.target)) for e in self.edges if _part(e.source) != _part(e.target)}
        return circles({_part(m) for m in self.modules}, pairs)

    @property
    def unplaced(self) -> list[str]:
        return sorted(m for m in self.modules if floor_of(m) is None)

    @property
    def long_modules(self) -> dict[str, int]:
        """Modules over MAX_LINES lines whose docstring does not say why ("Over 500 lines: ...")."""
        out = {}
        for mod, path in self.modules.items():
            text = path.read_text(encoding="utf-8")
            n = text.count("\n")
            if n > MAX_LINES and LONG_REASON not in (ast.get_docstring(ast.parse(text)) or ""):
                out[mod] = n
        return out

    @property
    def upward(self) -> dict[str, list[str]]:
        """"importer -> imported" -> where, for every import of a higher floor."""
        out: dict[str, list[str]] = {}
        for e in self.edges:
            a, b = floor_of(e.source), floor_of(e.target)
            if a is not None and b is not None and b > a:
                out.setdefault(f"{e.source} -> {e.target}", []).append(e.where)
        return out


def package_report() -> PackageReport:
    mods = module_files(ROOT / PACKAGE)
    return PackageReport(mods, import_edges(mods, PACKAGE) + kind_table_edges(mods))


def imports_of_test_modules() -> list[str]:
    """"test module -> what it imports" for every import of a test module by a module of tests/."""
    mods = module_files(ROOT / "tests")
    return sorted(f"{e.where}: {e.source} -> {e.target}" for e in import_edges(mods, "tests")
                  if e.target.rpartition(".")[2].startswith("test_"))


def imports_of_tests_by_the_bench(root: Path = ROOT) -> list[str]:
    """"bench module -> tests module" for every import of tests/ by a module of bench/."""
    mods = {**module_files(root / "tests"), **module_files(root / "bench")}
    return sorted(f"{e.where}: {e.source} -> {e.target}" for e in import_edges(mods, "tests", root=root)
                  if e.source.split(".")[0] == "bench")


def render(report: PackageReport) -> str:
    lines = [f"{len(report.modules)} modules; floors, lowest first:"]
    lines += [f"  {i}  {name}" for i, (name, _) in enumerate(FLOORS)]
    lines += [f"file circle: {' <-> '.join(c)}" for c in report.file_circles]
    lines += [f"part circle: {' <-> '.join(c)}" for c in report.part_circles]
    lines += [f"unplaced: {m}" for m in report.unplaced]
    for pair, where in sorted(report.upward.items()):
        flag = "allowed" if pair in ALLOWED_UPWARD else "NEW"
        lines.append(f"upward ({flag}): {pair}  [{', '.join(where)}]")
    lines += [f"test module imported: {t}" for t in imports_of_test_modules()]
    lines += [f"bench imports the tests: {t}" for t in imports_of_tests_by_the_bench()]
    lines += [f"over {MAX_LINES} lines without a reason: {m} ({n})" for m, n in report.long_modules.items()]
    longest = max(report.modules, key=lambda m: report.modules[m].read_text(encoding="utf-8").count("\n"))
    lines.append(f"{len(report.file_circles)} file circles, {len(report.part_circles)} part circles, "
                 f"{len(report.upward)} upward imports ({len(ALLOWED_UPWARD)} allowed), "
                 f"{len(imports_of_test_modules())} test-module imports, "
                 f"{len(report.long_modules)} modules over {MAX_LINES} lines without a reason "
                 f"(longest: {longest}, {report.modules[longest].read_text(encoding='utf-8').count(chr(10))})")
    return "\n".join(lines)


# ---- the rules -------------------------------------------------------------------------------


def test_the_package_has_no_import_circle():
    report = package_report()
    print(render(report))
    assert report.file_circles == []
    assert report.part_circles == []


def test_every_module_sits_on_a_floor():
    assert package_report().unplaced == []


def test_floors_import_only_downward_beyond_the_allowlist():
    report = package_report()
    print(render(report))
    assert set(report.upward) <= set(ALLOWED_UPWARD), "an import runs up a floor (see the printout)"
    # The ratchet: an entry whose import is gone comes off the list.
    assert set(ALLOWED_UPWARD) <= set(report.upward), "stale ALLOWED_UPWARD entries"


def test_the_kind_table_is_read_as_imports():
    """judge_factory imports each kind's judge class, the head worker each head kind's model: by string,
    which ast alone would not see."""
    edges = {(e.source, e.target) for e in package_report().edges}
    assert (f"{PACKAGE}.judge_factory", f"{PACKAGE}.judges.yes_no") in edges
    assert (f"{PACKAGE}.judge_factory", f"{PACKAGE}.heads.videoalign.judge") in edges
    assert (f"{PACKAGE}.heads.factory", f"{PACKAGE}.heads.models.hpsv3") in edges
    assert not any(e.target == "?" for e in package_report().edges), "an import_named call the rule cannot read"


def test_no_test_module_imports_another():
    assert imports_of_test_modules() == []


def test_the_bench_imports_nothing_from_the_tests():
    assert imports_of_tests_by_the_bench() == []


def test_no_module_is_over_500_lines_without_a_reason_at_its_top():
    assert package_report().long_modules == {}


def test_a_long_module_is_reported_unless_its_docstring_says_why(tmp_path):
    body = "x = 1\n" * (MAX_LINES + 1)
    mods = _write(tmp_path, {"pkg/__init__.py": "", "pkg/long.py": '"""Scoring."""\n' + body,
                             "pkg/said.py": f'"""Scoring.\n\n{LONG_REASON} one table.\n"""\n' + body})
    assert PackageReport(mods, []).long_modules == {"pkg.long": MAX_LINES + 2}


# ---- the rules see what they must see (on small packages written here) ---------------------


def _write(tmp: Path, files: dict[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        f = tmp / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return module_files(tmp / rel.split("/")[0])


def test_a_lazy_import_in_a_base_module_is_a_circle(tmp_path):
    """A factory in the base module that imports the concrete class, which imports the base back, is
    a circle: the import inside a function still counts."""
    mods = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/base.py": "class Base: ...\ndef build():\n    from .concrete import Concrete\n    return Concrete()\n",
        "pkg/concrete.py": "from .base import Base\nclass Concrete(Base): ...\n",
    })
    edges = import_edges(mods, "pkg", root=tmp_path)
    assert circles(set(mods), {(e.source, e.target) for e in edges}) == [["pkg.base", "pkg.concrete"]]


def test_a_bench_import_of_the_tests_is_reported_even_inside_a_function(tmp_path):
    _write(tmp_path, {"tests/__init__.py": "", "tests/support/__init__.py": "", "tests/support/helpers.py": ""})
    _write(tmp_path, {"bench/run.py": "import json\ndef main():\n    from tests.support import helpers\n",
                      "bench/plain.py": "TINY = 'tests.support.helpers'  # a command's name, not an import\n"})
    assert imports_of_tests_by_the_bench(tmp_path) == ["bench/run.py:3: bench.run -> tests.support.helpers"]


def test_an_import_of_a_higher_floor_is_reported():
    report = PackageReport({f"{PACKAGE}.config": Path("c"), f"{PACKAGE}.server.app": Path("s")},
                           [Edge(f"{PACKAGE}.config", f"{PACKAGE}.server.app", "config.py:1"),
                            Edge(f"{PACKAGE}.server.app", f"{PACKAGE}.config", "server/app.py:1")])
    assert list(report.upward) == [f"{PACKAGE}.config -> {PACKAGE}.server.app"]


def test_a_kind_row_naming_a_higher_floor_is_reported(tmp_path):
    mods = _write(tmp_path, {
        f"{PACKAGE}/__init__.py": "",
        f"{PACKAGE}/judge_factory.py": "def build(cfg):\n    return import_named(cfg.kind_spec.judge)\n",
        f"{PACKAGE}/cli/__init__.py": "",
        f"{PACKAGE}/cli/main.py": "class Judge: ...\n",
    })
    kinds = {"x": SimpleNamespace(name="x", judge="cli.main:Judge", head_model=None)}
    report = PackageReport(mods, kind_table_edges(mods, kinds, root=tmp_path))
    assert list(report.upward) == [f"{PACKAGE}.judge_factory -> {PACKAGE}.cli.main"]


if __name__ == "__main__":
    print(render(package_report()))
    sys.exit(0)
