"""The peers' own functions, run by the conformance tests beside ours: read from a local mirror
of the peer's repository at the commit the conformance page names, never copied into this one.

`peer_functions(PEER, path, names)` reads `path` at the peer's pinned commit (`git show`), keeps
the named top-level functions, constants and class methods (`"Class.method"`, bound to no
instance: the method's body must not need more of `self` than the test passes), and executes
exactly their source in a fresh namespace holding `imports` (the modules the source names).
Where the mirror is absent (`JG_PEER_MIRRORS`, default /work/.mirror: a clone named
`<owner>+<name>/repo`), it returns None and the test compares with the written-out oracle of
tests/support/peer_formulas.py, which names the same file and lines; `peer_or_oracle` says
which of the two ran.
"""

from __future__ import annotations

import ast
import os
import subprocess
import textwrap
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

# (mirror folder, commit): the commits docs/integrations/conformance.md names
COSMOS_RL = ("nvidia-cosmos+cosmos-rl", "89f2e5b5c817d99a240f1194ce37239ceb6f058a")
FLOW_FACTORY = ("X-GenGroup+Flow-Factory", "a0b2bc5a2b4fbf9125429b3fb70c0c5d7631047c")


def mirror(peer: tuple[str, str]) -> Path | None:
    repo = Path(os.environ.get("JG_PEER_MIRRORS", "/work/.mirror")) / peer[0] / "repo"
    return repo if repo.exists() else None


def peer_file(peer: tuple[str, str], path: str) -> str | None:
    """The file's text at the pinned commit, or None without the mirror (or the commit)."""
    repo = mirror(peer)
    if repo is None:
        return None
    proc = subprocess.run(["git", "-C", str(repo), "show", f"{peer[1]}:{path}"], capture_output=True,
                          text=True, check=False)
    return proc.stdout if proc.returncode == 0 else None


def peer_functions(peer: tuple[str, str], path: str, names: Iterable[str],
                   imports: dict[str, Any] | None = None) -> dict[str, Any] | None:
    source = peer_file(peer, path)
    if source is None:
        return None
    tree = ast.parse(source)
    wanted = list(names)
    chunks: list[str] = []
    for name in wanted:
        cls, _, attr = name.rpartition(".")
        node = _find(tree.body, cls, attr)
        if node is None:
            raise LookupError(f"{name} is not in {path} at {peer[1][:8]}")
        code = ast.get_source_segment(source, node)
        assert code is not None
        if cls:  # a method, as a plain function of the name "Class.method" -> "Class__method"
            code = textwrap.dedent(code).replace(f"def {attr}(", f"def {cls}__{attr}(", 1)
        chunks.append(code)
    namespace: dict[str, Any] = dict(imports or {})
    exec(compile("\n\n".join(chunks), f"{peer[0]}@{peer[1][:8]}:{path}", "exec"), namespace)  # noqa: S102
    return {name: namespace[name.replace(".", "__")] for name in wanted}


def _find(body: list[ast.stmt], cls: str, attr: str) -> ast.stmt | None:
    if cls:
        for node in body:
            if isinstance(node, ast.ClassDef) and node.name == cls:
                return _find(node.body, "", attr)
        return None
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == attr:
            return node
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr for t in node.targets):
            return node
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == attr:
            return node
    return None


def peer_or_oracle(found: dict[str, Any] | None, name: str, oracle: Callable[..., Any]) -> tuple[Callable[..., Any], str]:
    """(the peer's function when the mirror has it, else the oracle; "peer" or "oracle")."""
    if found is not None:
        return found[name], "peer"
    return oracle, "oracle"
