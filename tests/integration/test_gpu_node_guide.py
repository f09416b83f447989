"""The GPU-node guide's configs, served and scored (issue 33: its cosmos-rl example pinned a
template that answered `answer_missing` on every sample, and its test only loaded and planned it).
The guide's configs are the shipped ones (docs/guides/gpu-node.md quotes them; a unit test checks
the quotes); here each runs on the session's CPU vLLM and the tiny models of each head kind
(tests/support/guide_configs.py swaps weights, devices and venvs only) and every judge scores
prepare's probe sample (an image with a quoted word, a short video for the video judges) with a
valid score."""

from __future__ import annotations

import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.prepare import check_judges
from tests.support.guide_configs import GUIDE_CONFIGS, on_this_machine, shipped

pytestmark = [pytest.mark.integration, pytest.mark.needs_geneval_venv]


@pytest.mark.parametrize("name", GUIDE_CONFIGS)
async def test_every_judge_of_the_guides_config_gives_a_valid_score(name, vllm):
    cfg = validate_config(on_this_machine(name, vllm.base_url), source=f"configs/{name}.toml, here")
    assert set(cfg.judges) == set(shipped(name)["judges"])
    gw = Gateway(cfg)
    try:
        results = await check_judges(gw, list(cfg.judges))
    finally:
        await gw.aclose()
    print({n: (r.probe, f"{r.seconds:.1f} s") for n, r in results.items()})
    failed = {n: (r.load, r.probe) for n, r in results.items() if not r.ok}
    assert not failed, failed
    assert all(r.probe.startswith("ok (reward ") for r in results.values())
