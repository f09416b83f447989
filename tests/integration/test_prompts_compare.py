"""`prompts compare` of vqa_alignment@1 vs @2 and shadow scoring against the real CPU vLLM."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.schema import RewardRequest
from tests.support.cli_configs import vlm_config, write_config

pytestmark = pytest.mark.integration


def _images(tmp_path, n: int) -> list[str]:
    rng = np.random.default_rng(11)
    names = []
    for i in range(n):
        arr = np.zeros((64, 64, 3), dtype=np.uint8)
        arr[..., i % 3] = 30 + 20 * i
        arr[16:40, 8:56] = rng.integers(0, 256, 3, dtype=np.uint8)
        Image.fromarray(arr).save(tmp_path / f"{i}.png")
        names.append(f"{i}.png")
    return names


def test_prompts_compare_two_alignment_versions(tmp_path, vllm):
    names = _images(tmp_path, 12)
    prompts = ["a red square", "a green field", "a blue sky", "a cat", "a dog", "a tree"]
    labels = ["a", "b", "tie", "a", "b", None]
    lines = [json.dumps({"id": f"p{i}", "prompt": prompts[i], "a": names[2 * i], "b": names[2 * i + 1],
                         "label": labels[i]}) for i in range(6)]
    data = tmp_path / "prefs.jsonl"
    data.write_text("\n".join(lines) + "\n")
    cfg = write_config(tmp_path, vlm_config(vllm.base_url, "Qwen/Qwen2.5-VL-7B-Instruct",
                                            {"alignment": "vqa_alignment@1"}, backend="qwen_vl"))
    cache = tmp_path / "cache.jsonl"
    cmd = [sys.executable, "-m", "judge_gateway.cli", "prompts", "compare", "vqa_alignment@1", "vqa_alignment@2",
           "--data", str(data), "--config", str(cfg), "--cache", str(cache), "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "0 from the cache, 24 scored now" in out and "valid under both: 12" in out
    rho = float(re.search(r"Spearman rho: (-?[0-9.]+|nan)", out).group(1))
    assert -1.0 <= rho <= 1.0
    assert re.search(r"flip rate: [0-9.]+ \(\d+ of 6 pairs", out)
    assert re.search(r"vqa_alignment@1: pairwise accuracy without ties [0-9.]+% \(4 pairs\)", out)
    assert re.search(r"vqa_alignment@2: pairwise accuracy without ties [0-9.]+% \(4 pairs\), with ties", out)
    # The two versions are cached separately; a second run needs no backend at all.
    rows = [json.loads(x) for x in cache.read_text().splitlines()]
    assert len(rows) == 24 and len({r["template_sha256"] for r in rows}) == 2
    again = subprocess.run(cmd + ["--cache-only"], capture_output=True, text=True, timeout=120, check=False)
    assert again.returncode == 0, again.stderr
    assert "24 from the cache, 0 scored now" in again.stdout
    assert out.splitlines()[-4:] == again.stdout.splitlines()[-4:]


def test_shadow_template_against_real_vllm(vllm):
    def doc(**options):
        return {"backends": {"q": {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "base_urls": [vllm.base_url]}},
                "judges": {"alignment": {"kind": "yes_no", "backend": "q", "template": "vqa_alignment@1",
                                         "options": options}}}

    arr = np.zeros((64, 64, 3), dtype=np.uint8)
    arr[10:30, 10:50] = (200, 40, 40)

    async def run(d):
        gw = Gateway(validate_config(d))
        try:
            return await gw.score(RewardRequest(samples=[{"prompt": "a red bar", "image": {
                "data": __import__("base64").b64encode(arr.tobytes()).decode(), "shape": [64, 64, 3],
                "dtype": "uint8"}}]))
        finally:
            await gw.aclose()

    plain = asyncio.run(run(doc())).results[0].scores["alignment"]
    shadowed = asyncio.run(run(doc(shadow_template="vqa_alignment@2"))).results[0].scores["alignment"]
    assert plain.valid and shadowed.valid
    assert shadowed.reward == pytest.approx(plain.reward, abs=1e-6)
    shadow = shadowed.details["shadow"]
    assert shadow["valid"] and shadow["template"]["version"] == "2"
    assert 0.0 <= shadow["reward"] <= 1.0
