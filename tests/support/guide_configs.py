"""The GPU-node guide's configs (the shipped configs/cosmos_rl.toml and configs/flow_factory.toml)
made to run here: every backend on the session's tiny vLLM server, every head on the tiny test
models of its kind on the CPU. What changes is what a GPU node has and this machine has not
(weights, devices, venv paths, a reply grammar for the random tiny model's generative judges);
templates, counting, budgets, video sampling, pooling and the profiles stay as shipped."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from tests.support.heads_env import (
    build_random_geneval,
    build_tiny_heads,
    build_tiny_hpsv3,
    build_tiny_image_reward,
    build_tiny_videoalign,
    geneval_judge,
    head_judges,
    heads_python,
    hpsv3_judge,
    image_reward_judge,
    videoalign_judge,
)

ROOT = Path(__file__).resolve().parents[2]
GUIDE_CONFIGS = ("cosmos_rl", "flow_factory")

# The random tiny model writes whatever it likes: a generative judge's reply is held to its
# parser's shape (as tests/integration/test_conformance_vlm.py does), short.
WORDS = r"[a-z ]{3,16}"
SCORE = r"[1-4]\.[0-9]"
REPLY_SHAPES = {
    "final_score": {"guided_regex": rf"{WORDS}\nFinal Score: [1-4](\.[0-9])?", "max_tokens": 60},
    "rational_rewards_t2i": {"guided_regex": (
        rf"# Detailed Judgement\n1\. Text Faithfulness:\n## Justification: {WORDS}\n## Score: {SCORE}\n"
        rf"2\. Physical and Visual Quality:\n## Justification: {WORDS}\n## Score: {SCORE}\n"
        rf"3\. Text Rendering:\n## Justification: {WORDS}\n## Score: ({SCORE}|N/A)\n# Summary: {WORDS}"),
        "max_tokens": 200},
    "rational_rewards_edit": {"guided_regex": (
        rf"# Detailed Judgement\n1\. Text Faithfulness:\n## Justification: {WORDS}\n## Score: {SCORE}\n"
        rf"2\. Image Faithfulness:\n## Justification: {WORDS}\n## Score: {SCORE}\n"
        rf"3\. Physical and Visual Quality:\n## Justification: {WORDS}\n## Score: {SCORE}\n"
        rf"4\. Text Rendering:\n## Justification: {WORDS}\n## Score: ({SCORE}|N/A)\n# Summary: {WORDS}"),
        "max_tokens": 260},
}
# Head options that name weights, a device, a dtype or an interpreter: this machine's instead.
MACHINE_OPTIONS = frozenset({"python", "model", "processor", "checkpoint", "pretrained", "model_config_file",
                             "base_model", "config", "med_config", "tokenizer", "detector_checkpoint", "clip_model",
                             "clip_pretrained", "clip_model_config_file", "library", "device", "dtype"})


def shipped(name: str) -> dict[str, Any]:
    return tomllib.loads((ROOT / "configs" / f"{name}.toml").read_text(encoding="utf-8"))


def _clip_family(kind: str) -> dict:
    return head_judges(build_tiny_heads("tiny"))[kind]


# Per head kind, its judge entry on this machine's tiny model of that kind (built on first use).
TINY_HEADS = {
    "pickscore": lambda: _clip_family("pickscore"),
    "hpsv2": lambda: _clip_family("hpsv2"),
    "clip": lambda: _clip_family("clip_hf"),  # Flow-Factory's CLIP is transformers' CLIPModel
    "ocr": lambda: {"kind": "ocr", "options": {"python": str(heads_python())}},
    "hpsv3": lambda: hpsv3_judge(build_tiny_hpsv3()),
    "image_reward": lambda: image_reward_judge(build_tiny_image_reward()),
    "videoalign": lambda: videoalign_judge(build_tiny_videoalign()),
    "gen_eval": lambda: geneval_judge(build_random_geneval(), build_tiny_heads("tiny")),
}


def on_this_machine(name: str, vllm_url: str) -> dict[str, Any]:
    """The shipped config `name`, its weights and devices swapped for this machine's (see above)."""
    data = shipped(name)
    for backend in data.get("backends", {}).values():
        backend["base_urls"] = [vllm_url]  # its launch table stays: `serve` never reads it
        backend["timeout_s"] = 300
    for judge_name, judge in data["judges"].items():
        options = judge.setdefault("options", {})
        if judge.get("backend"):
            shape = REPLY_SHAPES.get(judge_name) or REPLY_SHAPES.get(judge["kind"])
            if shape:
                options.update(shape)
            continue
        tiny = TINY_HEADS[judge["kind"]]()
        kept = {k: v for k, v in options.items() if k not in MACHINE_OPTIONS}
        judge["options"] = {**tiny["options"], **kept, "device": "cpu"}
    data.get("cosmos_rl", {}).pop("latents", None)  # decodes cosmos-rl latents: tests/integration/test_latents.py
    return data
