"""Test helpers for the worker venvs (heads, hpsv3, geneval, imagereward, latents): their interpreters,
the tiny models built there, rendered text."""

from __future__ import annotations

import hashlib
import io
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

from tests.support.tiny_cache import (
    cached_build,
    python_path,  # noqa: F401  (re-exported: a worker's PYTHONPATH)
    resolve_entry_paths,
    resolved_dir,
)

ROOT = Path(__file__).resolve().parents[2]


# scripts/test.sh builds the GenEval venv (its mmcv compile, ~10 min) beside the first integration
# tests: while it builds, $JG_SETUP_PENDING/<venv folder name> exists, and a test that needs that
# venv waits here for the build to end instead of the whole stage waiting before its first test.
PENDING_WAIT_S = 1800.0


def _wait_while_building(default: str) -> None:
    folder = os.environ.get("JG_SETUP_PENDING")
    if not folder:
        return
    marker = Path(folder) / default
    started = time.monotonic()
    if marker.exists():
        print(f"\n[heads_env] waiting for scripts/test.sh to finish building {default} ...", flush=True)
    while marker.exists() and time.monotonic() - started < PENDING_WAIT_S:
        time.sleep(2.0)


def venv_python(env_var: str, default: str, setup_script: str) -> Path:
    """The interpreter of a worker venv ($env_var, else <repo>/default), or why it is missing."""
    _wait_while_building(default)
    python = Path(os.environ.get(env_var, ROOT / default)) / "bin" / "python"
    if not python.exists():
        raise RuntimeError(f"{python} is missing: run scripts/{setup_script} first")
    return python


def installed(python: Callable[[], Path]) -> Path | None:
    """`python()` (e.g. heads_python), or None where its venv is missing: a unit test skips then."""
    try:
        return python()
    except RuntimeError:
        return None


def heads_python() -> Path:
    return venv_python("JG_HEADS_VENV", ".venv-heads", "setup_heads.sh")


def build_tiny_heads(size: str = "tiny") -> Path:
    """The tiny CLIP-family models built with the real libraries, offline (cached: tiny_cache)."""
    return cached_build(f"heads-{size}", python=heads_python(), module="tests.support.tiny_heads",
                        args=["--size", size], marker="reference.json", timeout=600)


def hpsv3_python() -> Path:
    return venv_python("JG_HPSV3_VENV", ".venv-hpsv3", "setup_hpsv3.sh")


def build_tiny_hpsv3() -> Path:
    """The tiny HPSv3 checkpoint, offline (cached: tiny_cache)."""
    return cached_build("hpsv3-tiny", python=hpsv3_python(), module="tests.support.tiny_hpsv3", marker="reference.json")


def hpsv3_judge(models: Path, **options) -> dict:
    """A [judges.*] entry for the hpsv3 head on the tiny checkpoint: the package's shipped yaml
    with the tiny base model (pass `config=...` to use the tiny yaml instead)."""
    return {"kind": "hpsv3", "options": {"python": str(hpsv3_python()), "checkpoint": str(models / "HPSv3.safetensors"),
                                         "base_model": str(models / "base"), **options}}


def build_tiny_videoalign() -> Path:
    """The tiny VideoAlign checkpoint (ckpt/), its test videos and reference scores (cached: tiny_cache;
    the reference scores go through the head's own preprocessing, whose module is in the digest)."""
    return cached_build("videoalign-tiny", python=heads_python(), module="tests.support.tiny_videoalign",
                        marker="reference.json")


def videoalign_checkpoint(models: Path) -> Path:
    """The checkpoint folder with its model_config.json naming the base model by absolute path
    (the cached one names it relative to the entry), in a folder outside the cache."""
    dest = resolved_dir(models) / "ckpt"
    resolve_entry_paths(models, "ckpt/model_config.json", dest, ["model_config.model_name_or_path"])
    return dest


def hpsv3_tiny_yaml(models: Path) -> Path:
    """HPSv3_tiny.yaml naming the tiny base model by absolute path, in a folder outside the cache."""
    return resolve_entry_paths(models, "HPSv3_tiny.yaml", resolved_dir(models), ["model_name_or_path"])


def videoalign_judge(models: Path, **options) -> dict:
    return {"kind": "videoalign", "options": {"python": str(heads_python()), "checkpoint": str(videoalign_checkpoint(models)),
                                              **options}}


def geneval_python() -> Path:
    return venv_python("JG_GENEVAL_VENV", ".venv-geneval", "setup_geneval.sh")


def build_random_geneval() -> Path:
    """Mask2Former Swin-S COCO from mmdet's shipped config with random weights (cached: tiny_cache)."""
    return cached_build("geneval", python=geneval_python(), module="tests.support.tiny_geneval",
                        marker="mask2former_random.pth")


def geneval_judge(detector: Path, clip_models: Path, **options) -> dict:
    """gen_eval on the random detector, colours by the tiny open_clip model of build_tiny_heads."""
    return {"kind": "gen_eval", "options": {
        "python": str(geneval_python()), "detector_checkpoint": str(detector / "mask2former_random.pth"),
        "clip_model": "jg-tiny-clip", "clip_pretrained": str(clip_models / "openclip.pt"),
        "clip_model_config_file": str(clip_models / "openclip_cfg" / "jg-tiny-clip.json"), **options}}


def head_judges(models: Path, **common) -> dict[str, dict]:
    """[judges.*] entries for every CLIP-family head on the tiny models."""
    cfg = str(models / "openclip_cfg" / "jg-tiny-clip.json")
    base = {"python": str(heads_python()), **common}
    return {
        "clip": {"kind": "clip", "options": {**base, "library": "open_clip", "model": "jg-tiny-clip",
                                             "pretrained": str(models / "openclip.pt"), "model_config_file": cfg}},
        "clip_hf": {"kind": "clip", "options": {**base, "model": str(models / "hf_clip")}},
        "pickscore": {"kind": "pickscore", "options": {**base, "model": str(models / "hf_clip"),
                                                       "processor": str(models / "hf_clip")}},
        "hpsv2": {"kind": "hpsv2", "options": {**base, "model": "jg-tiny-clip",
                                               "checkpoint": str(models / "openclip.pt"), "model_config_file": cfg}},
    }


def imagereward_python() -> Path:
    return venv_python("JG_IMAGEREWARD_VENV", ".venv-imagereward", "setup_imagereward.sh")


def build_tiny_image_reward(size: str = "tiny") -> Path:
    """The ImageReward test checkpoint, built under .venv-imagereward (cached: tests/support/tiny_cache.py)."""
    return cached_build(f"image-reward-{size}", python=imagereward_python(), module="tests.support.tiny_image_reward",
                        args=["--size", size], marker="reference.json")


def image_reward_judge(models: Path, **options) -> dict:
    """A `[judges.*]` entry for the head on a checkpoint of build_tiny_image_reward."""
    vit = json.loads((models / "vit.json").read_text())
    return {"kind": "image_reward", "options": {
        "python": str(imagereward_python()), "checkpoint": str(models / "ImageReward.pt"),
        "med_config": str(models / "med_config.json"), "tokenizer": str(models / "tokenizer"),
        **({"vit": vit} if vit else {}), **options}}


def latents_python() -> Path:
    return venv_python("JG_LATENTS_VENV", ".venv-latents", "setup_latents.sh")


def build_tiny_wan() -> Path:
    """The tiny Wan VAEs (Wan2.1 and Wan2.2 layouts) and cosmos-rl's statistics (cached: tiny_cache)."""
    return cached_build("wan-vae-tiny", python=latents_python(), module="tests.support.tiny_wan",
                        marker="video_mean_std.pt", timeout=600)


BYO_EXAMPLES = ROOT / "docs" / "examples" / "byo"
PEERS = ROOT / "tests" / "support" / "peers"  # stand-ins of flow_factory and cosmos_rl_reward


def build_byo() -> Path:
    """The "add a reward" guide's model, inputs and direct-call numbers (cached: tiny_cache; the
    examples and the peer stand-ins are hashed into the key, as they are not imported by name)."""
    h = hashlib.sha256()
    for path in sorted([*BYO_EXAMPLES.rglob("*.py"), *PEERS.rglob("*.py")]):
        h.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return cached_build("byo", python=heads_python(), module="tests.support.tiny_byo",
                        args=["--examples-digest", h.hexdigest()[:16]], marker="reference.json")


def text_image_png(text: str, size: tuple[int, int] = (512, 256)) -> bytes:
    """judge_gateway.prepare.text_image as PNG bytes (imported here: the worker venvs that import
    this module to build tiny models need not have the gateway's dependencies)."""
    from judge_gateway.prepare import text_image

    buf = io.BytesIO()
    Image.fromarray(text_image(text, size)).save(buf, format="PNG")
    return buf.getvalue()


def load_test_images(models: Path) -> list[np.ndarray]:
    """The images a tiny-model builder saved as models/images/0.png, 1.png ..., in order."""
    return [load_png(p) for p in sorted((models / "images").glob("*.png"), key=lambda p: int(p.stem))]


def load_png(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))
