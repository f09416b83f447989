"""Write the advanced example's `sharpness.pt`: SharpnessNet's weights, seeded (an untrained net
to try the route with; train your own). Run it under the venv with torch, where the gateway runs:

    .venv-heads/bin/python docs/examples/byo/rewards/make_checkpoint.py sharpness.pt
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # sharpness.py, beside this file
from sharpness import SharpnessNet  # noqa: E402

torch.manual_seed(0)
out = Path(sys.argv[1] if len(sys.argv) > 1 else "sharpness.pt")
torch.save(SharpnessNet().state_dict(), out)
print(f"wrote {out}")
