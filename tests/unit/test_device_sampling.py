"""cosmos-rl latents: which frames the latent worker keeps and at what size (sampled and resized
on its device), and the clip the judges then get: the same frame indices and size as sampling
the full decode, only encoded, with details saying the device resized it."""

from __future__ import annotations

import numpy as np

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.media import VideoMedia, VideoSampling, encode_video
from judge_gateway.server.cosmos_rl.payload import device_plan

COSMOS = {"max_frames": 160, "total_pixels": 7_225_344}


def gateway() -> Gateway:
    def vlm(template: str, **extra) -> dict:
        return {"kind": "yes_no", "backend": "vlm", "template": template, **extra}

    return Gateway(validate_config({
        "backends": {"vlm": {"model": "m", "base_urls": ["http://127.0.0.1:9/v1"]}},
        "judges": {"cr1": vlm("cosmos_reason1@1", video=COSMOS),
                   "cr1_again": vlm("cosmos_reason1@1", video=COSMOS),
                   "eight_frames": vlm("cosmos_reason1@1", video={"num_frames": 8}),
                   "image_only": vlm("image_quality@1"),
                   "first_frame": vlm("image_quality@1", options={"video_first_frame": True})}}))


async def test_one_sampling_among_the_video_judges_is_done_on_the_device() -> None:
    gw = gateway()
    try:
        plan = device_plan(gw, ["cr1", "cr1_again", "image_only"], [16.0, 16.0], 81, 1280, 720)
        assert plan is not None and plan.size == (392, 224)  # Cosmos-Reason1's frame budget for 80 frames
        assert plan.frames == [list(range(80))] * 2 and (plan.source_frames, plan.source_width) == (81, 1280)
        # two samplings, a first-frame judge, or nothing to drop: the full clip
        assert device_plan(gw, ["cr1", "eight_frames"], [16.0], 81, 1280, 720) is None
        assert device_plan(gw, ["cr1", "first_frame"], [16.0], 81, 1280, 720) is None
        assert device_plan(gw, ["cr1"], [16.0], 8, 64, 48) is None
        # rates that keep different counts cannot share one tensor
        assert device_plan(gw, ["eight_frames"], [16.0, 16.0], 81, 1280, 720) is not None
    finally:
        await gw.aclose()


def test_a_presampled_clip_encodes_the_same_frames_at_the_same_size() -> None:
    sampling = VideoSampling(max_frames=160, total_pixels=16 * 120 * 90)
    rng = np.random.default_rng(0)
    full = rng.integers(0, 256, (17, 180, 320, 3), dtype=np.uint8)
    ordinary = encode_video(VideoMedia.from_array(full, 16), sampling)
    n, w, h = len(ordinary.frame_indices), ordinary.width, ordinary.height
    assert (n, ordinary.resized) == (16, True)
    kept = rng.integers(0, 256, (n, h, w, 3), dtype=np.uint8)  # what the worker would send
    presampled = VideoMedia.from_presampled(kept, 16.0, source_frames=17, source_width=320, source_height=180,
                                            indices=ordinary.frame_indices, resampled_by="device")
    assert (presampled.num_frames, presampled.width, presampled.height) == (17, 320, 180)
    enc = encode_video(presampled, sampling)
    d, d0 = enc.details(), ordinary.details()
    for key in ("frame_indices", "width", "height", "fps", "source_frames", "source_width", "source_height"):
        assert d[key] == d0[key], key
    assert (d["resampler"], d0["resampler"]) == ("device", "fast")
    other = VideoSampling(num_frames=8)
    try:
        encode_video(presampled, other)
    except ValueError as err:  # MediaError: those frames were not kept
        assert "were not kept" in str(err) or "asks for" in str(err)
    else:
        raise AssertionError("a presampled clip must refuse another sampling")
