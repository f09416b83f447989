"""The gateway's CPU per judged medium: the old path (main before the fast media path) against
the new one, in the same run, for each input shape a judge is sent.

For each input it prints the process CPU time (all threads; not wall time: the machine may be
shared) of the two stages the gateway spends on a medium before vLLM sees it:

- `validate`: the wire form to a validated medium (base64 decode, header / container probe;
  an array: its snapshot),
- `media`: the validated medium to the request body's bytes (content identity for the
  per-request cache, frame sampling, resize, encode, data URL, the body's JSON),

then media/s per core (1000 / total ms) and the budget: 10% of what the judge GPU spends on
that medium (derived from FLOPs at 40-50% MFU on one H100: Cosmos-Reason1 at
cosmos-rl's frame budget 350-400 ms per video; a Qwen2.5-VL-7B yes/no judge 15-19 ms per 512^2
image). `--parallel` also runs a batch of media through the media pool on every core (wall
media/s against one worker).

The old path is main's code at 4306dee, kept here as the reference: sha256 of every medium,
regular-expression base64 checks, PIL resampling (LANCZOS for images, bicubic per video frame),
x264 `ultrafast` crf 18 for video, PIL's PNG/JPEG, the stdlib's base64 and json.dumps.

    .venv/bin/python bench/media.py                      # every input, 3 repetitions
    .venv/bin/python bench/media.py --only image --reps 20
    .venv/bin/python bench/media.py --only video --parallel
    .venv/bin/python bench/media.py --latents .venv-latents/bin/python --device cuda:0 --batch 1

`--mp4-breakdown` splits the h264 input's CPU (first shape of `--shapes`) into its steps, each
measured alone on the same clip: the decode with nothing done to the frames, the decode with
PyAV's YUV -> RGB conversion of every frame, the resize of the RGB frames to the judge's size,
and the encode of frames already at that size; where the mp4 row's time goes.

`--node` counts what the judge node pays per video: the gateway's CPU (as above: validate + media +
the body) and the judge server's frontend CPU for the same video (vLLM's API-server process, its
engine core apart in a process of its own: VLLM_ENABLE_V1_MULTIPROCESSING=1; a CPU vLLM on the tiny
Qwen2.5-VL the tests build, or --base-url with --server-pid), and their sum, per input and path in
the same run: `before` (main at 0af1fb0: libswscale RGB of every kept frame, resize, Motion JPEG in
mp4), `after` (planes resized and converted at the judge's size, a JPEG frame list), and for an mp4
`passthrough` (the source as sent: vLLM decodes it and resizes to the judge's grid, asked per request
with mm_processor_kwargs max_pixels). Every path asks the server for the same grid, so its tokens
match; the after path's frame indices and PSNR against the reference (libswscale + PIL bicubic)
are printed. A new clip (another seed) per repetition: vLLM's processor cache never hits.

`--device-video PYTHON` (an interpreter with torch and torchcodec or PyAV, e.g. .venv-latents; on a
GPU) times [media.device]'s path against the gateway's own on the same h264 clip (first shape of
`--shapes`): the worker's decode (NVDEC through torchcodec on `--device` cuda, else PyAV) + device
resize, then the JPEG frame list here; wall time, this process's CPU and the worker's CPU per video.

`--latents PYTHON` (an interpreter with torch + diffusers, e.g. .venv-latents; on a GPU) runs the
latent worker as the gateway does on a full-size random-weight Wan2.1 VAE and prints videos/s for
81-frame 720p latents decoded whole against decoded + sampled + resized on the device.
"""

from __future__ import annotations

import argparse
import base64
import gc
import hashlib
import io
import json
import re
import sys
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _support import natural_clip  # noqa: E402  (bench/_support.py: nothing imported from the tests)

# Judge GPU time per medium (derived in the docstring), and the gateway's budget: 10% of it.
GPU_MS = {"video": (350.0, 400.0), "image": (15.0, 19.0)}
COSMOS_SAMPLING = {"max_frames": 160, "total_pixels": 7_225_344, "even_frames": True}
IMAGE_RESIZE = 602_112


# ---- the old path (main at 4306dee) -----------------------------------------------------------

_B64_STD = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")
_B64_URLSAFE = re.compile(r"^[A-Za-z0-9_-]*={0,2}$")
_WS = re.compile(r"\s+")


def old_b64decode(s: str) -> bytes:
    s = _WS.sub("", s)
    alt = None if _B64_STD.match(s) else b"-_"
    if alt is not None and not _B64_URLSAFE.match(s):
        raise ValueError("not base64")
    s = s.rstrip("=")
    s += "=" * (-len(s) % 4)
    return base64.b64decode(s, altchars=alt, validate=True)


def old_validate(b64: str, probe: Callable[[bytes], Any], build: Callable[[bytes], Any]) -> Any:
    """The old validation: regular-expression base64, then the header probe and the medium."""
    data = old_b64decode(b64)
    probe(data)
    return build(data)


def old_data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def message(url: str, kind: str) -> dict[str, Any]:
    part = {"type": f"{kind}_url", f"{kind}_url": {"url": url}}
    return {"model": "judge", "messages": [{"role": "user", "content": [
        part, {"type": "text", "text": "Does the image look good? Answer Yes or No."}]}],
        "max_completion_tokens": 1, "logprobs": True, "top_logprobs": 20}


def body_of(url: str, kind: str) -> bytes:
    return json.dumps(message(url, kind)).encode()


def old_image(img: Any, max_pixels: int | None, fmt: str) -> bytes:
    from PIL import Image

    from judge_gateway.media import fit_pixels

    hashlib.sha256(img.source_bytes() if img.source_bytes() is not None else img.to_array()).hexdigest()
    w, h = fit_pixels(img.width, img.height, max_pixels, None)
    src = img.source_bytes()
    if (w, h) == (img.width, img.height) and src is not None and img.format == fmt:
        return body_of(old_data_url(f"image/{fmt}", src), "image")
    pil = Image.fromarray(np.array(img.to_array()))
    if (w, h) != (img.width, img.height):
        pil = pil.resize((w, h), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    if fmt == "png":
        pil.save(buf, format="PNG", compress_level=1, compress_type=3)
    else:
        pil.save(buf, format="JPEG", quality=95, subsampling=0)
    return body_of(old_data_url(f"image/{fmt}", buf.getvalue()), "image")


def old_video(video: Any, sampling: Any) -> bytes:
    import av
    from PIL import Image

    from judge_gateway.media.sampling import _frame_size, sample_frame_indices

    if video.source_bytes() is not None:
        hashlib.sha256(video.source_bytes()).hexdigest()
    else:
        hashlib.sha256(memoryview(video._array).cast("B")).hexdigest()
    idx, fps = sample_frame_indices(video.num_frames, video.fps, sampling)
    w, h, resized = _frame_size(video.width, video.height, len(idx), sampling)
    frames = video.frames_array(idx)
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=Fraction(fps).limit_denominator(100_000))
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.options = {"crf": "18", "preset": "ultrafast"}
        for i, f in enumerate(frames):
            if resized:
                f = np.asarray(Image.fromarray(f).resize((w, h), Image.Resampling.BICUBIC))
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(f[:h, :w]), format="rgb24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return body_of(old_data_url("video/mp4", buf.getvalue()), "video")


# ---- the new path -----------------------------------------------------------------------------

def new_image(img: Any, max_pixels: int | None, fmt: str) -> bytes:
    from judge_gateway.media import ImageEncoding, encode_image
    from judge_gateway.media.body import dumps
    from judge_gateway.media.cache import fingerprint

    fingerprint(img)
    enc = encode_image(img, ImageEncoding(max_pixels=max_pixels, format=fmt))
    return dumps(message(enc.data_url, "image"))


def new_video(video: Any, sampling: Any) -> bytes:
    from judge_gateway.media import encode_video
    from judge_gateway.media.body import dumps
    from judge_gateway.media.cache import fingerprint

    fingerprint(video)
    return dumps(message(encode_video(video, sampling).data_url, "video"))


# ---- measuring --------------------------------------------------------------------------------

def cpu_ms(fn: Callable[[], Any], reps: int) -> float:
    fn()  # warm: imports, first-call costs
    gc.collect()
    start = time.process_time()
    for _ in range(reps):
        fn()
    return (time.process_time() - start) / reps * 1000.0


def budget(kind: str) -> str:
    lo, hi = GPU_MS[kind]
    return f"judge GPU {lo:g}-{hi:g} ms -> budget {lo / 10:g}-{hi / 10:g} ms"


def row(name: str, validate: float, media: float) -> float:
    total = validate + media
    print(f"  {name:5s} validate {validate:8.2f}   media {media:8.2f}   total {total:8.2f} ms   "
          f"{1000.0 / total:8.1f} media/s per core", flush=True)
    return total


def compare(title: str, kind: str, old: tuple[float, float], new: tuple[float, float]) -> None:
    print(f"{title}   ({budget(kind)})")
    t_old = row("old", *old)
    t_new = row("new", *new)
    print(f"  new/old CPU {t_new / t_old:.3f} ({t_old / t_new:.1f}x less)", flush=True)


def pil_bicubic(rgb: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.fromarray(rgb).resize(size, Image.Resampling.BICUBIC))


def png_bytes(arr: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def h264_bytes(frames: np.ndarray, fps: int) -> bytes:
    import av

    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
        stream.options = {"crf": "20", "preset": "veryfast"}
        for i, f in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(f, format="rgb24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return buf.getvalue()


def bench_images(reps: int) -> None:
    from judge_gateway.media import ImageMedia
    from judge_gateway.media.image import _probe_encoded_image

    arr = natural_clip(1, 1024, 1024)[0]
    png = png_bytes(arr)
    b64 = base64.b64encode(png).decode()
    print(f"1024x1024 image: PNG {len(png) / 1e6:.2f} MB; validate = base64 string -> ImageMedia")

    v_old = cpu_ms(lambda: old_validate(b64, _probe_encoded_image, ImageMedia.from_bytes), reps)
    v_new = cpu_ms(lambda: ImageMedia.validate(b64), reps)
    cases = [("PNG passes through (png spec, no resize)", None, "png"),
             (f"PNG source re-encoded to JPEG (max_pixels {IMAGE_RESIZE})", IMAGE_RESIZE, "jpeg"),
             (f"PNG source re-encoded to PNG (max_pixels {IMAGE_RESIZE})", IMAGE_RESIZE, "png")]
    for title, max_pixels, fmt in cases:
        old = cpu_ms(lambda: old_image(ImageMedia.from_bytes(png), max_pixels, fmt), reps)
        new = cpu_ms(lambda: new_image(ImageMedia.from_bytes(png), max_pixels, fmt), reps)
        compare(title, "image", (v_old, old), (v_new, new))
    # An array source (cosmos-rl image tensors, the Python client's arrays): no decode.
    for fmt in ("jpeg", "png"):
        img = ImageMedia.from_array(arr)
        old = cpu_ms(lambda img=img: old_image(img, IMAGE_RESIZE, fmt), reps)
        new = cpu_ms(lambda img=img: new_image(img, IMAGE_RESIZE, fmt), reps)
        compare(f"uint8 array source re-encoded to {fmt.upper()} (max_pixels {IMAGE_RESIZE})", "image",
                (0.0, old), (0.0, new))


def bench_videos(reps: int, shapes: list[tuple[int, int, int]]) -> None:
    for n, h, w in shapes:
        bench_video_shape(n, h, w, reps)


def bench_video_shape(n: int, h: int, w: int, reps: int) -> None:
    """One clip shape: an array, cosmos-rl latents, an h264 mp4."""
    from judge_gateway.media import VideoMedia, VideoSampling, encode_video
    from judge_gateway.media.container import _probe_container

    new_sampling = VideoSampling(**COSMOS_SAMPLING)
    old_sampling = VideoSampling(**COSMOS_SAMPLING, codec="libx264", resampler="pil")
    frames = natural_clip(n, h, w)
    enc = encode_video(VideoMedia.from_array(frames, 16), new_sampling)
    print(f"{n}-frame {w}x{h} clip at 16 fps, cosmos_reason1 sampling -> {enc.num_frames} frames "
          f"{enc.width}x{enc.height} ({enc.num_bytes / 1e6:.2f} MB mjpeg)")
    # array input: validate = from_array's snapshot of the caller's buffer (both paths)
    v = cpu_ms(lambda: VideoMedia.from_array(frames, 16), max(1, reps // 2))
    video = VideoMedia.from_array(frames, 16)
    old = cpu_ms(lambda: old_video(video, old_sampling), reps)
    new = cpu_ms(lambda: new_video(video, new_sampling), reps)
    compare(f"  uint8 array [{n},{h},{w},3]", "video", (v, old), (v, new))
    # cosmos-rl latents: the old path gets the full decode (its [B,3,T,H,W] pixels transposed
    # into a clip); the new one only the judge's frames, resized on the latent decoder's device
    decoded = np.ascontiguousarray(frames.transpose(3, 0, 1, 2))
    kept = np.stack([pil_bicubic(frames[i], (enc.width, enc.height)) for i in enc.frame_indices])
    v_old = cpu_ms(lambda: VideoMedia.from_array(decoded.transpose(1, 2, 3, 0), 16), max(1, reps // 2))
    v_new = cpu_ms(lambda: VideoMedia.from_presampled(
        kept, 16.0, source_frames=n, source_width=w, source_height=h, indices=enc.frame_indices,
        resampled_by="device"), reps)
    presampled = VideoMedia.from_presampled(kept, 16.0, source_frames=n, source_width=w, source_height=h,
                                            indices=enc.frame_indices, resampled_by="device")
    new = cpu_ms(lambda: new_video(presampled, new_sampling), reps)
    compare("  cosmos-rl latents (new: frames resized on the decoder's device)", "video", (v_old, old), (v_new, new))
    mp4 = h264_bytes(frames, 16)
    b64 = base64.b64encode(mp4).decode()

    v_old = cpu_ms(lambda: old_validate(b64, _probe_container, VideoMedia.from_mp4), reps)
    v_new = cpu_ms(lambda: VideoMedia.validate(b64), reps)
    # a fresh VideoMedia each time: decoded frames are kept on the medium
    old = cpu_ms(lambda: old_video(VideoMedia.from_mp4(mp4), old_sampling), reps)
    new = cpu_ms(lambda: new_video(VideoMedia.from_mp4(mp4), new_sampling), reps)
    compare(f"  h264 mp4 ({len(mp4) / 1e6:.2f} MB)", "video", (v_old, old), (v_new, new))


def bench_parallel(count: int) -> None:
    import asyncio

    from judge_gateway.media import VideoMedia, VideoSampling, encode_video
    from judge_gateway.media.pool import MediaPool, default_workers

    frames = natural_clip(81, 720, 1280)
    video = VideoMedia.from_array(frames, 16)
    sampling = VideoSampling(**COSMOS_SAMPLING)

    async def run(workers: int) -> float:
        pool = MediaPool(workers)
        start = time.perf_counter()
        await asyncio.gather(*(pool.run(lambda: encode_video(video, sampling)) for _ in range(count)))
        pool.shutdown()
        return count / (time.perf_counter() - start)

    one = asyncio.run(run(1))
    cores = default_workers()
    all_cores = asyncio.run(run(cores))
    print(f"media pool, {count} encodes of the 81-frame 720p array: 1 worker {one:.2f} videos/s, "
          f"{cores} workers {all_cores:.2f} videos/s ({all_cores / one:.2f}x, wall time)")


BUILD_WAN21 = """
import sys, torch
from diffusers import AutoencoderKLWan
torch.manual_seed(0)
AutoencoderKLWan(base_dim=96, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
                 temperal_downsample=[False, True, True]).save_pretrained(sys.argv[1])
"""


def bench_latents(python: str, device: str, batch: int, reps: int, shape: tuple[int, int, int],
                  vae: str | None) -> None:
    """The latent worker as the gateway runs it (a subprocess under `python`, torch + diffusers) on
    a full-size random-weight Wan2.1 VAE: 81-frame 720p latents decoded whole (every frame back
    through the pipe) against decoded + sampled + resized on the device (Cosmos-Reason1's 80
    frames at 392x224)."""
    import asyncio
    import subprocess
    import tempfile

    from judge_gateway.config import LatentDecoderConfig
    from judge_gateway.latents import LatentDecoderSupervisor
    from judge_gateway.media import VideoSampling, sample_frame_indices
    from judge_gateway.media.sampling import _frame_size

    t, lh, lw = shape  # latent frames, height, width: Wan2.1 decodes 4(t-1)+1 frames of 8lh x 8lw
    sampling = VideoSampling(**COSMOS_SAMPLING)
    frames, _ = sample_frame_indices(4 * (t - 1) + 1, 16.0, sampling)
    w, h, _ = _frame_size(8 * lw, 8 * lh, len(frames), sampling)
    latents = np.random.default_rng(0).standard_normal((batch, 16, t, lh, lw)).astype(np.float32)

    async def run(checkpoint: str) -> None:
        worker = LatentDecoderSupervisor(LatentDecoderConfig.model_validate({
            "python": python, "device": device, "dtype": "bfloat16", "batch_size": batch, "timeout_s": 3600,
            "wan2_1": {"checkpoint": checkpoint}}))
        try:
            for what, keep, size in ((f"decoded whole ({4 * (t - 1) + 1} frames at {8 * lw}x{8 * lh})", None, None),
                                     (f"sampled + resized on {device} ({len(frames)} frames at {w}x{h})",
                                      [frames] * batch, (w, h))):
                await worker.decode(latents, keep, size)  # warm: the VAE's load, kernels
                start = time.perf_counter()
                for _ in range(reps):
                    out = await worker.decode(latents, keep, size)
                rate = batch * reps / (time.perf_counter() - start)
                print(f"latent worker, Wan2.1 VAE (bf16, random weights) on {device}, batch {batch}: {what}: "
                      f"{rate:.2f} videos/s; {out.nbytes / batch / 1e6:.1f} MB per clip back", flush=True)
        finally:
            await worker.aclose()

    if vae is not None:  # a VAE on disk (Wan2.1's own, or a test's tiny one)
        asyncio.run(run(vae))
        return
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([python, "-c", BUILD_WAN21, tmp + "/wan21"], check=True)
        asyncio.run(run(tmp + "/wan21"))


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def mp4_breakdown(n: int, h: int, w: int, reps: int) -> None:
    """The h264 input's steps, each alone on the same clip (process CPU ms per video)."""
    import av

    from judge_gateway.media import VideoMedia, VideoSampling, encode_video
    from judge_gateway.media.planes import planes_to_rgb
    from judge_gateway.media.resize import resize_rgb

    sampling = VideoSampling(**COSMOS_SAMPLING)
    frames = natural_clip(n, h, w)
    mp4 = h264_bytes(frames, 16)
    enc = encode_video(VideoMedia.from_array(frames, 16), sampling)

    def decode(convert: Callable[[Any], Any]) -> list[Any]:
        with av.open(io.BytesIO(mp4)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"  # as the gateway decodes
            return [convert(f) for f in container.decode(stream)]

    rgb = decode(lambda f: f.to_ndarray(format="rgb24"))
    small = np.ascontiguousarray(np.stack([resize_rgb(rgb[i], enc.width, enc.height) for i in enc.frame_indices]))
    frames_list = VideoSampling(**COSMOS_SAMPLING, codec="jpeg_frames")

    def decode_one_thread(convert: Callable[[Any], Any]) -> list[Any]:
        with av.open(io.BytesIO(mp4)) as container:
            stream = container.streams.video[0]
            stream.thread_count = 1  # as the gateway decodes now (media/video.py DECODE_THREADS)
            return [convert(f) for f in container.decode(stream)]

    steps = {
        "whole mp4 path, Motion JPEG (from_mp4 + encode_video)": lambda: encode_video(VideoMedia.from_mp4(mp4), sampling),
        "whole mp4 path, JPEG frame list": lambda: encode_video(VideoMedia.from_mp4(mp4), frames_list),
        "decode only, frame threads (frames untouched)": lambda: decode(lambda f: None),
        "decode only, one thread": lambda: decode_one_thread(lambda f: None),
        "decode + YUV->RGB every frame (libswscale)": lambda: decode(lambda f: f.to_ndarray(format="rgb24")),
        f"decode (one thread) + planes resized, converted at {enc.width}x{enc.height}":
            lambda: decode_one_thread(lambda f: planes_to_rgb(f, enc.width, enc.height, "fast")),
        f"resize {len(enc.frame_indices)} RGB frames to {enc.width}x{enc.height}":
            lambda: [resize_rgb(rgb[i], enc.width, enc.height) for i in enc.frame_indices],
        "encode the resized frames (snapshot, MJPEG, container)":
            lambda: encode_video(VideoMedia.from_array(small, 16), sampling),
        "encode the resized frames (snapshot, JPEG frame list)":
            lambda: encode_video(VideoMedia.from_array(small, 16), frames_list),
    }
    print(f"h264 {n}x{w}x{h} ({len(mp4) / 1e6:.2f} MB), cosmos_reason1 sampling -> {enc.num_frames} frames "
          f"{enc.width}x{enc.height}; budget {GPU_MS['video'][0] / 10:g}-{GPU_MS['video'][1] / 10:g} ms")
    for name, fn in steps.items():
        print(f"  {name:<58s} {cpu_ms(fn, reps):8.1f} ms", flush=True)


# ---- the node: gateway + judge-server frontend ------------------------------------------------

BASE_COMMIT = "0af1fb0"  # main before issue 34's video path: what `before` reproduces


def before_video(video: Any, sampling: Any) -> tuple[bytes, Any]:
    """main at 0af1fb0's mp4 path: FFmpeg frame threads, libswscale RGB of each kept frame, the fast
    resize, Motion JPEG muxed into mp4 (the request's body, and the frames sent)."""
    import av

    from judge_gateway.media.body import dumps
    from judge_gateway.media.cache import fingerprint
    from judge_gateway.media.encode import _mux_jpeg_frames
    from judge_gateway.media.resize import resize_rgb
    from judge_gateway.media.sampling import _frame_size, sample_frame_indices
    from judge_gateway.media.wire import _data_url

    fingerprint(video)
    idx, fps = sample_frame_indices(video.num_frames, video.fps, sampling)
    w, h, _ = _frame_size(video.width, video.height, len(idx), sampling)
    wanted, out = set(idx), []
    if video.source_bytes() is not None:
        with av.open(io.BytesIO(video.source_bytes())) as c:
            stream = c.streams.video[0]
            stream.thread_type = "AUTO"
            for n, frame in enumerate(c.decode(stream)):
                if n in wanted:
                    out.append(resize_rgb(frame.to_ndarray(format="rgb24"), w, h))
                if n >= idx[-1]:
                    break
    else:  # an array or a presampled clip: each frame resized as the decode loop hands it over
        out = list(video.frames_array(idx, transform=lambda f: f if f.shape[:2] == (h, w) else resize_rgb(f, w, h)))
    data, _ = _mux_jpeg_frames(out, w, h, fps, sampling.jpeg_quality)
    return dumps(node_message(_data_url("video/mp4", data), sampling, None)), (idx, w, h)


def after_video(video: Any, sampling: Any) -> tuple[bytes, Any]:
    from judge_gateway.media import encode_video
    from judge_gateway.media.body import dumps
    from judge_gateway.media.cache import fingerprint

    fingerprint(video)
    enc = encode_video(video, sampling)
    return dumps(node_message(enc.data_url, sampling, enc.media_io_kwargs)), enc


def passthrough_video(b64: str, sampling: Any) -> bytes:
    from judge_gateway.media import VideoMedia
    from judge_gateway.media.body import dumps
    from judge_gateway.media.wire import _data_url

    video = VideoMedia.validate(b64)
    return dumps(node_message(_data_url("video/mp4", video.source_bytes()), sampling, None))


NODE_GRID: dict[str, int] = {}  # mm_processor_kwargs of every node request (set per clip: the judge's grid)


def node_message(url: str, sampling: Any, media_io: dict | None) -> dict[str, Any]:
    body = {"model": "judge", "messages": [{"role": "user", "content": [
        {"type": "video_url", "video_url": {"url": url}}, {"type": "text", "text": "Is the motion plausible?"}]}],
        "max_completion_tokens": 1, "temperature": 0.0, "logprobs": True, "top_logprobs": 5,
        "mm_processor_kwargs": dict(NODE_GRID)}
    if media_io is not None:
        body["media_io_kwargs"] = {"video": media_io}
    return body


def send(client: Any, url: str, body: bytes, pid: int) -> tuple[float, float, dict[str, Any]]:
    """(frontend CPU ms, engine CPU ms, the reply) of one request, sent alone."""
    from _support import child_pids, cpu_seconds

    children = child_pids(pid)
    f0, e0 = cpu_seconds(pid), sum(cpu_seconds(c) for c in children)
    r = client.post(url, content=body, headers={"Content-Type": "application/json"})
    f1, e1 = cpu_seconds(pid), sum(cpu_seconds(c) for c in children)
    if r.status_code != 200:
        raise RuntimeError(f"the judge server answered {r.status_code}: {r.text[:500]}")
    return (f1 - f0) * 1000.0, (e1 - e0) * 1000.0, r.json()


def bench_node(reps: int, shape: tuple[int, int, int], base_url: str | None, server_pid: int | None) -> None:
    import contextlib
    import tempfile

    import httpx
    from _support import CpuVllm
    from PIL import Image

    from judge_gateway.media import VideoMedia, VideoSampling

    n, h, w = shape
    per_frame = COSMOS_SAMPLING["total_pixels"] // (n - n % 2)  # the judge's frames: an even count
    NODE_GRID.update({"max_pixels": per_frame, "min_pixels": 3136})
    before_s = VideoSampling(**COSMOS_SAMPLING, codec="mjpeg")
    after_s = VideoSampling(**COSMOS_SAMPLING, codec="jpeg_frames")
    with contextlib.ExitStack() as stack:
        if base_url is None:
            run_dir = stack.enter_context(tempfile.TemporaryDirectory())
            server = stack.enter_context(CpuVllm(
                ["judge"], run_dir, wait_timeout=900, max_model_len=16384,
                extra="--trust-request-mm-kwargs --max-num-batched-tokens 8192",
                env={"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}))
            base_url, server_pid = server.base_url, server.pid
            print(f"CPU vLLM (tiny Qwen2.5-VL) up in {server.startup_seconds:.0f} s, API server pid {server_pid}")
        assert server_pid is not None, "--base-url needs --server-pid (the API server's process)"
        client = stack.enter_context(httpx.Client(timeout=900))
        url = base_url.rstrip("/") + "/chat/completions"
        rows: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
        answers: dict[tuple[str, str], list[Any]] = {}
        warm = natural_clip(9, 64, 64, seed=99)
        send(client, url, after_video(VideoMedia.from_array(warm, 16), after_s)[0], server_pid)  # warm
        for rep in range(reps):
            frames = natural_clip(n, h, w, seed=rep + 1)
            mp4 = h264_bytes(frames, 16)
            b64 = base64.b64encode(mp4).decode()
            kept = np.stack([pil_bicubic(frames[i], (392, 224)) for i in range(80)]) if (h, w) == (720, 1280) else None
            inputs = {
                f"h264 mp4 {n}x{w}x{h}": lambda b64=b64: VideoMedia.validate(b64),
                f"uint8 array {n}x{w}x{h}": lambda frames=frames: VideoMedia.from_array(frames, 16),
            }
            if kept is not None:
                inputs["cosmos-rl latents (presampled on the device)"] = lambda kept=kept: VideoMedia.from_presampled(
                    kept, 16.0, source_frames=n, source_width=w, source_height=h, indices=list(range(80)),
                    resampled_by="device")
            for name, make in inputs.items():
                paths: dict[str, Callable[[], bytes]] = {
                    "before": lambda make=make: before_video(make(), before_s)[0],
                    "after": lambda make=make: after_video(make(), after_s)[0],
                }
                if name.startswith("h264"):
                    paths["passthrough"] = lambda b64=b64: passthrough_video(b64, after_s)
                for path, fn in paths.items():
                    gc.collect()
                    t0 = time.process_time()
                    body = fn()
                    gateway_ms = (time.process_time() - t0) * 1000.0
                    front_ms, engine_ms, reply = send(client, url, body, server_pid)
                    rows.setdefault((name, path), []).append((gateway_ms, front_ms, engine_ms))
                    top = reply["choices"][0]["logprobs"]["content"][0]["top_logprobs"][0]
                    answers.setdefault((name, path), []).append((reply["usage"]["prompt_tokens"], top["token"],
                                                                 round(top["logprob"], 3)))
            if rep == 0:  # the CPU path's frames against the reference (the frames themselves, not timed)
                from judge_gateway.media.encode import _frame_transform

                video = VideoMedia.validate(b64)
                _, enc = after_video(video, after_s)
                before_body, (b_idx, bw, bh) = before_video(VideoMedia.validate(b64), before_s)
                with av_open(mp4) as c:
                    full = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
                ref = [pil_bicubic(full[i], (enc.width, enc.height)) for i in enc.frame_indices]
                kept = video.frames_array(enc.frame_indices, _frame_transform(enc.width, enc.height, True, "fast"))
                sent = [np.asarray(Image.open(io.BytesIO(base64.b64decode(p))).convert("RGB"))
                        for p in parse_data_url_parts(enc.data_url)]
                b_url = json.loads(before_body)["messages"][0]["content"][0]["video_url"]["url"]
                with av_open(base64.b64decode(b_url.partition(",")[2])) as c:
                    b_sent = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]

                def span(vals: list[float]) -> str:
                    return f"min {min(vals):.2f}, mean {np.mean(vals):.2f} dB"

                print(f"after path, h264 {n}x{w}x{h}: frames {enc.frame_indices[0]}..{enc.frame_indices[-1]} "
                      f"({enc.num_frames}; before: {b_idx[0]}..{b_idx[-1]}, {len(b_idx)}; same: {enc.frame_indices == b_idx}) "
                      f"at {enc.width}x{enc.height} (before {bw}x{bh}); PSNR against libswscale + PIL bicubic: the "
                      f"decode loop's frames {span([psnr(a, b) for a, b in zip(kept, ref)])}; the JPEG frames sent "
                      f"{span([psnr(a, b) for a, b in zip(sent, ref)])} (before, its Motion JPEG frames: "
                      f"{span([psnr(a, b) for a, b in zip(b_sent, ref)])})", flush=True)
    print(f"per video, process CPU ms (mean of {reps}; the gateway in this process, the judge server's API-server "
          "process around each request); tokens / top answer per repetition")
    print(f"  {'input':<46s} {'path':<12s} {'gateway':>8s} {'frontend':>9s} {'sum':>8s} {'engine':>8s}   answers")
    for (name, path), vals in rows.items():
        g, f, e = (float(np.mean([v[i] for v in vals])) for i in range(3))
        print(f"  {name:<46s} {path:<12s} {g:8.1f} {f:9.1f} {g + f:8.1f} {e:8.1f}   {answers[(name, path)]}",
              flush=True)


def bench_device_video(python: str, device: str, decoder: str, reps: int, shape: tuple[int, int, int]) -> None:
    """[media.device]'s path (the torch worker decodes and resizes, this process encodes) against the
    gateway's own path on the same clip: wall, this process's CPU, the worker's CPU, per video."""
    import asyncio

    from _support import cpu_seconds

    from judge_gateway.config import DeviceVideoConfig
    from judge_gateway.device_video import DeviceVideoDecoder
    from judge_gateway.media import MediaCache, VideoMedia, VideoSampling, encode_video
    from judge_gateway.media.pool import MediaPool

    n, h, w = shape
    mp4 = h264_bytes(natural_clip(n, h, w), 16)
    sampling = VideoSampling(**COSMOS_SAMPLING, codec="jpeg_frames")

    async def run() -> None:
        worker = DeviceVideoDecoder(DeviceVideoConfig(python=python, device=device, decoder=decoder))
        pool = MediaPool(1)
        try:
            await MediaCache(pool, worker).video(VideoMedia.from_mp4(mp4), sampling)  # warm: torch, CUDA, NVDEC
            for name in ("gateway (CPU)", f"device ({device})"):
                wall = cpu = wcpu = 0.0
                for _ in range(reps):
                    pid = worker.pid
                    w0, c0, k0 = time.perf_counter(), time.process_time(), cpu_seconds(pid) if pid else 0.0
                    if name.startswith("gateway"):
                        enc = encode_video(VideoMedia.from_mp4(mp4), sampling)
                    else:
                        enc = await MediaCache(pool, worker).video(VideoMedia.from_mp4(mp4), sampling)
                    wall += time.perf_counter() - w0
                    cpu += time.process_time() - c0
                    wcpu += (cpu_seconds(pid) if pid else 0.0) - k0
                d = enc.details()
                print(f"  {name:<22s} wall {wall / reps * 1000:8.1f} ms   gateway CPU {cpu / reps * 1000:8.1f} ms   "
                      f"worker CPU {wcpu / reps * 1000:8.1f} ms   ({d['path']}, {d.get('decoded_by', 'pyav here')}, "
                      f"{d['num_frames']} frames {d['width']}x{d['height']}"
                      + (f", fell back: {d['device_fallback']}" if "device_fallback" in d else "") + ")", flush=True)
        finally:
            await worker.aclose()
            pool.shutdown()

    print(f"h264 {n}x{w}x{h} ({len(mp4) / 1e6:.2f} MB), cosmos_reason1 sampling, JPEG frame list; mean of {reps}")
    asyncio.run(run())


def av_open(data: bytes) -> Any:
    import av

    return av.open(io.BytesIO(data))


def parse_data_url_parts(url: str) -> list[str]:
    """The base64 frames of a `video/jpeg` data URL."""
    return url.partition(",")[2].split(",")


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--only", choices=["image", "video"])
    p.add_argument("--shapes", default="81x720x1280,121x704x1280,81x480x832",
                   help="video shapes, frames x height x width, comma-separated")
    p.add_argument("--parallel", action="store_true", help="also measure the media pool on every core")
    p.add_argument("--mp4-breakdown", action="store_true",
                   help="only: the h264 input's CPU split into decode, YUV->RGB, resize, encode")
    p.add_argument("--latents", metavar="PYTHON",
                   help="time the latent worker under this interpreter (torch + diffusers; on a GPU)")
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--latents-vae", help="an AutoencoderKLWan directory (default: build a random-weight Wan2.1 one)")
    p.add_argument("--latent-shape", default="21x90x160",
                   help="latent frames x height x width (default: an 81-frame 720p clip)")
    p.add_argument("--device-video", metavar="PYTHON",
                   help="only: [media.device]'s path under this interpreter (torch + torchcodec or PyAV) against "
                        "the gateway's own, on --device")
    p.add_argument("--decoder", default="auto", choices=["auto", "torchcodec", "pyav"],
                   help="--device-video: the worker's decoder")
    p.add_argument("--node", action="store_true",
                   help="only: the gateway's CPU and the judge server's frontend CPU per video, and their sum")
    p.add_argument("--base-url", help="--node: an existing vLLM /v1 (default: start the tiny CPU vLLM)")
    p.add_argument("--server-pid", type=int, help="--node with --base-url: its API-server process")
    args = p.parse_args()
    if args.latents:
        shape = tuple(int(x) for x in args.latent_shape.split("x"))
        bench_latents(args.latents, args.device, args.batch, args.reps, shape, args.latents_vae)  # type: ignore[arg-type]
        return 0
    from judge_gateway.media.pool import default_workers

    if args.device_video:
        n, h, w = (int(x) for x in args.shapes.split(",")[0].split("x"))
        print(f"bench/media.py --device-video {time.strftime('%Y-%m-%d')}: {cpu_model()}, {default_workers()} cores")
        bench_device_video(args.device_video, args.device, args.decoder, args.reps, (n, h, w))
        return 0
    if args.node:
        n, h, w = (int(x) for x in args.shapes.split(",")[0].split("x"))
        print(f"bench/media.py --node {time.strftime('%Y-%m-%d')}: {cpu_model()}, {default_workers()} cores")
        bench_node(args.reps, (n, h, w), args.base_url, args.server_pid)
        return 0
    if args.mp4_breakdown:
        n, h, w = (int(x) for x in args.shapes.split(",")[0].split("x"))
        print(f"bench/media.py --mp4-breakdown {time.strftime('%Y-%m-%d')}: process CPU ms, mean of {args.reps}; "
              f"{cpu_model()}, {default_workers()} cores")
        mp4_breakdown(n, h, w, args.reps)
        return 0
    print(f"bench/media.py {time.strftime('%Y-%m-%d')}: process CPU ms per medium, mean of {args.reps} "
          f"repetitions (images: x5); {cpu_model()}, {default_workers()} cores")
    if args.only in (None, "image"):
        bench_images(args.reps * 5)
    if args.only in (None, "video"):
        shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
        bench_videos(args.reps, shapes)  # type: ignore[arg-type]
    if args.parallel:
        bench_parallel(8)
    return 0


if __name__ == "__main__":
    sys.exit(main())
