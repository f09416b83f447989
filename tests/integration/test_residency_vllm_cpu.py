"""The real CPU vLLM cannot sleep, and the gateway says so at start instead of pretending.

vLLM 0.32.0's CPU build refuses `--enable-sleep-mode` at start ("Sleep mode is not supported on
current platform.", vllm/config/model.py); started without it but in dev mode, it answers
`POST /sleep` with 200 "sleeping" all the same. So a colocated judge on it is refused by reading
the server's platform (`GET /server_info`: device_config.device = "cpu"), on the session's server
(started with VLLM_SERVER_DEV_MODE=1, tests/integration/conftest.py).
"""

from __future__ import annotations

import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.residency import ResidencyUnsupported

pytestmark = pytest.mark.integration


async def test_a_colocated_judge_on_the_cpu_vllm_is_refused_at_start_with_the_reason(vllm):
    cfg = validate_config({
        "backends": {"qwen": {"model": vllm.model, "base_urls": [vllm.base_url]}},
        "judges": {"alignment": {"kind": "yes_no", "backend": "qwen", "template": "vqa_alignment@1",
                                 "residency": "colocated"}}})
    gateway = Gateway(cfg)
    try:
        with pytest.raises(ResidencyUnsupported) as refused:
            await gateway.residency.start()
        reason = str(refused.value)
        assert "backend 'qwen' replica 1 of 1 is vLLM on the CPU" in reason
        assert "sleep mode works on CUDA and ROCm GPUs" in reason and "keep it resident" in reason
        assert gateway.residency.by_judge["alignment"].state == "awake"  # nothing was put to sleep
    finally:
        await gateway.aclose()
