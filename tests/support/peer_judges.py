"""The peers' formulas for the Qwen3-VL-era judges, written out from their source as test oracles
(the standard library only, so the gateway's venv runs them). Each names the file and lines it
follows at the commit read:

- GenEval 2: facebookresearch/GenEval2 @ a6e82d2 evaluation.py (`return_numeric_string`,
  `send_message_with_image`, `soft_tifa`, `main`);
- VisionReward: THUDM/VisionReward @ 511960d inference-video.py (`score`);
- UnifiedReward-2.0's pointwise parser: CodeGoat24/Pref-GRPO @ 3e787f6
  fastvideo/rewards/unifiedreward.py (`extract_normalized_rewards`);
- VideoScore2: TIGER-AI-Lab/VideoScore2 @ e6abe26 vs2_inference.py (the score regex).

They follow the peer's data layout (a dict of token text -> probability over the whole
vocabulary for GenEval 2), so a test comparing one with the gateway checks our code against an
independent reading of theirs. tests/integration/test_geneval2_own_code.py runs GenEval 2's own
evaluation.py where its mirror is on the machine.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

GENEVAL2 = "facebookresearch/GenEval2 @ a6e82d2 evaluation.py"

_NUMBERS = {"one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7",
            "eight": "8", "nine": "9", "ten": "10"}


def geneval2_answer_list(question: str, answer: str) -> list[str]:
    """soft_tifa (evaluation.py 131-142): the answer's spellings; 'other' for a number past ten
    (return_numeric_string, 30-52)."""
    if question.startswith("How many"):
        numeric = _NUMBERS.get(answer, "other")
        return [answer, answer.capitalize(), " " + answer, " " + answer.capitalize(), numeric, " " + numeric]
    return ["Yes", "yes", " yes", " Yes"]


def geneval2_atom(question: str, answer: str, probs: dict[int, float],
                  first_token: Callable[[str], int]) -> float:
    """send_message_with_image (evaluation.py 73-100): the sum over the answer list of
    probs[tokenizer.encode(spelling)[0]] (a spelling listed twice counts twice)."""
    return sum(probs.get(first_token(s), 0.0) for s in geneval2_answer_list(question, answer))


def geneval2_prompt_scores(atom_scores: Sequence[float]) -> dict[str, float]:
    """main (evaluation.py 186-191): soft_tifa_am = sum(s) / len(s); soft_tifa_gm = scipy's
    gmean(s), the exponential of the mean log (0 for an atom of 0)."""
    am = sum(atom_scores) / len(atom_scores)
    gm = 0.0 if min(atom_scores) <= 0 else math.exp(sum(math.log(s) for s in atom_scores) / len(atom_scores))
    return {"arithmetic": am, "geometric": gm}


def visionreward_score(answers_yes: Sequence[bool], weights: Sequence[float]) -> float:
    """inference-video.py 106-113: mean over the questions of weight x (+1 for 'yes', -1 otherwise)."""
    assert len(answers_yes) == len(weights)
    return sum((1 if yes else -1) * w for yes, w in zip(answers_yes, weights)) / len(weights)


_UNIFIED_2 = re.compile(r"(\w+) Score \(1-5\):\s*([0-5](?:\.\d+)?)")


def unified_reward_2_axes(text: str) -> dict[str, float]:
    """extract_normalized_rewards (unifiedreward.py 18-24): every `Word Score (1-5): x` with x in
    0-5, the last of a word winning (a dict built from re.findall). Missing axes are then filled with
    the batch mean (47-49): not reproduced here (ours reports them missing)."""
    return {key: float(value) for key, value in _UNIFIED_2.findall(text)}


_VS2 = re.compile(r"visual quality:\s*(\d+).*?text-to-video alignment:\s*(\d+).*?"
                  r"physical/common-sense consistency:\s*(\d+)", re.DOTALL | re.IGNORECASE)


def videoscore2_axes(text: str) -> tuple[int, int, int] | None:
    """vs2_inference.py (the parse after generation): the first integer after each label, in
    this order; None when the three are not all there."""
    match = _VS2.search(text)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None
