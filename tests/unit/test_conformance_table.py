"""docs/integrations/conformance.md names a test for every row: each named test exists, and the
table has every reward key the peers serve (a row without its test, or a test renamed away, fails)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "integrations" / "conformance.md"
SHORT = {"conf": "unit/test_conformance.py", "heads": "integration/test_conformance_heads.py",
         "vlm": "integration/test_conformance_vlm.py", "cos": "unit/test_cosmos_rl.py",
         "trainer": "integration/test_cosmos_rl_trainer.py", "toml": "integration/test_rewards_toml_serve.py"}
COSMOS_KEYS = ["`cosmos_reason1` / `no_score`", "`cosmos_reason1` / `prediction`",
               "`cosmos_reason1` / `yes_logit`, `no_logit`", "`dance_grpo` / `vq_reward`, `mq_reward`, `ta_reward`",
               "`dance_grpo` / `overall_reward`", "`hpsv2` / `hpsv2`", "`hpsv3` / `hpsv3`", "`pickscore` / `pickscore`",
               "`image_reward` / `image_reward`", "`ocr` / `ocr_reward`", "`gen_eval` / `gen_eval_score`",
               "`gen_eval` / `gen_eval_reward`", "`gen_eval` / `gen_eval_strict`", "`gen_eval` / `gen_eval_group`",
               "`unified_reward` / `unified_reward`"]
COSMOS_PROTOCOL = 5  # pending status, no prompts, a judge that cannot load, the README's GenEval body, unified's request
FLOW_REWARDS = ["PickScore", "CLIP", "PickScore_Rank", "vllm_evaluate", "rational_rewards_t2i", "rational_rewards_edit"]
# the peer's file and lines: cosmos-rl's reward service (cr/), Flow-Factory (ff/), the cosmos-rl wheel's trainer
SOURCE = re.compile(r"`(cr|ff)/[a-z_0-9]+\.py` [0-9]|`cosmos_rl/[a-z_/]+\.py` [0-9]")


def _rows() -> list[list[str]]:
    rows = []
    for line in PAGE.read_text().splitlines():
        if line.startswith("| ") and not line.startswith(("| #", "|---")):
            rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows


def test_every_row_has_a_number_a_source_a_test_and_a_status():
    rows = _rows()
    assert [r[0] for r in rows] == [str(i) for i in range(1, len(rows) + 1)]
    keys = [r[1] for r in rows]
    assert keys[:len(COSMOS_KEYS)] == COSMOS_KEYS
    assert [k for k in keys if k.strip("`") in FLOW_REWARDS] == [f"`{name}`" for name in FLOW_REWARDS]
    assert len(rows) == len(COSMOS_KEYS) + COSMOS_PROTOCOL + len(FLOW_REWARDS) + 1  # + Flow-Factory's refusal
    for row in rows:
        assert len(row) == 6, row
        assert SOURCE.search(row[2]), row[1]
        assert "::" in row[4] or re.fullmatch(r"as row [0-9]+", row[4]), row[1]
        assert row[5].startswith(("same", "*changed*")), row[1]


def test_the_summary_counts_the_rows():
    rows = _rows()
    changed = sum(r[5].startswith("*changed*") for r in rows)
    text = PAGE.read_text()
    assert f"{len(rows)} rows:" in text and f"**{changed} rows changed" in text
    assert f"{len(rows) - changed} rows were already the peer's" in text


def test_every_named_test_exists():
    named = set()
    for row in _rows():
        named |= set(re.findall(r"`([a-z]+(?:/[a-z_0-9]+\.py)?)::([a-z_0-9]+)`", row[4]))
    assert len(named) > 20
    for where, name in named:
        path = ROOT / "tests" / SHORT.get(where, where)
        assert path.is_file(), where
        assert re.search(rf"^(async )?def {name}\(", path.read_text(), re.MULTILINE), f"{where}::{name}"
