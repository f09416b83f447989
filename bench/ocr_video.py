"""The `ocr` head on videos: its default (8 frames spread over a clip) against every frame (what
it read before it had a video default: `video = { max_frames = 4096 }`), on clips of rendered
text, in one gateway, one after the other. Prints per-clip wall time, the worker's CPU seconds
and the reward of each, and the ratio.

    .venv/bin/python bench/ocr_video.py [--clips 3] [--frames 81] [--fps 16]

RapidOCR runs under this interpreter (the `ocr` extra), on the CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import sys
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image, ImageDraw, ImageFont

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from judge_gateway.config import validate_config  # noqa: E402
from judge_gateway.gateway import Gateway  # noqa: E402
from judge_gateway.schema import RewardRequest, SampleInput  # noqa: E402


def text_clip(text: str, frames: int, fps: int, size: tuple[int, int] = (512, 160)) -> bytes:
    """An H.264 MP4 of `text` drifting slowly across a white frame."""
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        stream.time_base = Fraction(1, fps)
        for i in range(frames):
            im = Image.new("RGB", size, "white")
            ImageDraw.Draw(im).text((30 + i % 20, 50), text, fill="black", font=ImageFont.load_default(size=56))
            frame = av.VideoFrame.from_ndarray(np.asarray(im), format="rgb24")
            frame.pts = i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


def worker_cpu_s(pid: int) -> float:
    """utime + stime of a live process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run(args: argparse.Namespace) -> None:
    cfg = validate_config({"judges": {
        "ocr": {"kind": "ocr", "options": {"device": "cpu"}},
        "ocr_every_frame": {"kind": "ocr", "options": {"device": "cpu"}, "video": {"max_frames": 4096}},
    }})
    gw = Gateway(cfg)
    clips = [text_clip("Hello World", args.frames, args.fps) for _ in range(args.clips)]
    try:
        for name in ("ocr", "ocr_every_frame"):
            await gw.judges[name].worker.wait_ready()  # model loading is not what is timed
        results: dict[str, tuple[float, float, list[float], int]] = {}
        for name in ("ocr", "ocr_every_frame"):
            pid = gw.judges[name].worker.pid
            assert pid is not None
            cpu0, t0, rewards, frames = worker_cpu_s(pid), time.perf_counter(), [], 0
            for clip in clips:  # one at a time: the per-clip latency a `score` run sees
                resp = await gw.score(RewardRequest(samples=[SampleInput(prompt='a sign that says "Hello World"',
                                                                         video={"mp4": clip})], judges=[name]))
                score = resp.results[0].scores[name]
                assert score.valid, score.error
                rewards.append(score.reward)
                frames = score.details["frames"]
            results[name] = (time.perf_counter() - t0, worker_cpu_s(pid) - cpu0, rewards, frames)
        for name, (wall, cpu, rewards, frames) in results.items():
            print(f"{name:16s} {frames:3d} frames/clip  {wall / args.clips:7.2f} s/clip wall  "
                  f"{cpu / args.clips:7.2f} s/clip worker CPU  rewards {', '.join(f'{r:.3f}' for r in rewards)}")
        base, every = results["ocr"], results["ocr_every_frame"]
        print(f"every frame / default: {every[0] / base[0]:.1f}x wall, {every[1] / base[1]:.1f}x worker CPU")
    finally:
        await gw.aclose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clips", type=int, default=3)
    p.add_argument("--frames", type=int, default=81, help="frames per clip (Wan's 81 by default)")
    p.add_argument("--fps", type=int, default=16)
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
