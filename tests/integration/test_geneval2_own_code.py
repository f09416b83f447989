"""GenEval 2 parity with its own code: facebookresearch/GenEval2's evaluation.py (at commit a6e82d2,
read from a mirror of the repository and never copied here) runs on scripted next-token
distributions with a real Qwen tokenizer (the tiny Qwen3-VL's, tests/support/geneval2_own_code.py);
the gateway's answer-probability parser reads the top-20 logprobs a vLLM server lists for the same
distributions, with the geneval2_soft_tifa@1 template's settings. Per atom and per prompt (Soft-TIFA
AM and GM) the numbers agree.

The mirror is looked for under $JG_PEER_MIRRORS (default /work/.mirror, where this project's
sessions keep them): without it the test is skipped, and tests/unit/test_answer_probability.py
still checks the same formulas against their reading in tests/support/peer_judges.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from judge_gateway.parsers import atom_means, parse_answer_probability
from judge_gateway.prompts import load_template
from tests.support.media_files import write_image
from tests.support.vllm_server import vllm_python

pytestmark = pytest.mark.integration

COMMIT = "a6e82d2289e8d418f27f0adee77908b07060eea3"
ROOT = Path(__file__).resolve().parents[2]

# Distributions over tokens of the tiny tokenizer (each one token there, as in Qwen's vocabulary;
# " " is the bare-space token a Qwen tokenizer gives " 4" first, which GenEval 2 counts for "four").
PROMPTS = [
    {"prompt": "two red apples", "vqa_list": [["How many apples are in the image?", "two"],
                                              ["Are the apples red?", "Yes"],
                                              ["Are there any apples in the image?", "Yes"]],
     "dist": {"How many apples are in the image?": {" two": 0.45, "Two": 0.15, "two": 0.05, " Two": 0.02, "2": 0.06,
                                                    " ": 0.04, " three": 0.1, "three": 0.05, "No": 0.05, "Yes": 0.03},
              "Are the apples red?": {"Yes": 0.55, " Yes": 0.05, "yes": 0.04, " yes": 0.01, "No": 0.3, "no": 0.05},
              "Are there any apples in the image?": {"Yes": 0.9, "No": 0.07, "The": 0.03}}},
    {"prompt": "four white bicycles", "vqa_list": [["How many bicycles are in the image?", "four"],
                                                   ["Are the bicycles white?", "Yes"]],
     "dist": {"How many bicycles are in the image?": {" three": 0.6, "Three": 0.1, " four": 0.12, "4": 0.03, "four": 0.05,
                                                      " ": 0.02, "One": 0.04, "No": 0.04},
              "Are the bicycles white?": {"No": 0.8, " No": 0.05, "Yes": 0.09, "yes": 0.03, "The": 0.03}}},
]


def mirror_source() -> str | None:
    repo = Path(os.environ.get("JG_PEER_MIRRORS", "/work/.mirror")) / "facebookresearch+GenEval2" / "repo"
    if not repo.exists():
        return None
    done = subprocess.run(["git", "--git-dir", str(repo), "show", f"{COMMIT}:evaluation.py"], capture_output=True,
                          text=True, check=False)
    return done.stdout if done.returncode == 0 else None


def test_soft_tifa_atoms_and_means_equal_geneval2s_own_code(tiny_qwen3vl_dir, tmp_path):
    source = mirror_source()
    if source is None:
        pytest.skip(f"no GenEval2 mirror with commit {COMMIT[:7]} under $JG_PEER_MIRRORS")
    (tmp_path / "evaluation.py").write_text(source)
    image = write_image(tmp_path / "image.png", size=(96, 80))
    (tmp_path / "cases.json").write_text(json.dumps({"image": str(image), "prompts": PROMPTS}))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([str(vllm_python()), "-m", "tests.support.geneval2_own_code", str(tmp_path / "evaluation.py"),
                           str(tiny_qwen3vl_dir), str(tmp_path / "cases.json"), str(tmp_path / "out.json")],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    theirs = json.loads((tmp_path / "out.json").read_text())
    template = load_template("geneval2_soft_tifa@1")
    sets = {s.question_prefix: s for s in template.answer_sets}
    ours_lists, prompt_means = [], {"arithmetic": [], "geometric": []}
    for case in PROMPTS:
        values = []
        for question, answer in case["vqa_list"]:
            answer_set = sets["How many"] if question.startswith("How many") else sets[None]
            listed = [{"token": token, "logprob": logprob} for token, logprob in theirs["top20"][question]]
            result = parse_answer_probability(listed, answer, answer_set.words,
                                              numerals=answer_set.numerals, counting=template.counting,
                                              normalize=template.normalize, min_answer_mass=0.0)
            values.append(result.probability)
        ours_lists.append(values)
        for mean, value in atom_means(values).items():
            prompt_means[mean].append(value)
    for method, mean in (("soft_tifa_am", "arithmetic"), ("soft_tifa_gm", "geometric")):
        assert ours_lists == [pytest.approx(s, abs=1e-6) for s in theirs[method]["score_lists"]]
        # evaluation.py prints 100 x the mean over prompts of the prompt scores
        assert 100 * sum(prompt_means[mean]) / len(PROMPTS) == pytest.approx(theirs[method]["score"], abs=1e-4)
    # the numbers themselves: the bare space counts towards the count answers, as GenEval 2 counts it
    assert ours_lists == [pytest.approx([0.77, 0.65, 0.9], abs=1e-6), pytest.approx([0.22, 0.12], abs=1e-6)]
