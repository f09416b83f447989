"""Unit tests for judge_gateway.media: input forms, validation errors, encoding, sampling, cache."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from fractions import Fraction

import av
import numpy as np
import pytest
from PIL import Image
from pydantic import BaseModel, ValidationError

from judge_gateway import media
from judge_gateway.media import cache as media_cache
from judge_gateway.media import limits as media_limits
from judge_gateway.media import (
    EncodedImage,
    ImageEncoding,
    ImageMedia,
    MediaCache,
    MediaError,
    VideoMedia,
    VideoSampling,
    encode_image,
    encode_video,
    sample_frame_indices,
)

# ---- helpers ---------------------------------------------------------------------------------


def gradient(h: int = 48, w: int = 64, seed: int = 0) -> np.ndarray:
    """A smooth RGB image (codecs keep smooth content close; noise would not be)."""
    y, x = np.mgrid[0:h, 0:w]
    r = (x * 255 // max(w - 1, 1)).astype(np.uint8)
    g = (y * 255 // max(h - 1, 1)).astype(np.uint8)
    b = np.full((h, w), (seed * 37) % 256, np.uint8)
    return np.stack([r, g, b], axis=-1)


def encode_pil(arr: np.ndarray, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format=fmt, **kw)
    return buf.getvalue()


def png(arr: np.ndarray) -> bytes:
    return encode_pil(arr, "PNG")


def jpeg(arr: np.ndarray, quality: int = 95) -> bytes:
    return encode_pil(arr, "JPEG", quality=quality)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{b64(data)}"


def video_frames(t: int = 8, h: int = 48, w: int = 64) -> np.ndarray:
    """[T,H,W,3] frames whose mean brightness rises with the index, so frames are tellable."""
    base = gradient(h, w).astype(np.int32) // 2
    return np.stack([np.clip(base + 12 * i, 0, 255).astype(np.uint8) for i in range(t)])


def make_video_bytes(
    frames: np.ndarray, fps: int, codec: str = "libx264", fmt: str = "mp4"
) -> bytes:
    """Encode with PyAV directly, independently of encode_video."""
    buf = io.BytesIO()
    with av.open(buf, mode="w", format=fmt) as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
        if codec == "libx264":
            stream.options = {"crf": "10"}
        for i, f in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(f, format="rgb24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return buf.getvalue()


def decode_data_url(url: str) -> tuple[str, bytes]:
    head, payload = url.split(",", 1)
    return head, base64.b64decode(payload)


def decode_video(data: bytes) -> tuple[np.ndarray, Fraction, str]:
    with av.open(io.BytesIO(data)) as c:
        s = c.streams.video[0]
        frames = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(s)])
        return frames, s.average_rate, s.codec_context.name


def mean_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int32) - b.astype(np.int32)).mean())


# ---- ImageMedia: input forms -------------------------------------------------------------------

ARR = gradient()
PNG = png(ARR)


@pytest.mark.parametrize(
    "value",
    [
        PNG,
        bytearray(PNG),
        b64(PNG),
        base64.urlsafe_b64encode(PNG).decode().rstrip("="),
        data_url(PNG),
        "  " + data_url(PNG) + "\n",
        ARR,
        Image.fromarray(ARR),
        {"data": b64(ARR.tobytes()), "shape": [48, 64, 3], "dtype": "uint8"},
        {"data": b64(ARR.tobytes()), "shape": [48, 64, 3]},
    ],
    ids=[
        "bytes",
        "bytearray",
        "b64",
        "urlsafe-unpadded",
        "data-url",
        "data-url-ws",
        "array",
        "pil",
        "json-array",
        "json-array-no-dtype",
    ],
)
def test_image_forms_round_trip_exact(value: object) -> None:
    img = ImageMedia.validate(value)
    assert (img.width, img.height) == (64, 48)
    out = img.to_array()
    assert out.dtype == np.uint8 and out.shape == (48, 64, 3)
    assert np.array_equal(out, ARR)
    assert np.array_equal(np.asarray(img.to_pil()), ARR)
    assert img.to_pil().mode == "RGB"


def test_image_format_and_source_bytes() -> None:
    assert ImageMedia.validate(PNG).format == "png"
    assert ImageMedia.validate(PNG).source_bytes() == PNG
    assert ImageMedia.validate(ARR).format == "array"
    assert ImageMedia.validate(ARR).source_bytes() is None
    assert ImageMedia.validate(Image.fromarray(ARR)).format == "pil"
    assert ImageMedia.validate(jpeg(ARR)).format == "jpeg"


def test_jpeg_round_trip_is_close() -> None:
    img = ImageMedia.validate(data_url(jpeg(ARR), "image/jpeg"))
    assert img.format == "jpeg"
    assert mean_abs_diff(img.to_array(), ARR) < 3.0


def test_webp_lossless_round_trip() -> None:
    img = ImageMedia.validate(encode_pil(ARR, "WEBP", lossless=True))
    assert img.format == "webp"
    assert np.array_equal(img.to_array(), ARR)


def test_gray_and_rgba_arrays_become_rgb() -> None:
    gray = ARR[:, :, 0]
    g = ImageMedia.validate(gray).to_array()
    assert g.shape == (48, 64, 3) and np.array_equal(g[:, :, 2], gray)
    rgba = np.concatenate([ARR, np.full((48, 64, 1), 7, np.uint8)], axis=2)
    assert np.array_equal(ImageMedia.validate(rgba).to_array(), ARR)


def test_existing_image_media_is_returned_as_is() -> None:
    img = ImageMedia.validate(PNG)
    assert ImageMedia.validate(img) is img


def test_array_input_is_snapshotted() -> None:
    arr = ARR.copy()
    img = ImageMedia.validate(arr)
    arr[:] = 0  # the caller reuses its buffer
    assert np.array_equal(img.to_array(), ARR)
    assert not img.to_array().flags.writeable


def test_to_pil_returns_a_fresh_image() -> None:
    img = ImageMedia.validate(PNG)
    pil = img.to_pil()
    pil.putpixel((0, 0), (1, 2, 3))
    assert tuple(img.to_array()[0, 0]) == tuple(ARR[0, 0])


def test_sha256_keys_content() -> None:
    assert ImageMedia.validate(PNG).sha256 == ImageMedia.validate(b64(PNG)).sha256
    assert ImageMedia.validate(PNG).sha256 != ImageMedia.validate(png(gradient(seed=1))).sha256
    assert ImageMedia.validate(ARR).sha256 == ImageMedia.validate(ARR.copy()).sha256
    # Same bytes, different shape: different image, different key.
    flat = np.zeros((2, 6, 3), np.uint8)
    assert ImageMedia.validate(flat).sha256 != ImageMedia.validate(flat.reshape(6, 2, 3)).sha256


def test_validation_does_not_decode_pixels() -> None:
    img = ImageMedia.validate(PNG)
    assert img._array is None  # decoded lazily, on first use
    img.to_array()
    assert img._array is not None


# ---- ImageMedia: bad inputs ----------------------------------------------------------------


def _corrupt_png_crc(data: bytes) -> bytes:
    # Flip a byte inside the IDAT payload: header still parses, CRC check must catch it.
    i = data.index(b"IDAT") + 8
    return data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            np.random.default_rng(0).integers(0, 256, 500, dtype=np.uint8).tobytes(),
            "unknown image format",
        ),
        (PNG[: len(PNG) // 2], "truncated"),
        (PNG[:30], "PNG"),
        (_corrupt_png_crc(PNG), "corrupt"),
        (jpeg(ARR)[:-200], "truncated JPEG"),
        (b"", "empty"),
        ("", "empty"),
        ("https://example.com/cat.png", "send the bytes"),
        ("http://example.com/cat.png", "URL"),
        ("/data/images/cat.png", "file path"),
        ("./cat.jpg", "file path"),
        ("/data/images/cat", "file path"),  # valid base64 characters, still a path
        ("data:image/png,rawbytes", "malformed data URL"),
        ("data:image/png;base64,%%%%", "base64"),
        ("not base64 at all!", "neither a data: URL nor base64"),
        (encode_pil(ARR, "GIF"), "unsupported image format 'gif'"),
        (ARR.astype(np.float32) / 255, "uint8"),
        (np.zeros((4, 4, 2), np.uint8), "shape"),
        (np.zeros((2, 4, 4, 3), np.uint8), "shape"),
        (np.zeros((0, 4, 3), np.uint8), "zero side"),
        ({"data": b64(b"\x00" * 10), "shape": [2, 2, 3]}, "needs 12"),
        ({"data": b64(b"\x00" * 12), "shape": [2, 2, 3], "dtype": "float32"}, "uint8"),
        ({"data": b64(b"\x00" * 12), "shape": [2, 2, 3], "url": "x"}, "unknown keys"),
        ({"shape": [2, 2, 3]}, "needs 'data'"),
        ({"data": b64(b"\x00" * 12), "shape": "2x2x3"}, "shape must be a list"),
        (12345, "unsupported image input of type int"),
    ],
    ids=[
        "random-bytes",
        "truncated-png",
        "png-header-only",
        "png-bad-crc",
        "truncated-jpeg",
        "empty-bytes",
        "empty-str",
        "https-url",
        "http-url",
        "abs-path",
        "rel-path",
        "path-no-ext",
        "data-url-not-b64",
        "data-url-bad-b64",
        "garbage-str",
        "gif",
        "float-array",
        "two-channels",
        "4d-array",
        "zero-side",
        "json-wrong-length",
        "json-wrong-dtype",
        "json-extra-key",
        "json-no-data",
        "json-bad-shape",
        "int",
    ],
)
def test_bad_images_raise_clear_value_errors(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        ImageMedia.validate(value)
    assert isinstance(info.value, MediaError)


def test_image_pixel_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(media_limits, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(MediaError, match="above the limit of 1000"):
        ImageMedia.validate(PNG)
    with pytest.raises(MediaError, match="above the limit"):
        ImageMedia.validate(ARR)
    ImageMedia.validate(gradient(10, 10))  # 100 pixels: fine


def test_video_bytes_are_refused_as_an_image() -> None:
    with pytest.raises(MediaError, match="send it as a video"):
        ImageMedia.validate(make_video_bytes(video_frames(2), 8))


# ---- pydantic ----------------------------------------------------------------------------------


class Sample(BaseModel):
    image: ImageMedia
    video: VideoMedia | None = None


def test_pydantic_validates_json_forms() -> None:
    frames = video_frames(4)
    payload = {
        "image": data_url(PNG),
        "video": {
            "array": {"data": b64(frames.tobytes()), "shape": list(frames.shape), "dtype": "uint8"},
            "fps": 12,
        },
    }
    s = Sample.model_validate_json(json.dumps(payload))
    assert isinstance(s.image, ImageMedia) and np.array_equal(s.image.to_array(), ARR)
    assert isinstance(s.video, VideoMedia) and s.video.num_frames == 4 and s.video.fps == 12.0
    assert np.array_equal(s.video.frames_array(), frames)


def test_pydantic_validates_python_objects() -> None:
    s = Sample(image=ARR, video=VideoMedia.from_array(video_frames(2), 8))
    assert s.image.format == "array" and s.video is not None and s.video.num_frames == 2


def test_pydantic_bad_input_is_a_validation_error_with_location() -> None:
    with pytest.raises(ValidationError) as info:
        Sample.model_validate_json(json.dumps({"image": "https://x.org/a.png"}))
    err = info.value.errors()[0]
    assert err["loc"] == ("image",)
    assert "send the bytes" in err["msg"]
    with pytest.raises(ValidationError) as info:
        Sample.model_validate_json(json.dumps({"image": b64(PNG), "video": {"frames": [b64(PNG)]}}))
    err = info.value.errors()[0]
    assert err["loc"] == ("video",) and "needs 'fps'" in err["msg"]


def test_pydantic_json_dump_round_trips() -> None:
    s = Sample(image=PNG, video={"frames": [PNG, png(gradient(seed=2))], "fps": 4})
    again = Sample.model_validate_json(s.model_dump_json())
    assert again.image.sha256 == s.image.sha256
    assert again.video is not None and again.video.num_frames == 2 and again.video.fps == 4.0
    mp4 = make_video_bytes(video_frames(4), fps=8)
    vs = Sample(image=PNG, video={"mp4": mp4})
    dumped = json.loads(vs.model_dump_json())
    assert dumped["video"]["mp4"].startswith("data:video/mp4;base64,")
    assert dumped["video"]["fps"] == 8.0
    again_v = Sample.model_validate(dumped).video
    assert again_v is not None and again_v.source_bytes() == mp4
    arr_sample = Sample(image=ARR)
    arr_again = Sample.model_validate_json(arr_sample.model_dump_json())
    assert np.array_equal(arr_again.image.to_array(), ARR)


def test_json_schema_describes_the_forms() -> None:
    schema = Sample.model_json_schema()
    defs = schema["$defs"]
    assert schema["properties"]["image"] == {"$ref": "#/$defs/ImageMedia"}
    image = defs["ImageMedia"]
    titles = {form["title"] for form in image["anyOf"]}
    assert titles == {"data URL", "base64", "uint8 array"}
    assert "send the bytes" in image["description"]
    video = defs["VideoMedia"]
    video_titles = {form["title"] for form in video["anyOf"]}
    assert {"frames", "mp4", "array"} <= video_titles
    frames_form = next(f for f in video["anyOf"] if f["title"] == "frames")
    assert frames_form["required"] == ["frames", "fps"]
    json.dumps(schema)  # serialisable


# ---- encode_image --------------------------------------------------------------------------


def test_png_passthrough_sends_the_original_bytes() -> None:
    enc = encode_image(ImageMedia.validate(PNG), ImageEncoding())
    head, data = decode_data_url(enc.data_url)
    assert head == "data:image/png;base64"
    assert data == PNG
    assert enc.passthrough and not enc.resized and enc.num_bytes == len(PNG)


def test_jpeg_passthrough_and_png_to_jpeg_reencode() -> None:
    jp = jpeg(ARR)
    enc = encode_image(ImageMedia.validate(jp), ImageEncoding(format="jpeg"))
    assert decode_data_url(enc.data_url)[1] == jp and enc.passthrough
    enc2 = encode_image(ImageMedia.validate(PNG), ImageEncoding(format="jpeg", jpeg_quality=90))
    head, data = decode_data_url(enc2.data_url)
    assert head == "data:image/jpeg;base64" and data[:3] == b"\xff\xd8\xff"
    assert not enc2.passthrough
    assert mean_abs_diff(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")), ARR) < 3.0


def test_array_encodes_to_exact_png() -> None:
    enc = encode_image(ImageMedia.validate(ARR), ImageEncoding())
    _, data = decode_data_url(enc.data_url)
    assert not enc.passthrough and enc.format == "png"
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(data))), ARR)


def test_resize_respects_max_pixels_and_aspect() -> None:
    big = gradient(300, 400)
    enc = encode_image(ImageMedia.validate(png(big)), ImageEncoding(max_pixels=30_000))
    _, data = decode_data_url(enc.data_url)
    w, h = Image.open(io.BytesIO(data)).size
    assert (w, h) == (enc.width, enc.height)
    assert w * h <= 30_000 and w * h > 0.9 * 30_000
    assert abs(w / h - 4 / 3) < 0.02
    assert enc.resized and not enc.passthrough
    d = enc.details()
    assert d["source_width"] == 400 and d["width"] == w and d["resized"] is True
    json.dumps(d)


def test_min_pixels_upscales_and_inside_range_is_untouched() -> None:
    small = ImageMedia.validate(png(gradient(10, 20)))
    up = encode_image(small, ImageEncoding(min_pixels=800))
    assert up.width * up.height >= 800 and up.resized
    same = encode_image(small, ImageEncoding(min_pixels=100, max_pixels=1000))
    assert not same.resized and same.passthrough


def test_image_encoding_is_hashable_and_validated() -> None:
    assert hash(ImageEncoding(max_pixels=10)) == hash(ImageEncoding(max_pixels=10))
    assert len({ImageEncoding(), ImageEncoding(), ImageEncoding(format="jpeg")}) == 2
    with pytest.raises(ValueError, match="min_pixels"):
        ImageEncoding(min_pixels=100, max_pixels=10)
    with pytest.raises(ValueError, match="format"):
        ImageEncoding(format="gif")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="jpeg_quality"):
        ImageEncoding(jpeg_quality=0)


# ---- sample_frame_indices ------------------------------------------------------------------


def test_sampling_keeps_all_frames_by_default() -> None:
    idx, fps = sample_frame_indices(48, 24.0, VideoSampling())
    assert idx == list(range(48)) and fps == 24.0


def test_sampling_fps_stride() -> None:
    idx, fps = sample_frame_indices(48, 24.0, VideoSampling(fps=8.0))
    assert idx == list(range(0, 48, 3)) and fps == pytest.approx(8.0)


def test_sampling_fps_never_upsamples() -> None:
    idx, fps = sample_frame_indices(20, 8.0, VideoSampling(fps=30.0))
    assert idx == list(range(20)) and fps == 8.0


def test_sampling_fractional_stride_reports_honest_fps() -> None:
    idx, fps = sample_frame_indices(60, 30.0, VideoSampling(fps=8.0))  # stride 3.75
    steps = np.diff(idx)
    assert set(steps.tolist()) <= {3, 4}
    assert fps == pytest.approx(30.0 / ((idx[-1] - idx[0]) / (len(idx) - 1)))
    assert 7.5 < fps < 8.5


def test_sampling_num_frames_uniform_over_clip() -> None:
    idx, fps = sample_frame_indices(100, 24.0, VideoSampling(num_frames=12))
    assert len(idx) == 12 and idx[0] == 0 and idx[-1] == 99
    assert fps == pytest.approx(24.0 * 11 / 99)
    idx, _ = sample_frame_indices(5, 24.0, VideoSampling(num_frames=50))
    assert idx == [0, 1, 2, 3]  # never invents frames; 5 is odd -> 4


def test_sampling_max_frames_stride_cosmos_rule() -> None:
    idx, fps = sample_frame_indices(160, 30.0, VideoSampling())
    assert len(idx) == 160 and fps == 30.0
    idx, fps = sample_frame_indices(161, 30.0, VideoSampling())
    assert idx == list(range(0, 161, 2))[:-1]  # stride 2 gives 81, odd -> 80
    assert fps == pytest.approx(15.0)
    idx, fps = sample_frame_indices(1000, 24.0, VideoSampling(max_frames=160))
    assert len(idx) <= 160 and np.all(np.diff(idx) == 7) and fps == pytest.approx(24.0 / 7)


def test_sampling_odd_count_becomes_even() -> None:
    idx, _ = sample_frame_indices(7, 24.0, VideoSampling())
    assert idx == list(range(6))
    idx, _ = sample_frame_indices(7, 24.0, VideoSampling(even_frames=False))
    assert idx == list(range(7))


def test_sampling_one_frame_is_duplicated() -> None:
    idx, fps = sample_frame_indices(1, 24.0, VideoSampling())
    assert idx == [0, 0] and fps == 24.0
    idx, _ = sample_frame_indices(1, 24.0, VideoSampling(even_frames=False))
    assert idx == [0]


def test_sampling_rejects_bad_arguments() -> None:
    with pytest.raises(MediaError, match="0-frame"):
        sample_frame_indices(0, 24.0, VideoSampling())
    with pytest.raises(MediaError, match="source fps"):
        sample_frame_indices(10, 0.0, VideoSampling())
    with pytest.raises(ValueError, match="fps"):
        VideoSampling(fps=-1.0)
    with pytest.raises(ValueError, match="num_frames"):
        VideoSampling(num_frames=0)
    with pytest.raises(ValueError, match="size_multiple"):
        VideoSampling(size_multiple=3)


# ---- VideoMedia ----------------------------------------------------------------------------


def test_video_from_mp4_reads_fps_and_frame_count() -> None:
    frames = video_frames(10)
    data = make_video_bytes(frames, fps=12)
    for value in (data, b64(data), data_url(data, "video/mp4"), {"mp4": b64(data)}):
        v = VideoMedia.validate(value)
        assert (v.num_frames, v.fps, v.width, v.height) == (10, 12.0, 64, 48)
        assert v.format == "mp4" and v.codec == "h264"
        assert v.duration_s == pytest.approx(10 / 12)
    decoded = VideoMedia.from_mp4(data).frames_array()
    assert decoded.shape == (10, 48, 64, 3)
    assert mean_abs_diff(decoded, frames) < 4.0


def test_video_mp4_fps_override() -> None:
    v = VideoMedia.validate({"mp4": make_video_bytes(video_frames(4), fps=12), "fps": 16})
    assert v.fps == 16.0


def test_video_from_webm_container() -> None:
    frames = video_frames(6)
    try:
        data = make_video_bytes(frames, fps=10, codec="libvpx", fmt="webm")
    except Exception as e:  # pragma: no cover - depends on the local FFmpeg build
        pytest.skip(f"no libvpx encoder here: {e}")
    v = VideoMedia.from_mp4(data)
    assert v.format == "webm" and v.num_frames == 6 and v.fps == 10.0
    assert mean_abs_diff(v.frames_array([5]), frames[5:6]) < 8.0


def test_video_frames_array_decodes_what_is_asked_and_keeps_nothing() -> None:
    """Decoded frames are released as soon as they are handed out: the video keeps none (a
    second sampling decodes again), and the decode loop hands frames out in source order."""
    frames = video_frames(12)
    v = VideoMedia.from_mp4(make_video_bytes(frames, fps=24))
    sub = v.frames_array([6, 2])
    assert sub.shape == (2, 48, 64, 3)
    # Frame brightness rises with the index: order of the result follows the request.
    assert sub[0].mean() > sub[1].mean()
    assert mean_abs_diff(sub, frames[[6, 2]]) < 4.0
    assert not [k for k, x in vars(v).items() if isinstance(x, (np.ndarray, dict, list))], vars(v)
    assert [i for i, _ in v.iter_frames([6, 2, 6])] == [2, 6]
    again = v.frames_array([2, 2, 6])
    assert np.array_equal(again[0], again[1]) and np.array_equal(again[0], sub[1])
    shrunk = v.frames_array([6, 2], transform=lambda f: f[::2, ::2].copy())  # applied per frame as it arrives
    assert shrunk.shape == (2, 24, 32, 3) and np.array_equal(shrunk, sub[:, ::2, ::2])
    with pytest.raises(MediaError, match="out of range"):
        v.frames_array([12])


def test_video_from_frames_and_array_agree() -> None:
    frames = video_frames(6)
    a = VideoMedia.from_array(frames, 8)
    f = VideoMedia.from_frames([png(x) for x in frames], 8)
    d = VideoMedia.validate({"frames": [b64(png(x)) for x in frames], "fps": 8})
    for v in (a, f, d):
        assert (v.num_frames, v.width, v.height, v.fps) == (6, 64, 48, 8.0)
        assert np.array_equal(v.frames_array([0, 5]), frames[[0, 5]])
    assert f.sha256 == d.sha256
    assert a.format == "array" and f.format == "frames"


def test_video_sha256_includes_fps() -> None:
    frames = video_frames(4)
    assert VideoMedia.from_array(frames, 8).sha256 == VideoMedia.from_array(frames, 8).sha256
    assert VideoMedia.from_array(frames, 8).sha256 != VideoMedia.from_array(frames, 16).sha256


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"frames": [PNG, PNG]}, "needs 'fps'"),
        ({"frames": [PNG], "fps": 0}, "fps must be"),
        ({"frames": [PNG], "fps": float("nan")}, "fps must be"),
        ({"frames": [PNG], "fps": True}, "fps must be"),
        ({"frames": [], "fps": 8}, "no frames"),
        ({"frames": [PNG, png(gradient(10, 10))], "fps": 8}, "same size"),
        ({"frames": [PNG, b"junk"], "fps": 8}, "video frame 1"),
        ({"frames": [PNG], "mp4": b64(PNG), "fps": 8}, "exactly one"),
        ({"fps": 8}, "exactly one"),
        ({"frames": [PNG], "fps": 8, "url": "x"}, "unknown keys"),
        ({"array": np.zeros((2, 4, 4), np.uint8), "fps": 8}, r"\[T, H, W, 3\]"),
        ({"array": np.zeros((2, 4, 4, 3), np.float32), "fps": 8}, "uint8"),
        ({"mp4": b"\x00" * 1000}, "video container refused: the data looks like unknown data"),
        ({"mp4": ""}, "empty"),
        ({"mp4": "https://example.com/v.mp4"}, "send the bytes"),
        ({"mp4": "/videos/clip"}, "file path"),
        ("clip.mp4", "file path"),
        ({"mp4": PNG}, "still image"),
        (np.zeros((2, 4, 4, 3), np.uint8), "no frame rate"),
        (42, "unsupported video input"),
    ],
    ids=[
        "frames-no-fps",
        "fps-zero",
        "fps-nan",
        "fps-bool",
        "no-frames",
        "mixed-sizes",
        "bad-frame",
        "two-sources",
        "no-source",
        "extra-key",
        "array-3d",
        "array-float",
        "mp4-garbage",
        "mp4-empty",
        "mp4-url",
        "mp4-path",
        "bare-path",
        "mp4-is-png",
        "bare-array",
        "int",
    ],
)
def test_bad_videos_raise_clear_value_errors(value: object, message: str) -> None:
    with pytest.raises(MediaError, match=message):
        VideoMedia.validate(value)


def test_truncated_mp4_is_rejected() -> None:
    data = make_video_bytes(video_frames(8), fps=8)
    with pytest.raises(MediaError, match="video"):
        VideoMedia.from_mp4(data[: len(data) // 3])


def test_video_frame_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(media_limits, "MAX_VIDEO_FRAMES", 5)
    with pytest.raises(MediaError, match="above the limit of 5"):
        VideoMedia.from_array(video_frames(6), 8)
    with pytest.raises(MediaError, match="more than 5"):
        VideoMedia.from_frames([PNG] * 6, 8)
    with pytest.raises(MediaError, match="above the limit of 5"):
        VideoMedia.from_mp4(make_video_bytes(video_frames(6), 8))


# ---- encode_video ----------------------------------------------------------------------------


def test_encode_video_round_trip() -> None:
    frames = video_frames(24)
    enc = encode_video(VideoMedia.from_array(frames, 24), VideoSampling(fps=8))
    head, data = decode_data_url(enc.data_url)
    assert head == "data:video/mp4;base64"
    decoded, rate, codec = decode_video(data)
    assert enc.frame_indices == [0, 3, 6, 9, 12, 15, 18, 21]
    assert decoded.shape == (8, 48, 64, 3)
    assert float(rate) == pytest.approx(8.0) and enc.fps == pytest.approx(8.0)
    assert (enc.source_fps, enc.source_frames) == (24.0, 24)
    # the default codec: Motion JPEG frames by libjpeg-turbo
    assert codec == "mjpeg" and enc.codec == "mjpeg"
    assert mean_abs_diff(decoded, frames[enc.frame_indices]) < 2.0
    assert enc.num_bytes == len(data)
    d = enc.details()
    assert d["num_frames"] == 8 and d["frame_step"] == 3.0 and d["codec"] == "mjpeg"
    assert d["encoder_options"] == {"quality": 95, "subsampling": "4:4:4"}
    assert d["resampler"] is None and not d["resized"]
    json.dumps(d)


def test_encode_video_x264_codec() -> None:
    frames = video_frames(24)
    enc = encode_video(VideoMedia.from_array(frames, 24), VideoSampling(fps=8, codec="libx264"))
    decoded, rate, codec = decode_video(decode_data_url(enc.data_url)[1])
    assert codec == "h264" and enc.codec == "libx264" and decoded.shape == (8, 48, 64, 3)
    assert float(rate) == pytest.approx(8.0)
    assert mean_abs_diff(decoded, frames[enc.frame_indices]) < 4.0
    assert enc.details()["encoder_options"] == {"crf": 18, "preset": media.X264_PRESET}


def test_encode_video_resizes_to_the_pixel_budgets() -> None:
    frames = video_frames(4, 224, 448)
    v = VideoMedia.from_array(frames, 4)
    enc = encode_video(v, VideoSampling(total_pixels=4 * 28 * 28 * 32))  # 32 tokens a frame
    assert enc.resized and enc.width * enc.height <= 28 * 28 * 32
    assert enc.width % 28 == 0 and enc.height % 28 == 0
    assert abs(enc.width / enc.height - 2.0) < 0.3
    decoded, _, _ = decode_video(decode_data_url(enc.data_url)[1])
    assert decoded.shape == (4, enc.height, enc.width, 3)
    small = encode_video(v, VideoSampling(max_pixels=100 * 200))
    assert small.width * small.height <= 100 * 200 and small.resized


def test_encode_video_crops_odd_sides() -> None:
    frames = video_frames(2, 31, 45)
    enc = encode_video(VideoMedia.from_array(frames, 4), VideoSampling())
    assert (enc.width, enc.height) == (44, 30) and not enc.resized
    decoded, _, _ = decode_video(decode_data_url(enc.data_url)[1])
    assert decoded.shape == (2, 30, 44, 3)
    assert mean_abs_diff(decoded, frames[:, :30, :44]) < 4.0


def test_encode_video_single_frame_is_duplicated() -> None:
    frames = video_frames(1)
    enc = encode_video(VideoMedia.from_array(frames, 24), VideoSampling())
    decoded, _, _ = decode_video(decode_data_url(enc.data_url)[1])
    assert enc.frame_indices == [0, 0] and decoded.shape[0] == 2


def test_encode_video_mpeg4_codec() -> None:
    frames = video_frames(6)
    enc = encode_video(VideoMedia.from_array(frames, 12), VideoSampling(codec="mpeg4"))
    decoded, rate, codec = decode_video(decode_data_url(enc.data_url)[1])
    assert codec == "mpeg4" and enc.codec == "mpeg4" and decoded.shape[0] == 6
    assert float(rate) == pytest.approx(12.0)
    assert mean_abs_diff(decoded, frames) < 6.0


def test_encode_video_unknown_codec_is_a_media_error() -> None:
    with pytest.raises(MediaError, match="cannot encode video as mp4: no encoder 'nope'"):
        encode_video(VideoMedia.from_array(video_frames(2), 8), VideoSampling(codec="nope"))


def test_encode_video_passes_a_fitting_mp4_through() -> None:
    data = make_video_bytes(video_frames(8), fps=8)
    enc = encode_video(VideoMedia.from_mp4(data), VideoSampling())
    assert enc.passthrough and decode_data_url(enc.data_url)[1] == data
    # Sampling changes the frames: no passthrough, a fresh encode.
    enc2 = encode_video(VideoMedia.from_mp4(data), VideoSampling(fps=4))
    assert not enc2.passthrough and enc2.frame_indices == [0, 2, 4, 6]
    assert decode_video(decode_data_url(enc2.data_url)[1])[0].shape[0] == 4


def test_video_sampling_is_hashable() -> None:
    assert hash(VideoSampling(fps=2.0)) == hash(VideoSampling(fps=2.0))
    assert VideoSampling(fps=2.0) != VideoSampling(fps=4.0)


# ---- MediaCache ------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_cache_encodes_once_for_concurrent_requests() -> None:
    cache = MediaCache()
    img = ImageMedia.validate(ARR)
    enc = ImageEncoding()
    results = await asyncio.gather(*(cache.image(img, enc) for _ in range(10)))
    assert cache.encodes == 1 and cache.hits == 9
    assert all(r is results[0] for r in results)
    assert isinstance(results[0], EncodedImage)
    other = await cache.image(img, ImageEncoding(format="jpeg"))
    assert cache.encodes == 2 and other.format == "jpeg"
    # The same content in another object is the same key.
    await cache.image(ImageMedia.validate(ARR.copy()), enc)
    assert cache.encodes == 2 and cache.hits == 10


@pytest.mark.asyncio
async def test_cache_video_encodes_once_per_sampling() -> None:
    cache = MediaCache()
    v = VideoMedia.from_array(video_frames(8), 8)
    a = await asyncio.gather(*(cache.video(v, VideoSampling()) for _ in range(10)))
    assert cache.encodes == 1 and cache.hits == 9 and all(x is a[0] for x in a)
    b = await cache.video(v, VideoSampling(fps=4))
    assert cache.encodes == 2 and b.frame_indices == [0, 2, 4, 6]


@pytest.mark.asyncio
async def test_cache_errors_reach_every_waiter(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(img: ImageMedia, enc: ImageEncoding) -> EncodedImage:
        raise RuntimeError("encoder exploded")

    monkeypatch.setattr(media_cache, "encode_image", boom)
    cache = MediaCache()
    img = ImageMedia.validate(PNG)
    results = await asyncio.gather(
        *(cache.image(img, ImageEncoding()) for _ in range(5)), return_exceptions=True
    )
    assert all(isinstance(r, MediaError) for r in results)
    assert "encoder exploded" in str(results[0]) and "RuntimeError" in str(results[0])
    assert cache.encodes == 1


@pytest.mark.asyncio
async def test_cache_media_error_is_propagated_unchanged() -> None:
    cache = MediaCache()
    v = VideoMedia.from_array(video_frames(2), 8)
    with pytest.raises(MediaError, match="cannot encode video"):
        await cache.video(v, VideoSampling(codec="nope"))


@pytest.mark.asyncio
async def test_cache_one_cancelled_waiter_does_not_cancel_the_encode() -> None:
    cache = MediaCache()
    v = VideoMedia.from_array(video_frames(16, 96, 128), 8)
    first = asyncio.ensure_future(cache.video(v, VideoSampling()))
    second = asyncio.ensure_future(cache.video(v, VideoSampling()))
    await asyncio.sleep(0)
    first.cancel()
    enc = await second
    assert enc.source_frames == 16 and cache.encodes == 1
    with pytest.raises(asyncio.CancelledError):
        await first


def test_truncated_faststart_mp4_is_rejected_at_validation(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # moov first (faststart): the header survives truncation, the packets do not.
    # faststart rewrites the file at close, so FFmpeg needs a real file, not a BytesIO.
    frames = video_frames(12)
    path = tmp_path / "faststart.mp4"
    with av.open(str(path), mode="w", format="mp4", options={"movflags": "faststart"}) as out:
        stream = out.add_stream("libx264", rate=12)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for i, f in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(f, format="rgb24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    data = path.read_bytes()
    assert data.index(b"moov") < data.index(b"mdat")
    assert VideoMedia.from_mp4(data).num_frames == 12
    with pytest.raises(MediaError, match=r"truncated video.* of 12 frames|header lists 12 frames"):
        VideoMedia.from_mp4(data[: int(len(data) * 0.6)])
