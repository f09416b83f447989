"""Every TOML example in the docs is a config the gateway loads (merged over the embedded default,
whose backends and judges the examples may name): an example a reader copies never fails on a
key that was renamed or a value that is out of range."""

from __future__ import annotations

import copy
import re
import tomllib
from pathlib import Path

import pytest

from judge_gateway.config import validate_config
from judge_gateway.config.loading import DEFAULT_CONFIG_PATH

DOCS = Path(__file__).resolve().parents[2] / "docs"
# Fragments that cannot load on their own, each for a reason the page states.
FRAGMENTS = {
    ("guides/tuning.md", "[judges.rr_t2i.options]"),  # names the profile file `tune rubric` writes
    ("guides/add-a-reward.md", "[judges.product_sharpness]"),  # pins a template of the guide's own folder
    # a cosmos-rl rewards.toml's overlay table (loaded by tests/unit/test_rewards_toml.py)
    ("integrations/cosmos-rl.md", "[judge_gateway.server]"),
}


def _merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _examples() -> list[tuple[str, str]]:
    out = []
    for page in sorted(DOCS.rglob("*.md")):
        for block in re.findall(r"```toml\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            name = str(page.relative_to(DOCS))
            if block.strip().startswith("--8<--"):  # a whole file shown (pymdownx.snippets): loaded on its own
                continue
            if (name, block.splitlines()[0].split("#")[0].strip()) not in FRAGMENTS:
                out.append((name, block))
    return out


EXAMPLES = _examples()


def test_the_docs_have_examples():
    assert len(EXAMPLES) >= 15


@pytest.mark.parametrize(("page", "block"), EXAMPLES, ids=[f"{p}#{i}" for i, (p, _) in enumerate(EXAMPLES)])
def test_toml_example_loads(page, block):
    base = tomllib.loads(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"))
    example = tomllib.loads(block)
    # A backend an example defines (its model) is the whole backend (a server elsewhere has no
    # launch table of the default's): it replaces the default's of that name. One that only sets
    # a key of a default backend (its launch's api_server_count) is merged over it.
    for name, backend in example.get("backends", {}).items():
        if "model" in backend:
            base.get("backends", {}).pop(name, None)
    validate_config(_merge(base, example), source=page)
