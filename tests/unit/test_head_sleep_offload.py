"""heads/sleeping.py's offload path (a colocated head on a GPU at level 1), as far as a CPU can run
it: no GPU is lent here, so a head on the CPU is forced to `offload` and its weights "move" from the
CPU to the CPU. The round trip checks the bookkeeping: the facts count each weight once (tied
weights are one tensor), the Parameter objects and the tie survive the assignments, the cached text
rows are moved with them, the outputs are unchanged, and a second sleep is a no-op. The copies to
pinned host memory and back are run by `bench/residency.py heads --device cuda` on a GPU. Runs under
.venv-heads (torch)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.heads_env import heads_python, installed

ROOT = Path(__file__).resolve().parents[2]
HEADS_PYTHON = installed(heads_python)

_PROBE = r"""
import json, torch
from judge_gateway.config.head_options import HeadOptions
from judge_gateway.heads.models.base import HeadModel
from judge_gateway.heads.models.text_cache import TextEmbeddingCache
from judge_gateway.heads.sleeping import HeadSleeper

class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 8)
        self.out = torch.nn.Linear(8, 50, bias=False)
        self.out.weight = self.embed.weight  # tied
        self.register_buffer("scale", torch.full((8,), 0.5))

    def forward(self, ids):
        return self.out(self.embed(ids) * self.scale)

class Head(HeadModel):
    def load(self):
        torch.manual_seed(0)
        self.model = Tied().eval()
        self.text_cache = TextEmbeddingCache(8)
        self.text_cache.get_many(["a cat"], lambda ps: [torch.ones(4) for _ in ps])
        return {}
    def infer(self, images, prompts):
        return []
    def sleep_methods(self):
        return "offload", "reload"
    def device_tensors_to(self, device):
        self.text_cache.map_rows(lambda row: row.to(device))

# a head forced to offload, round trip on the CPU
head = Head("clip", HeadOptions(device="cpu"))
head.load()
params = {id(p) for p in head.model.parameters()}
ids = torch.arange(10)
with torch.inference_mode():
    before = head.model(ids)
sleeper = HeadSleeper(head)
slept = sleeper.sleep(1)
woke = sleeper.wake()
with torch.inference_mode():
    after = head.model(ids)
structure = {"tied": head.model.out.weight is head.model.embed.weight,
             "same_parameters": {id(p) for p in head.model.parameters()} == params,
             "devices": sorted({t.device.type for t in [*head.model.parameters(), *head.model.buffers()]})}
print(json.dumps({"structure": structure, "slept": slept["method"], "weights_bytes": slept["weights_bytes"],
                  "asleep_after_wake": sleeper.asleep, "woke": woke["method"], "equal": bool(torch.equal(before, after)),
                  "tied_after": head.model.out.weight is head.model.embed.weight,
                  "again": sleeper.sleep(1)["method"], "again_again": sleeper.sleep(1).get("already")}))
"""


@pytest.mark.skipif(HEADS_PYTHON is None, reason="no heads venv (scripts/setup_heads.sh)")
def test_offload_moves_every_weight_keeps_tied_ones_tied_and_the_outputs_unchanged():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([str(HEADS_PYTHON), "-c", _PROBE], capture_output=True, text=True, env=env,
                         timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["structure"] == {"tied": True, "same_parameters": True, "devices": ["cpu"]}
    # the embedding / output weight once (tied) plus the buffer: 50 x 8 + 8 floats
    assert got["weights_bytes"] == (50 * 8 + 8) * 4
    assert got["slept"] == got["woke"] == "offload" and not got["asleep_after_wake"]
    assert got["equal"] and got["tied_after"]
    assert got["again"] == "offload" and got["again_again"] is True  # a second sleep is a no-op
