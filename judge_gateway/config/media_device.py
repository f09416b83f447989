"""[media.device]: the options of the torch worker that decodes and resizes judges' videos on the
device (device_video.DeviceVideoDecoder)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Strict


class DeviceVideoConfig(Strict):
    """[media.device]: encoded videos a VLM judge resizes are decoded and resized by a torch worker on
    the device (the latent decoder's worker process, latent_worker.py), which sends back only the
    judge's frames at the judge's size; the gateway's CPU then only encodes them."""

    python: str = Field(description="Interpreter with torch, and torchcodec (NVDEC on a CUDA device) or PyAV, "
                        "e.g. .venv-latents/bin/python.")
    device: str = Field("cuda", description="torch device the frames are resized on (and decoded on, by NVDEC, "
                        "where torchcodec is installed and the device is CUDA).")
    decoder: Literal["auto", "torchcodec", "pyav"] = Field(
        "auto", description="auto: torchcodec on a CUDA device when installed, else PyAV on the worker's CPU.")
    start_timeout_s: float = Field(120.0, gt=0, description="Worker start and torch's import.")
    timeout_s: float = Field(120.0, gt=0, description="One video's decode and resize.")
