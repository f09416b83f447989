"""configs/cosmos_rl.toml: every reward name cosmos-rl serves resolves to a
judge on its published weights, the VLM judges sit where scripts/start_vllm.sh's presets serve,
and both Wan decoders are configured. Loading starts nothing; the not-ready reasons of serving it
on a machine without the weights are in tests/integration/test_cosmos_rl_config.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from judge_gateway.config import load_config
from judge_gateway.gateway import Gateway
from judge_gateway.server.cosmos_rl import CosmosRLService
from judge_gateway.store import MemoryStore

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "cosmos_rl.toml"

# cosmos-rl's reward names (reward_service/cosmos_rl_reward/model/*.py) and the judge each maps to.
ORIGINAL = {"cosmos_reason1": "cosmos_reason1", "dance_grpo": "videoalign", "hpsv2": "hpsv2", "hpsv3": "hpsv3",
            "pickscore": "pickscore", "image_reward": "image_reward", "ocr": "ocr", "gen_eval": "gen_eval",
            "unified_reward": "unified_reward"}


def _preset_ports() -> dict[str, tuple[str, int]]:
    """scripts/start_vllm.sh: preset -> (served model name, port)."""
    text = (ROOT / "scripts" / "start_vllm.sh").read_text()
    out = {}
    for m in re.finditer(r'^\s+(\w+)\)\n\s+P_MODEL="[^"]*"; P_SERVED="([^"]*)"\n\s+P_PORT=(\d+);', text, re.MULTILINE):
        out[m.group(1)] = (m.group(2), int(m.group(3)))
    return out


@pytest.fixture(scope="module")
def cfg():
    return load_config(CONFIG)  # validates, as `judge-gateway serve --config` does


async def test_every_cosmos_rl_reward_name_resolves_to_a_configured_judge(cfg):
    gw = Gateway(cfg)
    service = CosmosRLService(gw, MemoryStore(ttl_s=60, max_entries=10), cfg.cosmos_rl)
    try:
        for name, judge in ORIGINAL.items():
            assert service.resolve(name).judge == judge, name
            assert judge in gw.judges
    finally:
        await service.aclose()
        await gw.aclose()


def test_heads_name_their_published_weights_by_hub_id(cfg):
    opts = {name: j.options.model_dump(exclude_unset=True) for name, j in cfg.judges.items()}  # as written
    assert opts["pickscore"]["model"] == "yuvalkirstain/PickScore_v1"
    assert opts["pickscore"]["processor"] == "laion/CLIP-ViT-H-14-laion2B-s32B-b79K"
    assert opts["hpsv2"]["checkpoint"] == "xswu/HPSv2/HPS_v2.1_compressed.pt" and opts["hpsv2"]["model"] == "ViT-H-14"
    assert opts["hpsv3"]["checkpoint"] == "MizzenAI/HPSv3/HPSv3.safetensors"
    assert opts["hpsv3"]["base_model"] == "Qwen/Qwen2-VL-7B-Instruct"
    assert opts["image_reward"]["checkpoint"] == "THUDM/ImageReward/ImageReward.pt"
    assert opts["image_reward"]["med_config"] == "THUDM/ImageReward/med_config.json"
    assert opts["videoalign"]["checkpoint"] == "KwaiVGI/VideoReward"
    assert opts["gen_eval"]["detector_checkpoint"].endswith(
        "mask2former_swin-s-p4-w7-224_8xb2-lsj-50e_coco_20220504_001756-c9d0c4f2.pth")
    assert opts["gen_eval"]["clip_model"] == "ViT-L-14" and opts["gen_eval"]["clip_pretrained"] == "openai"
    # each head under the venv its setup script makes
    venvs = {name: o["python"] for name, o in opts.items() if "python" in o}
    assert venvs == {"videoalign": ".venv-heads/bin/python", "pickscore": ".venv-heads/bin/python",
                     "hpsv2": ".venv-heads/bin/python", "ocr": ".venv-heads/bin/python",
                     "hpsv3": ".venv-hpsv3/bin/python", "image_reward": ".venv-imagereward/bin/python",
                     "gen_eval": ".venv-geneval/bin/python"}
    for script in ("setup_heads.sh", "setup_hpsv3.sh", "setup_imagereward.sh", "setup_geneval.sh", "setup_latents.sh"):
        assert (ROOT / "scripts" / script).exists()


def test_vlm_judges_are_where_start_vllm_presets_serve_them(cfg):
    presets = _preset_ports()
    for judge in ("cosmos_reason1", "unified_reward"):
        backend = cfg.backends[cfg.judges[judge].backend]
        served, port = presets[judge]
        assert backend.model == served
        assert backend.base_urls == [f"http://127.0.0.1:{port}/v1"]


def test_both_wan_decoders_are_configured(cfg):
    lat = cfg.cosmos_rl.latents
    assert lat.python == ".venv-latents/bin/python"
    assert {c: (name, v.checkpoint, v.subfolder) for c, (name, v) in lat.decoders().items()} == {
        16: ("wan2_1", "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", "vae"),
        48: ("wan2_2", "Wan-AI/Wan2.2-TI2V-5B-Diffusers", "vae"),
    }
    assert cfg.cosmos_rl.refuse_unready and cfg.store.ttl_s >= 86400


def test_cosmos_reason1_counts_the_exact_tokens_as_cosmos_rl(cfg):
    """cosmos-rl's no_score is a softmax over the exact "Yes"/"No" logits."""
    assert cfg.judges["cosmos_reason1"].options.counting == "exact"


def test_a_group_of_720p_latent_clips_fits_the_request_budget(cfg):
    """8 Wan2.1 clips of 81 frames at 720x1280 (one GRPO group): refused by 2^29, not here."""
    from judge_gateway.server.cosmos_rl.tensors import check_enqueue_limits, decoded_video_shape

    b, t, h, w = decoded_video_shape((8, 16, 21, 90, 160))
    check_enqueue_limits(b, t, h, w, None, cfg.media.limits(), "latents")
