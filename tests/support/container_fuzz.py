"""Container fuzzing: seeded, reproducible mutations of media files sent where every API takes media.

Seeds: small valid clips (mp4 and mov / h264, mkv / h264, webm / vp8, avi / mpeg4) and images
(animated GIF, PNG, JPEG, WebP); hostile media (an mp4 declaring 160 frames of 1080p, a PNG
declaring 8000x8000, an mkv declaring 32x32 that grows to 1920x1080 mid-stream, a stream whose
codec FFmpeg does not know); demuxer scripts (ffconcat, HLS, SDP, DASH) naming files and ports;
and heavy but valid requests (four 3000x3000 PNGs; a 720p clip whose judge times out while
decoding it), which hold the process-wide decoded-media budget and test that memory comes back.
Mutations: byte flips, 32-bit fields overwritten with huge values, truncation, a duplicated or
deleted chunk, random bytes inserted, two seeds spliced, one format's magic on another's body.

Routes: a native video (`{"mp4": ...}`) or image, a Flow-Factory image or video frame, cosmos-rl
tensor bytes. Each case is a `fuzz_cases.Case`; its family is "container:<seed>".
"""

from __future__ import annotations

import base64
import io
import json
import random
from collections.abc import Iterator
from fractions import Fraction

import av
import numpy as np
from PIL import Image

from tests.support.fuzz_cases import JSON_H, OCTET_H, Case
from tests.support.hostile_media import (
    ffconcat_script,
    hls_playlist,
    mkv_switching_size,
    mp4_of_black_frames,
    png_declaring,
    sdp_description,
    unknown_codec_webm,
)

# container format, codec: the valid clips
CLIPS = {"mp4": ("mp4", "libx264"), "mov": ("mov", "libx264"), "mkv": ("matroska", "libx264"),
         "webm": ("webm", "libvpx"), "avi": ("avi", "mpeg4")}
HEAVY = "heavy"  # valid but large requests: the decoded-media budget's work
SDP_PORTS = (47000, 47001)  # what the SDP seed asks FFmpeg to bind


def _clip(fmt: str, codec: str, frames: int = 8, size: tuple[int, int] = (64, 48), seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    w, h = size
    buf = io.BytesIO()
    with av.open(buf, mode="w", format=fmt) as out:
        stream = out.add_stream(codec, rate=8)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.time_base = Fraction(1, 8)
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), format="rgb24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return buf.getvalue()


def _image(fmt: str, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    frames = [Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)) for _ in range(3)]
    buf = io.BytesIO()
    if fmt == "GIF":
        frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:], duration=100)
    else:
        frames[0].save(buf, format=fmt)
    return buf.getvalue()


class Seeds:
    """Built once per run (~3 s)."""

    def __init__(self) -> None:
        self.videos = {name: _clip(*spec) for name, spec in CLIPS.items()}
        self.images = {name.lower(): _image(name) for name in ("GIF", "PNG", "JPEG", "WEBP")}
        self.hostile = {
            "mp4_160x1080p": mp4_of_black_frames(160, 1920, 1080),
            "png_8000": png_declaring(8000, 8000),
            "mkv_grows": mkv_switching_size(big=(1920, 1080), big_frames=20),
            "unknown_codec": unknown_codec_webm(),
            "ffconcat": ffconcat_script("canary.mp4"),
            "hls": hls_playlist("canary.mp4"),
            "sdp": sdp_description(SDP_PORTS[0]),
            "dash": b'<?xml version="1.0"?><MPD xmlns="urn:mpeg:dash:schema:mpd:2011"><BaseURL>canary.mp4'
                    b"</BaseURL></MPD>",
        }
        self.heavy_png = png_declaring(3000, 3000)  # 9 M pixels each, four to a request
        self.slow_clip = mp4_of_black_frames(60, 1280, 720)  # its judge times out while decoding it
        self.all = {**self.videos, **self.images, **self.hostile}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class ContainerFuzzer:
    def __init__(self, seed: int = 0, seeds: Seeds | None = None) -> None:
        self.r = random.Random(seed)
        self.s = seeds or Seeds()

    # ---- mutations -------------------------------------------------------------------------

    def mutate(self, data: bytes) -> bytes:
        r = self.r
        b = bytearray(data)
        op = r.choice(["none", "flip", "flip", "huge_field", "truncate", "dup_chunk", "cut_chunk", "insert",
                       "splice", "magic_swap"])
        if op == "none" or not b:
            return bytes(b)
        if op == "flip":
            for _ in range(r.randint(1, 16)):
                b[r.randrange(len(b))] = r.randrange(256)
        elif op == "huge_field":  # sizes, counts, dimensions in headers are 16- or 32-bit fields
            for _ in range(r.randint(1, 4)):
                at = r.randrange(max(1, min(len(b), 512) - 4))
                b[at:at + 4] = r.choice([b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x00\x00\xff\xff",
                                         b"\x00\x01\x00\x00", b"\x00\x00\x00\x00"])
        elif op == "truncate":
            b = b[: r.randrange(len(b))]
        elif op in ("dup_chunk", "cut_chunk"):
            at, n = r.randrange(len(b)), r.randint(1, 4096)
            b = b[:at] + b[at:at + n] + b[at:] if op == "dup_chunk" else b[:at] + b[at + n:]
        elif op == "insert":
            at = r.randrange(len(b))
            b = b[:at] + bytes(r.randrange(256) for _ in range(r.randint(1, 64))) + b[at:]
        elif op == "splice":
            other = r.choice(list(self.s.all.values()))
            b = b[: r.randrange(len(b))] + other[r.randrange(len(other)):]
        else:  # magic_swap: another seed's first 16 bytes on this one's body
            other = r.choice(list(self.s.all.values()))
            b = bytearray(other[:16]) + b[16:]
        return bytes(b)

    # ---- cases -----------------------------------------------------------------------------

    def case(self) -> Case:
        r = self.r
        if r.random() < 0.03:
            return self._heavy()
        name = r.choice(list(self.s.all))
        data = self.s.all[name]
        if r.random() < 0.8:
            data = self.mutate(data)
        route = r.choice(["native_video", "native_video", "native_image", "flow_image", "flow_video", "enqueue"])
        family = f"container:{name}"
        if route == "native_video":
            judge = r.choice(["video", "video_fast"])
            body = {"samples": [{"prompt": "a car", "video": {"mp4": _b64(data)}}], "judges": [judge]}
            return Case(family, "POST", "/v1/rewards", JSON_H, json.dumps(body).encode())
        if route == "native_image":
            body = {"samples": [{"prompt": "a cat", "image": _b64(data)}], "judges": ["quality"]}
            return Case(family, "POST", "/v1/rewards", JSON_H, json.dumps(body).encode())
        if route == "flow_image":
            body = {"prompt": ["a cat"], "image": [_b64(data)], "video": None, "condition_images": None,
                    "condition_videos": None}
            return Case(family, "POST", "/flow-factory/t2i/compute", JSON_H, json.dumps(body).encode())
        if route == "flow_video":
            body = {"prompt": ["a car"], "image": None, "video": [[_b64(data)] * 2], "condition_images": None,
                    "condition_videos": None}
            return Case(family, "POST", "/flow-factory/t2v/compute", JSON_H, json.dumps(body).encode())
        meta = {"reward_fn": {"video": 1.0}, "media_type": "video", "prompts": ["a"], "video_infos": [{"video_fps": 8}]}
        return Case(family, "POST", "/api/reward/enqueue", OCTET_H, json.dumps(meta).encode() + b"\n" + data)

    def _heavy(self) -> Case:
        if self.r.random() < 0.5:
            body = {"samples": [{"prompt": "a cat", "image": _b64(self.s.heavy_png)}] * 4, "judges": ["quality"]}
        else:  # a valid clip whose judge's deadline_s ends while it is decoded: a timed-out request
            body = {"samples": [{"prompt": "a car", "video": {"mp4": _b64(self.s.slow_clip)}}], "judges": ["video_fast"]}
        return Case(f"container:{HEAVY}", "POST", "/v1/rewards", JSON_H, json.dumps(body).encode())

    def cases(self, n: int) -> Iterator[Case]:
        for _ in range(n):
            yield self.case()


def config(base_url: str) -> dict:
    """The gateway the container fuzz runs against: an image judge, a video judge that decodes
    (8 frames sampled, so never a pass-through), one whose deadline ends mid-decode, and a
    process-wide decoded-media budget small enough that the heavy cases queue for it."""
    backend = {"model": "fake-yes", "base_urls": [base_url], "timeout_s": 30, "max_retries": 0}
    video = {"num_frames": 8, "total_pixels": 7225344}
    return {
        "server": {"admission": {"max_active": 32, "max_waiting": 64, "max_wait_s": 5.0}},
        # 134 M pixels (~400 MB of RGB) in flight at most: three heavy requests at once
        "media": {"max_video_pixels": 2**27, "max_request_pixels": 2**27, "max_process_pixels": 2**27},
        "backends": {"yes": backend},
        "judges": {
            "quality": {"kind": "yes_no", "backend": "yes", "template": "image_quality@1",
                        "image": {"max_pixels": 1003520}},
            "video": {"kind": "yes_no", "backend": "yes", "template": "cosmos_reason1@1", "default": False,
                      "video": video},
            "video_fast": {"kind": "yes_no", "backend": "yes", "template": "cosmos_reason1@1", "default": False,
                           "deadline_s": 0.05, "video": video},
        },
        "flow_factory": {"profiles": {"t2i": {"judges": {"quality": 1.0}}, "t2v": {"judges": {"video": 1.0}}}},
    }
