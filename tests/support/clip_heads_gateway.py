"""The integration session's CLIP-family heads gateway: one config for every module that scores
the tiny CLIP-family heads (test_heads, test_conformance_heads, test_protocols' heads test), so
their worker processes start once per session (tests/integration/conftest.py holds the gateway).

A head judge is one worker process; workers start on first use, so a judge no test of this run
uses costs nothing. The judges that several modules use keep one set of options: what one module
adds for itself (Flow-Factory's video settings on `pickscore` and `clip_hf`, its CLIP as `clip_ff`) is judge-side and
touches nothing another module scores.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.support.heads_env import head_judges, heads_python

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_FLOW_FACTORY = ROOT / "configs" / "flow_factory.toml"


def shipped_flow_factory() -> dict:
    """configs/flow_factory.toml, as it ships."""
    return tomllib.loads(SHIPPED_FLOW_FACTORY.read_text())


def clip_heads_config(models: Path, vllm_url: str) -> dict:
    """Every CLIP-family head on the tiny models of build_tiny_heads, OCR, and two yes/no judges on
    the session's vLLM; Flow-Factory's profiles as configs/flow_factory.toml ships them (its `clip`
    judge is `clip_ff` here: the HF CLIPModel in its dtype and arithmetic), and a groupwise profile of a
    head and a VLM judge."""
    shipped = shipped_flow_factory()
    judges = head_judges(models, max_wait_ms=50, max_batch_size=64)
    unbatched = head_judges(models, max_wait_ms=0, max_batch_size=1)
    judges["clip_unbatched"] = unbatched["clip"]
    # closes a batch when it holds 6 images: a request's cells go out to the worker in one frame, and
    # the wait (10 s, the most the config allows) is a margin, not the trigger: batches are a count
    judges["clip_6"] = head_judges(models, max_wait_ms=10_000, max_batch_size=6)["clip"]
    judges["clip_bf16"] = head_judges(models, dtype="bf16")["clip"]
    judges["pickscore_unbatched"] = unbatched["pickscore"]
    judges["ocr"] = {"kind": "ocr", "options": {"python": str(heads_python()), "threads": 2}}
    judges["clip_video"] = {**judges["clip"], "video": {"num_frames": 4},
                            "options": {**judges["clip"]["options"], "pooling": "min"}}
    # Colocated twins of clip, clip_hf and ocr (test_residency_heads.py: asleep, woken, the same scores);
    # asleep only when told, scored only when named.
    colocated = {"mode": "colocated", "idle_sleep_s": None}
    for name in ("clip", "clip_hf", "ocr"):
        judges[f"{name}_colocated"] = {**judges[name], "residency": colocated, "default": False}
    # Flow-Factory's PickScore (every frame of a video, their mean) and CLIP (a video's first frame)
    judges["pickscore"]["video"] = shipped["judges"]["pickscore"]["video"]
    judges["pickscore"]["options"]["pooling"] = shipped["judges"]["pickscore"]["options"]["pooling"]
    judges["clip_hf"]["video"] = shipped["judges"]["clip"]["video"]
    # Flow-Factory's CLIP as shipped: its dtype (bfloat16) and its arithmetic in that dtype
    ff_clip = shipped["judges"]["clip"]
    judges["clip_ff"] = {**judges["clip_hf"], "options": {**judges["clip_hf"]["options"],
                                                          "dtype": ff_clip["options"]["dtype"],
                                                          "cosine_dtype": ff_clip["options"]["cosine_dtype"]}}
    backend = {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "base_urls": [vllm_url], "timeout_s": 120}
    judges["image_quality"] = {"kind": "yes_no", "backend": "qwen_vl", "template": "image_quality@1"}
    judges["alignment"] = {"kind": "yes_no", "backend": "qwen_vl", "template": "vqa_alignment@1"}
    profiles = {k: shipped["flow_factory"]["profiles"][k] for k in ("PickScore", "PickScore_Rank")}
    profiles["CLIP"] = {**shipped["flow_factory"]["profiles"]["CLIP"], "judges": {"clip_ff": 1.0}}
    profiles["heads"] = {"judges": {"pickscore": 1.0, "alignment": 1.0}, "mode": "groupwise",
                         "group_transform": "zscore"}
    return {"backends": {"qwen_vl": backend}, "judges": judges, "combine": {"on_invalid": "skip"},
            "flow_factory": {"profiles": profiles}}


class ClipHeads:
    """The session's heads gateway and its one app, whose cosmos-rl service every module's requests
    share (closed with the gateway)."""

    def __init__(self, models: Path, vllm_url: str) -> None:
        self.gateway = Gateway(validate_config(clip_heads_config(models, vllm_url)))
        self.gateway.config.server.readiness_interval_s = 0.0
        self.app = create_app(self.gateway)

    async def aclose(self) -> None:
        """The app's cosmos-rl service, then every worker; a second call finds them closed."""
        await self.app.state.cosmos_rl.aclose()
        await self.gateway.aclose()
