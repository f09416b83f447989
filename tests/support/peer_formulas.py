"""The peers' reward formulas, written out from their source as test oracles (numpy and the
standard library only, so the gateway's venv runs them; the torch-side ones are in
tests/support/peer_heads_reference.py).

Each function names the file and lines it follows, at the mirrors' commits:
cosmos-rl 89f2e5b5 (`reward_service/cosmos_rl_reward/`) and Flow-Factory a0b2bc5
(`src/flow_factory/rewards/`). They follow the peer's data layout (GenEval's per-class arrays of
[x1, y1, x2, y2, score]; a dict of token -> logprob) rather than ours, so that a test comparing
one with the gateway checks our code against an independent reading of theirs.
docs/integrations/conformance.md lists which test uses which.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from typing import Any

import numpy as np

COSMOS = "reward_service/cosmos_rl_reward/model"
FLOW = "src/flow_factory/rewards"


# ---- cosmos-rl ---------------------------------------------------------------------------------


def cosmos_reason1(yes_logit: float, no_logit: float) -> tuple[str, float]:
    """(prediction, no_score): model/cosmos_reason1.py 226-232: softmax over the two logits,
    "Bad" when yes_logit > no_logit."""
    m = max(yes_logit, no_logit)
    e_yes, e_no = math.exp(yes_logit - m), math.exp(no_logit - m)
    no_score = e_no / (e_yes + e_no)
    return ("Bad" if yes_logit > no_logit else "Good"), no_score


def dance_grpo(raw: dict[str, float], inference_config: dict[str, float] | None) -> dict[str, float]:
    """model/dance_grpo.py 285-295 (use_norm=True): VideoAlign's `_norm` (per dimension
    (x - {dim}_mean) / {dim}_std from the checkpoint's inference_config), then Overall = VQ+MQ+TA."""
    out = dict(raw)
    if inference_config is not None:
        for dim in ("VQ", "MQ", "TA"):
            out[dim] = (out[dim] - inference_config[f"{dim}_mean"]) / inference_config[f"{dim}_std"]
    out["Overall"] = out["VQ"] + out["MQ"] + out["TA"]
    return out


def hpsv2(image_features: np.ndarray, text_features: np.ndarray) -> list[float]:
    """model/hpsv2.py 207-210: diag(image_features @ text_features.T) of open_clip's normalised
    features (no logit scale)."""
    return np.diagonal(image_features @ text_features.T).astype(float).tolist()


def pickscore(logit_scale_exp: float, text_embs: np.ndarray, image_embs: np.ndarray) -> list[float]:
    """model/pickscore.py 96-111: exp(logit_scale) * diag(text @ image.T) / 26 of L2-normalised
    embeddings (norms clamped at 1e-12)."""
    t = text_embs / np.maximum(np.linalg.norm(text_embs, axis=-1, keepdims=True), 1e-12)
    i = image_embs / np.maximum(np.linalg.norm(image_embs, axis=-1, keepdims=True), 1e-12)
    return (logit_scale_exp * np.diagonal(t @ i.T) / 26).astype(float).tolist()


def levenshtein(a: str, b: str) -> int:
    """python-Levenshtein's distance (unit costs), which model/ocr.py imports."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def ocr(prompt: str, recognized_lines: list[tuple[str, float]]) -> float:
    """model/ocr.py 41-79 for one image: the target is prompt.split('"')[1]; the recognised text
    joins the lines with confidence > 0; both lowercased without spaces; 0 when the target is in
    the text, else the Levenshtein distance capped at the target's length; 1 - dist / max(1,
    len(target as written))."""
    target = prompt.split('"')[1]
    text = "".join(t if conf > 0 else "" for t, conf in recognized_lines).replace(" ", "").lower()
    target_n = target.replace(" ", "").lower()
    dist = 0 if target_n in text else levenshtein(text, target_n)
    dist = min(dist, len(target_n))
    return 1 - dist / max(1, len(target))


# GenEval, model/gen_eval.py 139-143 and 170-438, on the detector's per-class arrays.
GENEVAL_TAGS = ("single_object", "two_object", "counting", "colors", "position", "color_attr")


def _geneval_relation(box_a: np.ndarray, box_b: np.ndarray) -> set[str]:
    """gen_eval.py 185-205 (relative_position)."""
    boxes = np.array([box_a, box_b])[:, :4].reshape(2, 2, 2)
    center_a, center_b = boxes.mean(axis=-2)
    dim_a, dim_b = np.abs(np.diff(boxes, axis=-2))[..., 0, :]
    offset = center_a - center_b
    revised = np.maximum(np.abs(offset) - 0.1 * (dim_a + dim_b), 0) * np.sign(offset)
    if np.all(np.abs(revised) < 1e-3):
        return set()
    dx, dy = revised / np.linalg.norm(offset)
    rel = set()
    if dx < -0.5:
        rel.add("left of")
    if dx > 0.5:
        rel.add("right of")
    if dy < -0.5:
        rel.add("above")
    if dy > 0.5:
        rel.add("below")
    return rel


def geneval_detected(bboxes: dict[str, np.ndarray], colors: dict[str, list[str]], tag: str) -> dict[str, list]:
    """gen_eval.py 348-373: per class, rows (n, 5) above 0.3 (0.9 for counting), best first, at
    most 16; each kept object is (row, colour of that row or None)."""
    threshold = 0.9 if tag == "counting" else 0.3
    detected: dict[str, list] = {}
    for cls, rows in bboxes.items():
        ordering = np.argsort(rows[:, 4], kind="stable")[::-1]
        ordering = ordering[rows[ordering, 4] > threshold][:16].tolist()
        if ordering:
            detected[cls] = [(rows[i], colors.get(cls, [None] * len(rows))[i]) for i in ordering]
    return detected


def geneval_evaluate(detected: dict[str, list], include: list[dict]) -> bool:
    """gen_eval.py 207-265 (evaluate) without excludes: the service's metadata has none."""
    correct = True
    groups: list[list | None] = []
    for req in include:
        matched = True
        found = detected.get(req["class"], [])[: req["count"]]
        if len(found) < req["count"]:
            correct = matched = False
        else:
            if "color" in req and [c for _, c in found].count(req["color"]) < req["count"]:
                correct = matched = False
            if "position" in req and matched:
                rel, target = req["position"]
                if groups[target] is None:
                    correct = matched = False
                else:
                    for obj, _ in found:
                        for other, _ in groups[target]:
                            if rel not in _geneval_relation(obj, other):
                                correct = matched = False
                                break
                        if not matched:
                            break
        groups.append(found if matched else None)
    return correct


def geneval_evaluate_reward(detected: dict[str, list], include: list[dict]) -> tuple[bool, float]:
    """gen_eval.py 267-333 (evaluate_reward): (strict, score)."""
    correct = True
    rewards: list[float] = []
    groups: list[list | None] = []
    for req in include:
        matched = True
        found = detected.get(req["class"], [])
        rewards.append(1 - abs(req["count"] - len(found)) / req["count"])
        if len(found) != req["count"]:
            correct = matched = False
            if "color" in req or "position" in req:
                rewards.append(0.0)
        else:
            if "color" in req:
                n = [c for _, c in found].count(req["color"])
                rewards.append(1 - abs(req["count"] - n) / req["count"])
                if n != req["count"]:
                    correct = matched = False
            if "position" in req and matched:
                rel, target = req["position"]
                if groups[target] is None:
                    correct = matched = False
                    rewards.append(0.0)
                else:
                    for obj, _ in found:
                        for other, _ in groups[target]:
                            if rel not in _geneval_relation(obj, other):
                                correct = matched = False
                                rewards.append(0.0)
                                break
                        if not matched:
                            break
                    rewards.append(1.0)
        groups.append(found if matched else None)
    return correct, (sum(rewards) / len(rewards) if rewards else 0)


def gen_eval(samples: list[dict[str, Any]], only_strict: bool = False) -> dict[str, Any]:
    """gen_eval.py 374-438 and 510-529: the four score keys of a request. Each sample:
    {"tag", "include", "bboxes": {class: (n, 5) array}, "colors": {class: [colour per row]}}."""
    scores, rewards, strict_rewards = [], [], []
    group: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        detected = geneval_detected(s["bboxes"], s.get("colors", {}), s["tag"])
        strict, score = geneval_evaluate_reward(detected, s["include"])
        correct = False if only_strict else geneval_evaluate(detected, s["include"])
        scores.append(score)
        rewards.append(1.0 if correct else 0.0)
        strict_rewards.append(1.0 if strict else 0.0)
        for key in GENEVAL_TAGS:
            group[key].append((1.0 if correct else 0.0) if key == s["tag"] else -10.0)
    return {"gen_eval_score": scores, "gen_eval_reward": rewards, "gen_eval_strict": strict_rewards,
            "gen_eval_group": dict(group)}


# unified_reward.py 63: evaluate_image's question (sent after the image); {prompt} is the caption.
UNIFIED_REWARD_QUESTION = (
    "<image>\nYou are given a text caption and a generated image based on that caption. Your task is to "
    "evaluate this image based on two key criteria:\n1. Alignment with the Caption: Assess how well this "
    "image aligns with the provided caption. Consider the accuracy of depicted objects, their relationships, "
    "and attributes as described in the caption.\n2. Overall Image Quality: Examine the visual quality of "
    "this image, including clarity, detail preservation, color accuracy, and overall aesthetic appeal.\n"
    "Based on the above criteria, assign a score from 1 to 5 after 'Final Score:'.\nYour task is provided "
    "as follows:\nText Caption: [{prompt}]"
)


def unified_reward(text: str) -> float:
    """model/unified_reward.py 48-60 and 141-143: the first `Final Score:\\s*([1-5](?:\\.\\d+)?)`
    (0.0 without one), divided by 5."""
    match = re.search(r"Final Score:\s*([1-5](?:\.\d+)?)", text)
    return (float(match.group(1)) if match else 0.0) / 5.0


# ---- Flow-Factory ------------------------------------------------------------------------------


def pickscore_rank(raw_scores: list[float]) -> list[float]:
    """pick_score.py 240-243: argsort().argsort() / n (torch's CPU argsort keeps ties in position
    order up to 16 elements; a stable sort here)."""
    order = np.argsort(np.asarray(raw_scores), kind="stable")
    ranks = np.empty(len(order), dtype=np.int64)
    ranks[order] = np.arange(len(order))
    return (ranks.astype(np.float32) / len(order)).astype(float).tolist()


# vllm_evaluate.py 144-158: VLMEvaluateRewardModel.EVALUATE_PROMPT, the question it sends after the image.
VLLM_EVALUATE_PROMPT = (
    "You are an expert image quality assessor. "
    "Evaluate this AI-generated image by considering ALL of the following criteria:\n"
    "1. Naturalness: Does the scene look realistic with correct perspective, shadows, and lighting?\n"
    "2. Artifacts: Is the image free from distortions, blurriness, watermarks, "
    "deformed faces, unusual body parts, or unharmonized subjects?\n"
    "3. Aesthetic Appeal: Does the image exhibit pleasing composition, "
    "color harmony, and visual balance?\n"
    "4. Detail & Clarity: Are textures, edges, and fine details rendered "
    "sharply and coherently without noise or smearing?\n"
    "5. Overall Coherence: Is the image semantically consistent, with all "
    "elements logically fitting together in a unified scene?\n\n"
    "Considering all the above criteria holistically, is this a high-quality image? "
    "Answer Yes or No."
)


def vllm_evaluate(top_logprobs: dict[str, float], canonicalize: bool = False) -> float:
    """vllm_evaluate.py 63-109 (_get_yes_cond_prob) on the first token's top logprobs
    (token -> logprob; a repeated token keeps its last value, as that dict does)."""
    if not canonicalize:
        yes, no = top_logprobs.get("Yes", -math.inf), top_logprobs.get("No", -math.inf)
        if yes == -math.inf and no == -math.inf:
            return 0.0
        return 1.0 / (1.0 + math.exp(-(yes - no)))
    probs = {t: math.exp(lp) for t, lp in top_logprobs.items()}
    yes = sum(p for t, p in probs.items() if t.strip().lower() == "yes")
    no = sum(p for t, p in probs.items() if t.strip().lower() == "no")
    return 0.0 if yes + no == 0 else yes / (yes + no)


# rational_rewards_t2i.py 51-56 and rational_rewards_edit.py 55-59: the system prompts.
RATIONAL_T2I_SYSTEM_PROMPT = (
    "You are an expert image generation evaluator. Your task is to evaluate "
    "the quality of a generated image based on a user instruction. Afterwards, "
    "you need to suggest how to refine the original user request to produce "
    "better image generation (if any)."
)
RATIONAL_EDIT_SYSTEM_PROMPT = (
    "You are an expert image editing evaluator. Your task is to evaluate the quality of an edited "
    "image based on a source image and a user instruction. Afterwards, you need to suggest how to "
    "refine the original user request to produce better image edits (if any)."
)
RATIONAL_T2I_SECTIONS = (("1.", "Text Faithfulness", "text_faithfulness"),
                         ("2.", "Physical and Visual Quality", "physical_quality"),
                         ("3.", "Text Rendering", "text_rendering"))
RATIONAL_EDIT_SECTIONS = (("1.", "Text Faithfulness", "text_faithfulness"),
                          ("2.", "Image Faithfulness", "image_faithfulness"),
                          ("3.", "Physical and Visual Quality", "physical_quality"),
                          ("4.", "Text Rendering", "text_rendering"))


def _rational_value(text: str) -> float | str:
    """rational_rewards_t2i.py 59-74 (extract_numeric_score) on a string."""
    if text == "N/A":
        return "N/A"
    match = re.match(r"^\s*(\d+(?:\.\d+)?)", text.strip())
    if not match:
        raise ValueError(text)
    return float(match.group(1))


def _rational_block_score(block: str) -> float | str | None:
    """rational_rewards_t2i.py 77-88 (_extract_score_from_block)."""
    for line in block.split("\n"):
        match = re.search(r"(?:##\s*)?Score\s*:\s*(.+)$", line.strip(), re.IGNORECASE)
        if not match:
            continue
        try:
            return _rational_value(match.group(1).strip())
        except ValueError:
            continue
    return None


def rational_parse(text: str, sections: tuple[tuple[str, str, str], ...]) -> dict[str, float | str | None]:
    """rational_rewards_t2i.py 91-158 / rational_rewards_edit.py 135-210: section blocks from the
    text before `# Summary:`, by numbered header lines, else (no header line) by the headers' text."""
    body = text.split("# Summary:")[0] if "# Summary:" in text else text
    blocks: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    for raw in body.split("\n"):
        stripped = raw.strip()
        hit = next((key for num, title, key in sections if stripped.startswith(num) and title in stripped), None)
        if hit is not None:
            if current:
                blocks[current] = "\n".join(lines)
            current, lines = hit, [raw]
        elif current:
            lines.append(raw)
    if current:
        blocks[current] = "\n".join(lines)
    titles = [f"{title}:" for _, title, _ in sections]
    if not blocks and titles[0] in body:
        rest = body.partition(titles[0])[2]
        for (_, _, key), nxt in zip(sections, titles[1:] + [None]):
            if nxt is None:
                blocks[key] = rest
            elif nxt in rest:
                blocks[key], _, rest = rest.partition(nxt)
            else:
                blocks[key], rest = rest, ""
    result: dict[str, float | str | None] = {key: None for _, _, key in sections}
    for key, block in blocks.items():
        value = _rational_block_score(block)
        if value is not None:
            result[key] = value
    return result


def rational_aggregate(parsed: dict[str, float | str | None], aspects: list[str]) -> float:
    """rational_rewards_t2i.py 161-204: clamp each numeric aspect to [1, 4], skip None and N/A,
    (mean - 1) / 3 clamped to [0, 1]; no usable aspect raises ValueError (the model then
    returns 0.0, 416-425)."""
    scores = [max(1.0, min(4.0, float(v))) for a in aspects if (v := parsed.get(a)) is not None and v != "N/A"]
    if not scores:
        raise ValueError("no usable numeric scores")
    return max(0.0, min(1.0, (sum(scores) / len(scores) - 1.0) / 3.0))


def rational_reward(text: str, sections: tuple[tuple[str, str, str], ...]) -> float:
    """What RationalRewards{T2I,Edit}RewardModel._score_single returns for a reply: 0.0 when no
    aspect can be read (rational_rewards_t2i.py 408-425)."""
    try:
        return rational_aggregate(rational_parse(text, sections), [k for _, _, k in sections])
    except ValueError:
        return 0.0
