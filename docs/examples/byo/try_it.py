"""Score two images with the first reward (docs/examples/byo/start.toml): a sharp checkerboard and
a blurred copy of it. Run it against the gateway serving that config:

    python docs/examples/byo/try_it.py [URL]          # default http://127.0.0.1:8080
"""

from __future__ import annotations

import sys

from PIL import Image, ImageFilter

from judge_gateway import RewardClient

sharp = Image.new("RGB", (256, 256), "white")
for y in range(0, 256, 32):
    for x in range((y // 32) % 2 * 32, 256, 64):
        sharp.paste((20, 20, 20), (x, y, x + 32, y + 32))
blurred = sharp.filter(ImageFilter.GaussianBlur(6))

with RewardClient(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080") as client:
    result = client.rewards.create(samples=[{"prompt": "a checkerboard", "image": sharp},
                                            {"prompt": "a checkerboard", "image": blurred}],
                                   judges=["edge_density"])
for name, sample in zip(("sharp", "blurred"), result.results):
    score = sample.scores["edge_density"]
    print(f"{name:8s} valid={score.valid} raw={score.raw:.4f} edge_share={score.details['edge_share']:.3f}")
