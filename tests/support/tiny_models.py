"""The tiny models as a command, for programs that must not import the tests (the bench).

    .venv/bin/python -m tests.support.tiny_models path KIND [--size S]    # the model folder
    .venv/bin/python -m tests.support.tiny_models judge HEAD [--size S]   # a [judges.*] entry (JSON)

Builds what is missing (cached: tests/support/tiny_cache.py) and prints one line on stdout.
KIND: vlm, qwen3vl, heads, hpsv3, videoalign, geneval, image_reward, wan. HEAD: clip, clip_hf, pickscore,
hpsv2, ocr, hpsv3, videoalign, gen_eval, image_reward. --size: heads tiny|base|h14 (default tiny),
image_reward tiny|vitl|full (default tiny); the other kinds have one size.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tests.support import heads_env
from tests.support.vllm_server import build_tiny_model, build_tiny_qwen3vl_model

CLIP_FAMILY = ("clip", "clip_hf", "pickscore", "hpsv2")


def model_path(kind: str, size: str = "tiny") -> Path:
    builders = {
        "vlm": build_tiny_model,
        "qwen3vl": build_tiny_qwen3vl_model,
        "heads": lambda: heads_env.build_tiny_heads(size),
        "hpsv3": heads_env.build_tiny_hpsv3,
        "videoalign": heads_env.build_tiny_videoalign,
        "geneval": heads_env.build_random_geneval,
        "image_reward": lambda: heads_env.build_tiny_image_reward(size),
        "wan": heads_env.build_tiny_wan,
    }
    if kind not in builders:
        raise SystemExit(f"unknown model kind {kind!r}; one of {', '.join(builders)}")
    return builders[kind]()


def judge_entry(head: str, size: str = "tiny") -> dict:
    if head in CLIP_FAMILY:
        return heads_env.head_judges(heads_env.build_tiny_heads(size))[head]
    if head == "ocr":
        return {"kind": "ocr", "options": {"python": str(heads_env.heads_python())}}
    if head == "hpsv3":
        return heads_env.hpsv3_judge(heads_env.build_tiny_hpsv3())
    if head == "videoalign":
        return heads_env.videoalign_judge(heads_env.build_tiny_videoalign())
    if head == "gen_eval":
        return heads_env.geneval_judge(heads_env.build_random_geneval(), heads_env.build_tiny_heads("tiny"))
    if head == "image_reward":
        return heads_env.image_reward_judge(heads_env.build_tiny_image_reward(size))
    raise SystemExit(f"unknown head {head!r}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["path", "judge"])
    ap.add_argument("name")
    ap.add_argument("--size", default="tiny")
    args = ap.parse_args(argv)
    if args.what == "path":
        print(model_path(args.name, args.size))
    else:
        print(json.dumps(judge_entry(args.name, args.size)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
