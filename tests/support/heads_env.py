"""Test helpers for the local heads: the heads venv, tiny models built there, rendered text."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

ROOT = Path(__file__).resolve().parents[2]


def venv_python(env_var: str, default: str, setup_script: str) -> Path:
    """The interpreter of a worker venv ($env_var, else <repo>/default), or why it is missing."""
    python = Path(os.environ.get(env_var, ROOT / default)) / "bin" / "python"
    if not python.exists():
        raise RuntimeError(f"{python} is missing: run scripts/{setup_script} first")
    return python


def python_path() -> str:
    """The checkout first, then what PYTHONPATH already holds (e.g. wheels unpacked on a GPU box)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)


def heads_python() -> Path:
    return venv_python("JG_HEADS_VENV", ".venv-heads", "setup_heads.sh")


def build_tiny_heads(size: str = "tiny") -> Path:
    """Build (once, cached) the tiny CLIP-family models with the real libraries, offline."""
    out = Path(os.environ.get("JG_TEST_CACHE", ROOT / ".cache")) / f"heads-{size}"
    if not (out / "reference.json").exists():
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": python_path()}
        subprocess.run([str(heads_python()), "-m", "tests.support.tiny_heads", str(out), "--size", size],
                       check=True, env=env, cwd=ROOT, timeout=600)
    return out


def hpsv3_python() -> Path:
    return venv_python("JG_HPSV3_VENV", ".venv-hpsv3", "setup_hpsv3.sh")


def build_tiny_hpsv3() -> Path:
    """Build (once per version of the builder, cached) the tiny HPSv3 checkpoint, offline."""
    return _build_cached("hpsv3-tiny", ["tiny_hpsv3.py", "build_tiny_vlm.py"], hpsv3_python(),
                         "tests.support.tiny_hpsv3", "reference.json")


def hpsv3_judge(models: Path, **options) -> dict:
    """A [judges.*] entry for the hpsv3 head on the tiny checkpoint: the package's shipped yaml
    with the tiny base model (pass `config=...` to use the tiny yaml instead)."""
    return {"kind": "hpsv3", "options": {"python": str(hpsv3_python()), "checkpoint": str(models / "HPSv3.safetensors"),
                                         "base_model": str(models / "base"), **options}}


def _build_cached(name: str, sources: list[str], python: Path, module: str, marker: str) -> Path:
    """Run a tiny-model builder module under `python` once per version of its sources; the
    result lives in <JG_TEST_CACHE or .cache>/<name>-<digest> and is complete once `marker` exists."""
    paths = [ROOT / src if "/" in src else ROOT / "tests" / "support" / src for src in sources]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in paths)).hexdigest()[:12]
    out = Path(os.environ.get("JG_TEST_CACHE", ROOT / ".cache")) / f"{name}-{digest}"
    if not (out / marker).exists():
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        done = subprocess.run([str(python), "-m", module, str(out)], env=env, cwd=ROOT, timeout=900,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{module} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return out


def build_tiny_videoalign() -> Path:
    """The tiny VideoAlign checkpoint (ckpt/), its test videos and reference scores, built once."""
    # The reference scores go through the head's own preprocessing: rebuild when it changes.
    return _build_cached("videoalign-tiny", ["tiny_videoalign.py", "build_tiny_vlm.py",
                                             "judge_gateway/heads/videoalign/model.py",
                                             "judge_gateway/heads/videoalign/config.py"], heads_python(),
                         "tests.support.tiny_videoalign", "reference.json")


def videoalign_judge(models: Path, **options) -> dict:
    return {"kind": "videoalign", "options": {"python": str(heads_python()), "checkpoint": str(models / "ckpt"),
                                              **options}}


def geneval_python() -> Path:
    return venv_python("JG_GENEVAL_VENV", ".venv-geneval", "setup_geneval.sh")


def build_random_geneval() -> Path:
    """Mask2Former Swin-S COCO from mmdet's shipped config with random weights, built once."""
    return _build_cached("geneval", ["tiny_geneval.py"], geneval_python(), "tests.support.tiny_geneval",
                         "mask2former_random.pth")


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


def text_image_png(text: str, size: tuple[int, int] = (512, 256)) -> bytes:
    """Black text on white, the way a text-rendering prompt would ideally come out."""
    im = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(im)
    draw.text((40, size[1] // 2 - 30), text, fill="black", font=ImageFont.load_default(size=56))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def load_test_images(models: Path) -> list[np.ndarray]:
    """The images a tiny-model builder saved as models/images/0.png, 1.png ..., in order."""
    return [load_png(p) for p in sorted((models / "images").glob("*.png"), key=lambda p: int(p.stem))]


def load_png(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))
