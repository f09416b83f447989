"""[media.device]: a judge's encoded video decoded and resized by the torch worker (latent_worker.py's
decode_video, device_video.DeviceVideoDecoder) instead of on the gateway: the same frame indices and
size as the gateway's own path, pixels within 40 dB of the reference (libswscale RGB, PIL bicubic),
details that say which path ran, and the gateway's own path whenever the worker cannot. The worker
runs under the latents venv ($JG_LATENTS_VENV, else .venv-latents: torch and PyAV) on the CPU here;
on a GPU its decoder is torchcodec's NVDEC (bench/media.py --device-video measures it)."""

from __future__ import annotations

import io
import subprocess
import sys

import av
import numpy as np
import pytest
from PIL import Image

from judge_gateway.config import DeviceVideoConfig
from judge_gateway.device_video import DeviceVideoDecoder
from judge_gateway.media import MediaCache, VideoMedia, VideoSampling, encode_video
from judge_gateway.media.pool import MediaPool
from judge_gateway.media.sampling import _frame_size, sample_frame_indices
from tests.support.heads_env import latents_python
from tests.support.natural_media import h264_clip, natural_frames, psnr


def _torch_and_av(python) -> bool:  # type: ignore[no-untyped-def]
    try:
        path = python()
    except RuntimeError:
        return False
    done = subprocess.run([str(path), "-c", "import torch, av"], capture_output=True, check=False, timeout=120)
    return done.returncode == 0


SAMPLING = VideoSampling(max_frames=160, total_pixels=16 * 30_000)


def _reference(mp4: bytes, indices: list[int], size: tuple[int, int]) -> np.ndarray:
    with av.open(io.BytesIO(mp4)) as c:
        full = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    return np.stack([np.asarray(Image.fromarray(full[i]).resize(size, Image.Resampling.BICUBIC)) for i in indices])


@pytest.mark.skipif(not _torch_and_av(latents_python), reason="the latents venv (torch + PyAV) is not built")
async def test_the_device_worker_keeps_the_judges_frames_at_the_judges_size() -> None:
    mp4 = h264_clip(natural_frames(17, 640, 360), 16, 18)
    video = VideoMedia.from_mp4(mp4)
    idx, _ = sample_frame_indices(video.num_frames, video.fps, SAMPLING)
    w, h, resized = _frame_size(video.width, video.height, len(idx), SAMPLING)
    assert resized and idx == list(range(16))
    decoder = DeviceVideoDecoder(DeviceVideoConfig(python=str(latents_python()), device="cpu", decoder="pyav"))
    pool = MediaPool(1)
    try:
        clip = await decoder.presample(video, idx, (w, h))
        assert clip.decoded_by == "pyav on the CPU" and clip.resampled_by == "device"
        got = clip.frames_array(idx)
        assert got.shape == (16, h, w, 3)
        assert min(psnr(a, b) for a, b in zip(got, _reference(mp4, idx, (w, h)))) >= 40.0
        enc = await MediaCache(pool, decoder).video(video, SAMPLING)
    finally:
        await decoder.aclose()
        pool.shutdown()
    local = encode_video(video, SAMPLING)
    assert (enc.frame_indices, enc.width, enc.height) == (local.frame_indices, local.width, local.height)
    d = enc.details()
    assert (d["path"], d["resampler"], d["decoded_by"]) == ("device", "device", "pyav on the CPU")
    assert "device_fallback" not in d and local.details()["path"] == "gateway"


async def test_a_worker_that_cannot_decode_leaves_the_video_to_the_gateway() -> None:
    """An interpreter without torch: the worker starts (torch is imported at the first call) and
    fails the call; the video is encoded on the gateway, and the details say why."""
    mp4 = h264_clip(natural_frames(5, 320, 180), 8, 18)
    video = VideoMedia.from_mp4(mp4)
    sampling = VideoSampling(max_pixels=160 * 90)
    decoder = DeviceVideoDecoder(DeviceVideoConfig(python=sys.executable, device="cpu", timeout_s=60))
    pool = MediaPool(1)
    try:
        enc = await MediaCache(pool, decoder).video(video, sampling)
    finally:
        await decoder.aclose()
        pool.shutdown()
    d = enc.details()
    assert d["path"] == "gateway" and "torch" in d["device_fallback"]
    assert enc.data_url == encode_video(video, sampling).data_url  # the gateway's own frames, as without a device
