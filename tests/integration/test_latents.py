"""Wan VAE latents through the torch worker (.venv-latents, scripts/setup_latents.sh), on tiny random
AutoencoderKLWan models built locally (tests/support/tiny_wan.py): Wan2.1 (16 channels, spatial x8) and Wan2.2 (48 channels,
patchified, spatial x16) decode side by side, each by the decoder of its channel count, and
cosmos-rl's load_mean_std statistics are undone as cosmos-rl's DecodeHandler does. No vLLM needed."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from judge_gateway.latents import LatentDecoderError, LatentDecoderSupervisor
from judge_gateway.config import LatentDecoderConfig
from tests.support.heads_env import build_tiny_wan, latents_python

# The reference, written from the formulas rather than the worker: cosmos-rl's Wan2pt1VAEInterface
# decode (z * std + mean with the dataset statistics, image ones for T = 1, else the first T video
# ones), then the Wan VAE's own z / (1/std) + mean, decode, ((x.clamp(-1,1)+1)/2*255) cast to uint8
# (truncated, as cosmos-rl's DecodeHandler.decode_video; also saved rounded).
REFERENCE = """
import json, sys, numpy as np, torch
from diffusers import AutoencoderKLWan
for vae_dir, z_path, out_path, stats_dir in json.loads(sys.argv[1]):  # one process for every reference
    vae = AutoencoderKLWan.from_pretrained(vae_dir).eval()
    z = torch.from_numpy(np.load(z_path))
    c, t = z.shape[1], z.shape[2]
    if stats_dir != "-":
        name = "images_mean_std.pt" if t == 1 else "video_mean_std.pt"
        mean, std = torch.load(stats_dir + "/" + name, weights_only=True)
        mean, std = mean.reshape(1, c, -1, 1, 1)[:, :, :t], std.reshape(1, c, -1, 1, 1)[:, :, :t]
        z = z * std + mean
    mean = torch.tensor(vae.config.latents_mean).view(1, c, 1, 1, 1)
    std = torch.tensor(vae.config.latents_std).view(1, c, 1, 1, 1)
    with torch.inference_mode():
        x = vae.decode(z / (1.0 / std) + mean).sample
    x = (x.clamp(-1, 1) + 1) / 2 * 255
    np.save(out_path, x.to(torch.uint8).numpy())
    np.save(out_path + ".round.npy", x.round().to(torch.uint8).numpy())
"""


def _run(script: str, *args: str) -> None:
    proc = subprocess.run([str(latents_python()), "-c", script, *args], check=False, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def models() -> Path:
    return build_tiny_wan()


def _z(channels: int, t: int, b: int = 2, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((b, channels, t, 4, 4)).astype(np.float32)


def _references(models: Path, jobs: list[tuple[str, np.ndarray, bool]], tmp: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """(truncated, rounded) reference pixels for each (vae, z, with dataset statistics) job, all
    computed in one process (each costs a torch + diffusers import otherwise)."""
    args = []
    for k, (vae, z, stats) in enumerate(jobs):
        np.save(tmp / f"z{k}.npy", z)
        args.append([str(models / vae), str(tmp / f"z{k}.npy"), str(tmp / f"ref{k}.npy"), str(models) if stats else "-"])
    _run(REFERENCE, json.dumps(args))
    return [(np.load(tmp / f"ref{k}.npy"), np.load(tmp / f"ref{k}.npy.round.npy")) for k in range(len(jobs))]


KEEP = [[0, 2, 4, 6], [1, 3, 5, 8]]  # per sample, the frames a judge keeps


def _device_resize_matches_pil(full: np.ndarray, sampled: np.ndarray, small: np.ndarray, size: tuple[int, int]) -> None:
    """Sampling alone changes no pixel; the device's antialiased bicubic is within PSNR 40 dB of
    decoding everything and resizing each frame with PIL's bicubic (the reference path)."""
    from PIL import Image

    from tests.support.natural_media import psnr

    assert small.shape == (full.shape[0], 3, len(KEEP[0]), size[1], size[0])
    for b, frames in enumerate(KEEP):
        assert np.array_equal(sampled[b], full[b][:, frames])
        reference = np.stack([np.asarray(Image.fromarray(full[b, :, t].transpose(1, 2, 0)).resize(
            size, Image.Resampling.BICUBIC)) for t in frames])
        assert psnr(small[b].transpose(1, 2, 3, 0), reference) >= 40.0


def _close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == np.uint8 and got.shape == want.shape
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1  # batching may move a rounding


async def test_wan21_and_wan22_latents_each_go_to_their_decoder(models, tmp_path):
    cfg = LatentDecoderConfig.model_validate({"python": str(latents_python()), "batch_size": 2,
                                              "wan2_1": {"checkpoint": str(models / "wan21")},
                                              "wan2_2": {"checkpoint": str(models / "wan22")}})
    worker = LatentDecoderSupervisor(cfg)
    try:
        z16, z48 = _z(16, 3), _z(48, 3, seed=1)
        got16 = await worker.decode(z16)
        got48 = await worker.decode(z48)
        got48_image = await worker.decode(_z(48, 1, b=1, seed=2))
        # the judge's frames only, resized on the worker's device (cosmos_rl/payload.py: device_plan)
        small16 = await worker.decode(z16, frames=KEEP, size=(14, 11))
        sampled16 = await worker.decode(z16, frames=KEEP)
        with pytest.raises(LatentDecoderError, match="out of range for 9 decoded frames"):
            await worker.decode(z16, frames=[[0, 9], [1, 2]])
    finally:
        await worker.aclose()
    _device_resize_matches_pil(got16, sampled16, small16, (14, 11))
    assert got16.shape == (2, 3, 9, 32, 32)  # temporal x4 (+1), spatial x8
    assert got48.shape == (2, 3, 9, 64, 64)  # temporal x4 (+1), spatial x16
    assert got48_image.shape == (1, 3, 1, 64, 64)
    (truncated, rounded), (truncated48, _) = _references(models, [("wan21", z16, False), ("wan22", z48, False)],
                                                         tmp_path)
    _close(got16, truncated)
    _close(got48, truncated48)
    # truncated as cosmos-rl casts, not rounded: equal to the truncated reference, often one
    # below the rounded one
    assert (got16 == truncated).mean() > 0.99 and (rounded.astype(int) - got16 == 1).mean() > 0.2


async def test_load_mean_std_undoes_the_dataset_statistics_as_cosmos_rl(models, tmp_path):
    cfg = LatentDecoderConfig.model_validate({"python": str(latents_python()), "to_uint8": "round", "wan2_1": {
        "checkpoint": str(models / "wan21"), "load_mean_std": True,
        "images_mean_std": str(models / "images_mean_std.pt"), "video_mean_std": str(models / "video_mean_std.pt")}})
    worker = LatentDecoderSupervisor(cfg)
    try:
        video, image = _z(16, 3, seed=3), _z(16, 1, seed=4)
        got_video = await worker.decode(video)
        got_image = await worker.decode(image)
        worker.load_mean_std = False  # what POST /api/reward/latent_attr {"load_mean_std": false} does
        plain = await worker.decode(video)
        worker.load_mean_std = True
        with pytest.raises(LatentDecoderError, match="latents have 5 frames but the video statistics cover 4"):
            await worker.decode(_z(16, 5, b=1))
    finally:
        await worker.aclose()
    (_, video_ref), (_, image_ref), (_, plain_ref) = _references(
        models, [("wan21", video, True), ("wan21", image, True), ("wan21", video, False)], tmp_path)
    _close(got_video, video_ref)
    _close(got_image, image_ref)
    _close(plain, plain_ref)
    assert np.abs(plain.astype(int) - got_video.astype(int)).max() > 10  # the statistics did change the pixels


async def test_a_decoder_that_cannot_load_says_why_and_is_remembered(models, monkeypatch):
    cfg = LatentDecoderConfig.model_validate({"python": str(latents_python()), "retry_failed_load_s": 60,
                                              "wan2_1": {"checkpoint": str(models / "wan22")},  # 48 channels
                                              "wan2_2": {"checkpoint": "Wan-AI/Wan2.2-TI2V-5B-Diffusers",
                                                         "subfolder": "vae"}})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # inherited by the worker: no hub here
    worker = LatentDecoderSupervisor(cfg)
    try:
        with pytest.raises(LatentDecoderError, match="has z_dim 48, but it is configured as the wan2_1 decoder") as e1:
            await worker.decode(_z(16, 1, b=1))
        with pytest.raises(LatentDecoderError, match="cannot load AutoencoderKLWan 'Wan-AI/Wan2.2-TI2V-5B-Diffusers'") as e2:
            await worker.decode(_z(48, 1, b=1))
    finally:
        await worker.aclose()
    assert e1.value.stage == e2.value.stage == "load"
    assert "Wan2.1" in worker.load_failure(16) and "Wan2.2" in worker.load_failure(48)
    print(json.dumps({"wan2_2 offline": worker.load_failure(48)[:300]}))

