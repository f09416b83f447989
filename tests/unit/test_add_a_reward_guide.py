"""The "add a reward" guide (docs/guides/add-a-reward.md) quotes its examples (docs/examples/byo)
as they are: every block marked `<!-- example: PATH -->` is a verbatim part of PATH; there is one
example per route; its config loads and its template folder is released. The examples run in
tests/integration/test_byo_heads.py."""

from __future__ import annotations

import re
from pathlib import Path

from judge_gateway.config import load_config
from judge_gateway.prompts import verify_lock

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "add-a-reward.md"
EXAMPLES = ROOT / "docs" / "examples" / "byo"
QUOTE = re.compile(r"<!-- example: (\S+) -->\n```\w+\n(.*?)\n```", re.S)


def quotes() -> list[tuple[str, str]]:
    return QUOTE.findall(GUIDE.read_text(encoding="utf-8"))


def test_every_quoted_block_is_part_of_its_example_file():
    found = quotes()
    assert len(found) >= 10
    for path, code in found:
        assert code in (ROOT / path).read_text(encoding="utf-8"), f"the guide's quote of {path} is not in the file:\n{code}"


def test_one_example_per_route_and_the_guide_is_in_the_site():
    files = {path for path, _ in quotes()}
    assert {f"docs/examples/byo/{p}" for p in ("rewards/edge_density.py", "start.toml", "rewards/sharpness.py",
                                               "rewards/ff_rewards.py", "rewards/cosmos_handlers.py",
                                               "templates/sharp_quality/1.toml", "gateway.toml")} == files
    assert "guides/add-a-reward.md" in (ROOT / "mkdocs.yml").read_text()


def test_every_example_file_is_linked_and_shown_whole():
    """Issue 33: the site showed 4-line excerpts and no way to the whole files."""
    text = GUIDE.read_text(encoding="utf-8")
    shown = set(re.findall(r'--8<-- "byo/([^"]+)"', text))
    linked = set(re.findall(r"\]\(\.\./examples/byo/([^)]+)\)", text))
    files = {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*") if p.is_file() and p.suffix in (".py", ".toml")
             and p.name != "templates.lock" and "__pycache__" not in p.parts}
    assert files - linked == set(), files - linked
    assert {"rewards/edge_density.py", "start.toml", "try_it.py", "gateway.toml", "rewards/sharpness.py",
            "rewards/ff_rewards.py", "rewards/cosmos_handlers.py"} <= shown
    assert all((EXAMPLES / f).is_file() for f in shown | linked)
    assert "--log-level info" not in text and "judge-gateway -v serve" in text


def test_the_examples_config_loads_with_its_folders_from_its_own_place():
    cfg = load_config(EXAMPLES / "gateway.toml")
    kinds = {name: j.kind for name, j in cfg.judges.items()}
    assert kinds == {"sharpness": "custom", "colorful": "flow_factory_model", "brightness_rank": "flow_factory_model",
                     "contrast": "cosmos_rl_handler", "product_sharpness": "yes_no"}
    assert cfg.prompts.dirs == [str(EXAMPLES / "templates")]
    assert cfg.judges["sharpness"].options.pythonpath == [str(EXAMPLES / "rewards")]
    assert verify_lock(cfg.prompts.dirs) == []
