"""The gateway side of decoding a VLM judge's video on the device: the torch worker
(latent_worker.py's `decode_video`) decodes an encoded video (NVDEC through torchcodec on a CUDA
device, else PyAV), keeps the judge's frames and resizes them there (antialiased bicubic, as
Qwen-VL's processor resizes), and sends back only those: 80 frames at 392x224 (21 MB) instead of the
gateway decoding 81 at 720p. The result is a presampled `VideoMedia` (`resampled_by = "device"`),
which encode_video only encodes; it reports the source's frame count, size and rate, so the judge's
sampling finds the same frame indices and size as the local path.

The worker gets the container the gateway validated (format, codec, size and frame count checked)
and checks each frame it decodes against them. Anything the worker cannot do is a
`DeviceVideoError`, and media's cache encodes that video on the gateway instead (MediaCache,
`details.video.device_fallback`). Calls are serialised: the worker does one thing at a time.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os

import numpy as np

from .config import DeviceVideoConfig
from .latents import WORKER_SCRIPT
from .media import VideoMedia, current_limits
from .workers.framing import MAX_LATENT_PAYLOAD_BYTES
from .workers.supervisor import Launch, WorkerError, WorkerSupervisor

RESTART_BACKOFF_S = 0.5


class DeviceVideoError(WorkerError):
    """The device worker did not decode a video; the message says why."""


class DeviceVideoDecoder(WorkerSupervisor):
    """One torch worker process decoding and resizing judges' videos on `cfg.device`."""

    error_type = DeviceVideoError
    crash_why = "died with the video in flight; it restarts"

    def __init__(self, cfg: DeviceVideoConfig) -> None:
        super().__init__("device video worker", startup_timeout_s=cfg.start_timeout_s,
                         restart_backoff_s=RESTART_BACKOFF_S, retry_failed_load_s=0.0,
                         max_payload=MAX_LATENT_PAYLOAD_BYTES)
        self.cfg = cfg
        self._lock = asyncio.Lock()

    def launch(self) -> Launch:
        return Launch([self.cfg.python, str(WORKER_SCRIPT)], {**os.environ, "PYTHONUNBUFFERED": "1"},
                      stderr_level=logging.WARNING)

    async def presample(self, video: VideoMedia, indices: list[int], size: tuple[int, int]) -> VideoMedia:
        """The frames `indices` of an encoded video at `size` (width, height), decoded and resized on
        the device, as a presampled clip; a DeviceVideoError when the worker cannot."""
        data = video.source_bytes()
        if data is None or video.format not in ("mp4", "mov", "webm", "matroska", "avi"):
            raise DeviceVideoError("not an encoded video")
        header = {"op": "decode_video", "device": self.cfg.device, "decoder": self.cfg.decoder,
                  "container": video.format, "frames": sorted(set(indices)), "size": list(size),
                  "source": [video.num_frames, video.width, video.height],
                  "max_pixels": current_limits().max_image_pixels}
        async with self._lock:
            await self.wait_ready()  # starts the worker at the first call, or waits out a restart
            reply, out = await self.request(header, data, timeout=self.cfg.timeout_s)
        if not reply.get("ok"):
            raise DeviceVideoError(str(reply.get("error", "unknown worker error")))
        frames = np.load(io.BytesIO(out), allow_pickle=False)
        kept = header["frames"]
        if frames.shape != (len(kept), size[1], size[0], 3) or frames.dtype != np.uint8:
            raise DeviceVideoError(f"the worker sent {frames.dtype} {list(frames.shape)}, not {len(kept)} frames "
                                   f"of {size[0]}x{size[1]}")
        clip = VideoMedia.from_presampled(frames, video.fps, source_frames=video.num_frames,
                                          source_width=video.width, source_height=video.height, indices=kept,
                                          resampled_by="device")
        clip.decoded_by = str(reply.get("decoder", "device"))
        return clip
