"""The decode loop's cost: a VLM judge's sampling of a clip (decode, resize to the judge's size,
x264 encode) through `encode_video`, whose decode loop resizes each frame as it is decoded and
keeps none (`VideoMedia.iter_frames`), against the reference measured in the same run: every
sampled frame decoded at full size first, then all resized (what the gateway did before).
Prints CPU seconds per clip and the peak of numpy/Python allocations (tracemalloc) for both, and
their ratios.

    .venv/bin/python bench/video_decode.py --frames 120 --size 1920x1080 --rounds 3
"""

from __future__ import annotations

import argparse
import gc
import io
import sys
import time
import tracemalloc
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from judge_gateway.media import VideoMedia, VideoSampling, encode_video  # noqa: E402
from judge_gateway.media.encode import _encode_frames_mp4  # noqa: E402
from judge_gateway.media.sampling import _frame_size, sample_frame_indices  # noqa: E402


def clip(frames: int, width: int, height: int) -> bytes:
    """A moving gradient (x264 has something to code; black frames would flatter both)."""
    buf = io.BytesIO()
    x = np.linspace(0, 255, width, dtype=np.float32)[None, :, None]
    y = np.linspace(0, 255, height, dtype=np.float32)[:, None, None]
    with av.open(buf, mode="w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.time_base = Fraction(1, 30)
        stream.options = {"preset": "ultrafast", "crf": "23"}
        for i in range(frames):
            rgb = np.concatenate([x + 0 * y + i, y + 0 * x, (x + y) / 2 + 2 * i], axis=2) % 256
            frame = av.VideoFrame.from_ndarray(rgb.astype(np.uint8), format="rgb24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return buf.getvalue()


def reference(video: VideoMedia, sampling: VideoSampling) -> bytes:
    """All sampled frames decoded at full size, then resized, then encoded."""
    idx, fps = sample_frame_indices(video.num_frames, video.fps, sampling)
    w, h, resized = _frame_size(video.width, video.height, len(idx), sampling)
    full = video.frames_array(idx)
    out = np.empty((len(idx), h, w, 3), np.uint8)
    for i, f in enumerate(full):
        out[i] = np.asarray(Image.fromarray(f).resize((w, h), Image.Resampling.BICUBIC)) if resized else f[:h, :w]
    return _encode_frames_mp4(out, fps, "libx264", sampling.crf)[0]


def measure(fn, rounds: int) -> tuple[float, float]:
    """(CPU seconds per call, peak traced MB) over `rounds` calls."""
    cpu, peak = [], 0.0
    for _ in range(rounds):
        gc.collect()
        tracemalloc.start()
        t0 = time.process_time()
        fn()
        cpu.append(time.process_time() - t0)
        peak = max(peak, tracemalloc.get_traced_memory()[1] / 2**20)
        tracemalloc.stop()
    return sum(cpu) / len(cpu), peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=120)
    ap.add_argument("--size", default="1920x1080")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    width, height = map(int, args.size.split("x"))
    video = VideoMedia.from_mp4(clip(args.frames, width, height))
    # cosmos_reason1's shipped sampling: up to 160 frames, 7.2 M pixels over the clip
    sampling = VideoSampling(max_frames=160, total_pixels=7225344, even_frames=True, codec="libx264")
    encode_video(video, sampling)  # warm: codecs, thread pools
    loop_cpu, loop_peak = measure(lambda: encode_video(video, sampling), args.rounds)
    ref_cpu, ref_peak = measure(lambda: reference(video, sampling), args.rounds)
    print(f"clip: {args.frames} frames of {width}x{height}, sampled {len(sample_frame_indices(video.num_frames, video.fps, sampling)[0])}"
          f" frames; mean of {args.rounds} rounds")
    print(f"decode loop (resize per frame, keep none): {loop_cpu:.3f} s CPU, peak {loop_peak:.0f} MB")
    print(f"reference (decode all, then resize):       {ref_cpu:.3f} s CPU, peak {ref_peak:.0f} MB")
    print(f"ratio loop / reference: CPU {loop_cpu / ref_cpu:.2f}, peak memory {loop_peak / ref_peak:.3f}")


if __name__ == "__main__":
    main()
