"""Build a random-weight GenEval detector checkpoint offline, with mmdet's real loader.

Run under the GenEval venv: `.venv-geneval/bin/python -m tests.support.tiny_geneval OUT_DIR`.
Writes OUT_DIR/mask2former_random.pth: Mask2Former Swin-S COCO from the config mmdet's wheel
ships, built by `init_detector(config, None)` (random weights, no download), its class logits
biased towards `dog` so that a random image yields detections above GenEval's thresholds (the
colour path then runs too). Saved as {"state_dict", "meta": {"dataset_meta"}} like mmdet's own.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

CONFIG = "mask2former/mask2former_swin-s-p4-w7-224_8xb2-lsj-50e_coco.py"
BIASED_CLASS = "dog"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    from mmdet.apis import init_detector

    from judge_gateway.heads.geneval.model import resolve_detector_config

    torch.manual_seed(0)
    model = init_detector(resolve_detector_config(CONFIG), None, device="cpu")
    classes = list(model.dataset_meta["classes"])
    state = model.state_dict()
    bias_key = "panoptic_head.cls_embed.bias"
    bias = state[bias_key]
    bias.zero_()
    bias[classes.index(BIASED_CLASS)] = 12.0
    torch.save({"state_dict": state, "meta": {"dataset_meta": {"classes": tuple(classes)}}},
               out / "mask2former_random.pth.tmp")
    (out / "mask2former_random.pth.tmp").rename(out / "mask2former_random.pth")
    print(f"wrote {out / 'mask2former_random.pth'} ({len(classes)} classes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
