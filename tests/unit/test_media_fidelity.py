"""The fast media path against the reference (PIL bicubic per frame, as Qwen-VL resizes): the
same frame indices and sizes, pixels within PSNR 40 dB of the reference on natural-looking
content (a photo a package ships, gradients, rendered text), and the details say which path ran.
"""

from __future__ import annotations

import io

import av
import numpy as np
import pytest
from PIL import Image

from judge_gateway.media import (
    ImageEncoding,
    ImageMedia,
    VideoMedia,
    VideoSampling,
    encode_image,
    encode_video,
)
from judge_gateway.media import planes
from judge_gateway.media.encode import _frame_transform
from judge_gateway.media.resize import resize_rgb
from judge_gateway.media.wire import parse_data_url
from tests.support.natural_media import h264_clip, natural_frames, photo, psnr


def pil_bicubic(rgb: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    return np.asarray(Image.fromarray(rgb).resize(size, Image.Resampling.BICUBIC))


@pytest.mark.parametrize(("source", "target"), [
    ((1280, 720), (392, 224)),    # Wan2.1 720p to Cosmos-Reason1's frame budget (80 frames)
    ((1280, 704), (308, 168)),    # 121 frames at 704p
    ((832, 480), (392, 224)),     # Wan 480p
    ((1024, 1024), (775, 775)),   # an image to max_pixels 602,112 (bilinear range)
    ((1024, 1024), (504, 504)),   # ~2x
    ((2560, 1440), (392, 224)),   # halved twice
    ((640, 360), (800, 450)),     # an upscale (min_pixels)
])
def test_fast_resampler_is_within_40_db_of_pil_bicubic(source, target) -> None:
    for frame in natural_frames(2, *source):
        fast = resize_rgb(frame, *target, "fast")
        assert fast.shape == (target[1], target[0], 3) and fast.dtype == np.uint8
        assert psnr(fast, pil_bicubic(frame, target)) >= 40.0
    assert np.array_equal(resize_rgb(frame, *target, "pil"), pil_bicubic(frame, target))


def test_fast_resampler_on_the_shipped_photo_alone() -> None:
    rgb = np.asarray(photo())  # 512 x 600, a real photograph
    for size in ((300, 352), (200, 234), (128, 150)):
        assert psnr(resize_rgb(rgb, *size), pil_bicubic(rgb, size)) >= 40.0


def decode_mp4(data: bytes) -> tuple[np.ndarray, str]:
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        frames = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(stream)])
        return frames, stream.codec_context.name


def test_the_fast_video_path_sends_the_reference_frames_closer_than_x264_did() -> None:
    frames = natural_frames(17, 1280, 720)
    video = VideoMedia.from_array(frames, 16)
    per_frame = 7_225_344 // 80  # Cosmos-Reason1's budget for an 80-frame clip: 392x224 frames
    sampling = VideoSampling(max_frames=160, total_pixels=16 * per_frame)
    new = encode_video(video, sampling)
    old = encode_video(video, VideoSampling(max_frames=160, total_pixels=16 * per_frame, codec="libx264",
                                            resampler="pil"))
    # the same frames at the same size, whichever path
    assert new.frame_indices == old.frame_indices == list(range(16))
    assert (new.width, new.height) == (old.width, old.height) == (392, 224)
    d_new, d_old = new.details(), old.details()
    assert (d_new["codec"], d_new["resampler"], d_new["resized"]) == ("mjpeg", "fast", True)
    assert (d_old["codec"], d_old["resampler"]) == ("libx264", "pil")
    reference = np.stack([pil_bicubic(frames[i], (392, 224)) for i in new.frame_indices])
    got_new, codec = decode_mp4(parse_data_url(new.data_url)[1])
    got_old, _ = decode_mp4(parse_data_url(old.data_url)[1])
    assert codec == "mjpeg" and got_new.shape == reference.shape
    # what the judge decodes: within 38 dB of the reference frames, and closer than x264 crf 18 in
    # 4:2:0 (the old default) got with the reference resize itself
    assert psnr(got_new, reference) >= 38.0
    assert psnr(got_new, reference) > psnr(got_old, reference)


def test_image_paths_say_which_resampler_ran() -> None:
    rgb = natural_frames(1, 1024, 1024)[0]
    img = ImageMedia.from_array(rgb)
    fast = encode_image(img, ImageEncoding(max_pixels=602_112, format="png"))
    ref = encode_image(img, ImageEncoding(max_pixels=602_112, format="png", resampler="pil"))
    assert (fast.width, fast.height) == (ref.width, ref.height) == (775, 775)
    assert fast.details()["resampler"] == "fast" and ref.details()["resampler"] == "pil"
    png = lambda e: np.asarray(Image.open(io.BytesIO(parse_data_url(e.data_url)[1])).convert("RGB"))  # noqa: E731
    assert np.array_equal(png(ref), pil_bicubic(rgb, (775, 775)))  # PNG is lossless
    assert psnr(png(fast), png(ref)) >= 40.0
    same = encode_image(img, ImageEncoding(format="png"))
    assert same.details()["resampler"] is None and not same.resized


def test_a_container_is_resized_frame_by_frame_in_the_decode_loop() -> None:
    source = natural_frames(12, 320, 180)
    clip = encode_video(VideoMedia.from_array(source, 12),
                        VideoSampling(codec="libx264", crf=10, even_frames=False))
    video = VideoMedia.from_mp4(parse_data_url(clip.data_url)[1])
    seen: list[tuple[int, int]] = []
    streamed = [f for _, f in video.iter_frames([0, 0, 3, 6, 9])]  # each distinct frame once, in order
    assert len(streamed) == 4 and np.array_equal(np.stack(streamed), video.frames_array([0, 3, 6, 9]))
    sampling = VideoSampling(fps=4, max_pixels=160 * 90)
    enc = encode_video(video, sampling)
    assert enc.frame_indices == [0, 3, 6, 9] and (enc.width, enc.height) == (140, 84)
    # The resize runs on each frame as the decode loop hands it over (the transform), at the
    # source's size: the same frames as the array input gives.
    original = video.iter_frames

    def watched(indices, transform=None):
        for i, f in original(indices, transform):
            seen.append(f.shape[:2])
            yield i, f

    video.iter_frames = watched  # type: ignore[method-assign]
    again = encode_video(video, sampling)
    assert seen == [(84, 140)] * 4  # what the decode loop handed on: already the judge's size
    from_array = encode_video(VideoMedia.from_array(source, 12), sampling)
    assert again.frame_indices == from_array.frame_indices
    assert psnr(decode_mp4(parse_data_url(again.data_url)[1])[0],
                decode_mp4(parse_data_url(from_array.data_url)[1])[0]) >= 35.0  # x264 crf 10 in between


def _planar_conversions(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record, per kept container frame, whether media/planes.py converted it (True) or handed it
    back to libswscale's full-size RGB (False)."""
    seen: list[bool] = []
    original = planes.planes_to_rgb

    def watched(frame, w, h, resampler):  # type: ignore[no-untyped-def]
        out = original(frame, w, h, resampler)
        seen.append(out is not None)
        return out

    monkeypatch.setattr("judge_gateway.media.encode.planes_to_rgb", watched)
    return seen


def _reference(mp4: bytes, indices: list[int], size: tuple[int, int]) -> np.ndarray:
    """What the decode loop gave before: libswscale's full-size RGB, then PIL's bicubic."""
    frames, _ = decode_mp4(mp4)
    return np.stack([pil_bicubic(frames[i], size) for i in indices])


@pytest.mark.parametrize(("source", "target", "crf"), [
    ((1280, 720), (392, 224), 18),   # Wan2.1 720p to Cosmos-Reason1's 80-frame budget
    ((1280, 720), (392, 224), 28),   # a coarser encode
    ((1280, 704), (308, 168), 23),   # 121 frames at 704p
    ((832, 480), (392, 224), 28),    # Wan 480p
])
def test_container_frames_are_converted_at_the_judge_size_within_40_db(monkeypatch, source, target, crf) -> None:
    mp4 = h264_clip(natural_frames(17, *source), 16, crf)
    video = VideoMedia.from_mp4(mp4)
    seen = _planar_conversions(monkeypatch)
    indices = list(range(16))
    got = video.frames_array(indices, _frame_transform(*target, True, "fast"))
    assert seen == [True] * 16  # every kept frame: its planes resized, converted at the judge's size
    reference = _reference(mp4, indices, target)
    assert got.shape == reference.shape
    assert min(psnr(a, b) for a, b in zip(got, reference)) >= 40.0


@pytest.mark.parametrize(("pix_fmt", "params"), [
    ("yuv420p", "colormatrix=bt709"),   # BT.709, as HD encoders tag it
    ("yuvj420p", None),                 # full-range samples (JPEG range)
    ("yuv420p", "colormatrix=smpte170m"),
])
def test_the_planar_conversion_takes_the_matrix_libswscale_takes(monkeypatch, pix_fmt, params) -> None:
    mp4 = h264_clip(natural_frames(5, 640, 360), 8, 18, pix_fmt=pix_fmt, x264_params=params)
    seen = _planar_conversions(monkeypatch)
    got = VideoMedia.from_mp4(mp4).frames_array([0, 2, 4], _frame_transform(320, 180, True, "fast"))
    assert seen == [True] * 3
    assert min(psnr(a, b) for a, b in zip(got, _reference(mp4, [0, 2, 4], (320, 180)))) >= 40.0


def test_frames_the_planar_path_does_not_convert_take_libswscale(monkeypatch) -> None:
    """BT.2020 (no matrix here) and 4:4:4 (not 4:2:0) frames: libswscale's RGB, resized as before."""
    for pix_fmt, params in (("yuv420p", "colormatrix=bt2020nc"), ("yuv444p", None)):
        mp4 = h264_clip(natural_frames(3, 320, 180), 8, 18, pix_fmt=pix_fmt, x264_params=params)
        seen = _planar_conversions(monkeypatch)
        got = VideoMedia.from_mp4(mp4).frames_array([0, 1], _frame_transform(160, 90, True, "fast"))
        assert seen == [False, False], (pix_fmt, params)
        full, _ = decode_mp4(mp4)
        assert np.array_equal(got, np.stack([resize_rgb(full[i], 160, 90) for i in (0, 1)]))
