"""docs/integrations/conformance.md names a test for every row: each named test exists, and the
table has every reward key the peers serve (a row without its test, or a test renamed away, fails)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "integrations" / "conformance.md"
SHORT = {"conf": "unit/test_conformance.py", "heads": "integration/test_conformance_heads.py",
         "vlm": "integration/test_conformance_vlm.py"}
COSMOS_KEYS = ["`cosmos_reason1` / `no_score`", "`cosmos_reason1` / `prediction`",
               "`cosmos_reason1` / `yes_logit`, `no_logit`", "`dance_grpo` / `vq_reward`, `mq_reward`, `ta_reward`",
               "`dance_grpo` / `overall_reward`", "`hpsv2` / `hpsv2`", "`hpsv3` / `hpsv3`", "`pickscore` / `pickscore`",
               "`image_reward` / `image_reward`", "`ocr` / `ocr_reward`", "`gen_eval` / `gen_eval_score`",
               "`gen_eval` / `gen_eval_reward`", "`gen_eval` / `gen_eval_strict`", "`gen_eval` / `gen_eval_group`",
               "`unified_reward` / `unified_reward`"]
FLOW_REWARDS = ["PickScore", "CLIP", "PickScore_Rank", "vllm_evaluate", "rational_rewards_t2i", "rational_rewards_edit"]


def _rows() -> list[list[str]]:
    rows = []
    for line in PAGE.read_text().splitlines():
        if line.startswith("| ") and not line.startswith(("| reward", "|---")):
            rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows


def test_every_peer_reward_has_a_row_with_a_source_and_a_test():
    rows = _rows()
    firsts = [r[0] for r in rows]
    assert firsts == COSMOS_KEYS + [f"`{name}`" for name in FLOW_REWARDS]
    for row in rows:
        assert len(row) == 5, row
        assert re.search(r"`(cr|ff)/[a-z_0-9]+\.py` [0-9]", row[1]), row[0]  # the peer's file and lines
        assert "::" in row[3], row[0]


def test_every_named_test_exists():
    named = set()
    for row in _rows():
        named |= set(re.findall(r"`([a-z]+(?:/[a-z_0-9]+\.py)?)::([a-z_0-9]+)`", row[3]))
    assert len(named) > 20
    for where, name in named:
        path = ROOT / "tests" / SHORT.get(where, where)
        assert path.is_file(), where
        assert re.search(rf"^(async )?def {name}\(", path.read_text(), re.MULTILINE), f"{where}::{name}"
