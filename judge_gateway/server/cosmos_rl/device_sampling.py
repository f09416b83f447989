"""Which frames of decoded latents to keep, and at what size: the latent worker samples and resizes
them on its device right after the VAE decode, so an 81-frame 720p clip (224 MB of pixels)
crosses the pipe and the gateway's memory as the ~21 MB the judge sees.

Only when every judge of the request that looks at the video is a VLM judge sampling it the same
way (one `VideoSampling`, the video slot of its template): a head, a first-frame fallback or two
samplings need the full clip, which the worker then sends as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...gateway import Gateway
from ...judges.vlm import VLMJudge
from ...media import VideoSampling, sample_frame_indices
from ...media.sampling import _frame_size

# details.video.resampler of frames resized by the latent worker
DEVICE_RESAMPLER = "device"


@dataclass(frozen=True)
class DevicePlan:
    """Per sample, the source frames to keep; the size to resize them to (None: as decoded)."""

    frames: list[list[int]]
    size: tuple[int, int] | None
    source_frames: int
    source_width: int
    source_height: int


def device_plan(gateway: Gateway, judges: list[str], fps: list[float], frames: int, width: int,
                height: int) -> DevicePlan | None:
    """The plan for B decoded clips of `frames` x `height` x `width` at `fps` (one rate per sample)
    scored by `judges`, or None when the full clips are needed."""
    samplings: set[VideoSampling] = set()
    for name in judges:
        judge = gateway.judges[name]
        if "video" not in judge.media:
            continue  # this judge does not look at videos (its cells are bad_input either way)
        if not isinstance(judge, VLMJudge) or "video" not in judge.template.media_slots or judge.video_first_frame:
            return None  # a head, or a VLM judge taking the first frame: the full clip
        samplings.add(judge.video_sampling)
    if len(samplings) != 1:
        return None
    (sampling,) = samplings
    kept = [sample_frame_indices(frames, rate, sampling)[0] for rate in fps]
    if len({len(k) for k in kept}) != 1:
        return None  # rates that keep different counts: one tensor cannot hold them
    w, h, resized = _frame_size(width, height, len(kept[0]), sampling)
    if kept[0] == list(range(frames)) and not resized:
        return None  # every frame at its size: nothing to save
    return DevicePlan(frames=kept, size=(w, h) if resized else None, source_frames=frames,
                      source_width=width, source_height=height)
