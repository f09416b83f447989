"""Pref-GRPO's own win-rate aggregation, run on given replies.

Pref-GRPO (github.com/CodeGoat24/Pref-GRPO, commit 3e787f6dd5a3051b40d61f07e9578468ac26130a),
`fastvideo/rewards/unifiedreward_think.py`: `_extract_answer` and `_pairwise_win_rate` turn the
UnifiedReward-Think replies of a group's pairs into each sample's win rate. Their source is read
at test time from a clone of that repository (`$JG_PREF_GRPO_REPO`, else the mirror at
/work/.mirror/CodeGoat24+Pref-GRPO/repo), never copied here: the two functions are taken out of
the module with `ast` (the module also imports vLLM request code and cv2 the aggregation does not
use) and run under an interpreter with torch (their result is a list of torch tensors).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PREF_GRPO_COMMIT = "3e787f6dd5a3051b40d61f07e9578468ac26130a"
PREF_GRPO_FILE = "fastvideo/rewards/unifiedreward_think.py"
MIRROR = Path("/work/.mirror/CodeGoat24+Pref-GRPO/repo")

_RUNNER = r"""
import ast, json, re, sys
from collections import defaultdict
from typing import Dict, List, Optional, Tuple
import torch

data = json.load(sys.stdin)
tree = ast.parse(data["source"])
wanted = {"_extract_answer", "_pairwise_win_rate"}
body = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in wanted]
assert {node.name for node in body} == wanted, "the functions are no longer in the file"
names = {"re": re, "defaultdict": defaultdict, "torch": torch, "Dict": Dict, "List": List,
         "Optional": Optional, "Tuple": Tuple}
exec(compile(ast.Module(body=body, type_ignores=[]), data["file"], "exec"), names)
out = []
for group in data["groups"]:
    overall, dim = names["_pairwise_win_rate"](num_items=group["n"], responses=group["responses"],
                                               better_1="Image 1 is better", better_2="Image 2 is better",
                                               device="cpu")
    out.append({"overall": [t.item() for t in overall], "dtype": str(overall[0].dtype),
                "overall_reward": dim["overall_reward"]})
print(json.dumps(out))
"""


def pref_grpo_repo() -> Path | None:
    """A clone of Pref-GRPO that holds the pinned commit, else None."""
    path = Path(os.environ.get("JG_PREF_GRPO_REPO") or MIRROR)
    if not path.exists():
        return None
    done = subprocess.run(["git", "-C", str(path), "cat-file", "-e", f"{PREF_GRPO_COMMIT}:{PREF_GRPO_FILE}"],
                          capture_output=True, check=False)
    return path if done.returncode == 0 else None


def torch_python() -> Path | None:
    """An interpreter of this checkout's venvs that has torch (.venv-heads, else .venv-vllm)."""
    for env, default in (("JG_HEADS_VENV", ".venv-heads"), ("JG_VLLM_VENV", ".venv-vllm")):
        python = Path(os.environ.get(env) or ROOT / default) / "bin" / "python"
        if python.exists() and subprocess.run([str(python), "-c", "import torch"], capture_output=True,
                                              check=False).returncode == 0:
            return python
    return None


def run_pref_grpo(repo: Path, python: Path, groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pref-GRPO's `_pairwise_win_rate` on each group ({"n", "responses": [{first_index,
    second_index, model_output}]}): per group its rewards as the float32 tensors' values, and its
    `overall_reward` (Python floats, rounded to 3 decimals)."""
    source = subprocess.run(["git", "-C", str(repo), "show", f"{PREF_GRPO_COMMIT}:{PREF_GRPO_FILE}"],
                            capture_output=True, text=True, check=True).stdout
    payload = json.dumps({"source": source, "file": PREF_GRPO_FILE, "groups": groups})
    done = subprocess.run([str(python), "-c", _RUNNER], input=payload, capture_output=True, text=True,
                          timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"Pref-GRPO's aggregation failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)
