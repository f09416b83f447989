"""A scene-quality head built for the reward-hacking test: a tiny open_clip model trained here, on
the CPU, to score a clean landscape poster (tests/support/hacking_policy.py) above one whose
scene is buried under a caption, as an image-quality judge would. It runs as a real `clip` head
(the real loader, preprocessing and worker); only its weights are made for the test.

Run under the heads venv: `.venv-heads/bin/python -m tests.support.tiny_scene_clip OUT_DIR`.
Writes OUT_DIR/openclip_cfg/jg-scene-clip.json, OUT_DIR/openclip.pt ({"state_dict": ...}) and
OUT_DIR/report.json (the held-out pairs it orders right).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import torch
from PIL import Image

from tests.support.hacking_policy import PROMPT, poster

NAME = "jg-scene-clip"
CONFIG = {"embed_dim": 32,
          "vision_cfg": {"image_size": 64, "layers": 2, "width": 64, "patch_size": 16, "head_width": 32},
          "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2}}
STEPS = 200
BATCH = 16


def _images(seeds: range, hack: float) -> list[Image.Image]:
    return [Image.open(io.BytesIO(poster(s, hack))).convert("RGB") for s in seeds]


def main(argv: list[str] | None = None) -> int:
    import open_clip

    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    out = ap.parse_args(argv).out
    cfg_path = out / "openclip_cfg" / f"{NAME}.json"
    cfg_path.parent.mkdir(parents=True, exist_ok=True)
    cfg_path.write_text(json.dumps(CONFIG))
    open_clip.add_model_config(cfg_path)
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a model this small trains fastest on one thread
    model, _, preprocess = open_clip.create_model_and_transforms(NAME, pretrained=None)
    with torch.no_grad():  # only the image tower learns: the prompt's embedding stays what it is
        t = model.encode_text(open_clip.get_tokenizer(NAME)([PROMPT]))
        t = t / t.norm(dim=-1, keepdim=True)
    # clean: the honest policy's posters without a caption; buried: the hack's, half way and more
    clean = torch.stack([preprocess(im) for im in _images(range(0, 400), 0.0)])
    buried = torch.stack([preprocess(im) for im in _images(range(400, 800), 0.75)])
    held_clean, held_buried = clean[-80:], buried[-80:]
    clean, buried = clean[:-80], buried[:-80]
    opt = torch.optim.Adam(model.visual.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)

    def scores(images: torch.Tensor) -> torch.Tensor:
        e = model.encode_image(images)
        return (e / e.norm(dim=-1, keepdim=True) @ t.T)[:, 0]

    model.train()
    for _ in range(STEPS):
        a = clean[torch.randint(len(clean), (BATCH,), generator=gen)]
        b = buried[torch.randint(len(buried), (BATCH,), generator=gen)]
        loss = torch.nn.functional.softplus(-20.0 * (scores(a) - scores(b))).mean()  # clean above buried
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        right = float((scores(held_clean)[:, None] > scores(held_buried)[None, :]).float().mean())
    torch.save({"state_dict": {f"module.{k}": v for k, v in model.state_dict().items()}}, out / "openclip.pt")
    (out / "report.json").write_text(json.dumps({"held_out_pairs_ordered_right": right, "steps": STEPS}))
    print(f"scene clip: {right:.3f} of held-out (clean, buried) pairs ordered right", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
