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
    assert {f"docs/examples/byo/{p}" for p in ("rewards/sharpness.py", "rewards/ff_rewards.py",
                                               "rewards/cosmos_handlers.py", "templates/sharp_quality/1.toml",
                                               "gateway.toml")} == files
    assert "guides/add-a-reward.md" in (ROOT / "mkdocs.yml").read_text()


def test_the_examples_config_loads_with_its_folders_from_its_own_place():
    cfg = load_config(EXAMPLES / "gateway.toml")
    kinds = {name: j.kind for name, j in cfg.judges.items()}
    assert kinds == {"sharpness": "custom", "colorful": "flow_factory_model", "brightness_rank": "flow_factory_model",
                     "contrast": "cosmos_rl_handler", "product_sharpness": "yes_no"}
    assert cfg.prompts.dirs == [str(EXAMPLES / "templates")]
    assert cfg.judges["sharpness"].options.pythonpath == [str(EXAMPLES / "rewards")]
    assert verify_lock(cfg.prompts.dirs) == []
