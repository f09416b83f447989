"""Media is hostile input: no demuxer may open a local file or a socket, decoded-size budgets hold
for what is decoded (not what the header declared), and a stream FFmpeg cannot decode is a 4xx.

Through all three APIs (native, cosmos-rl, Flow-Factory), in-process (httpx.ASGITransport): the
gateway's own process is the one whose file opens and sockets are watched (tests/support/io_watch.py).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.media import MediaError, VideoMedia
from judge_gateway.server import create_app
from tests.support.fake_openai import free_port
from tests.support.hostile_media import (
    ffconcat_script,
    hls_playlist,
    mkv_switching_size,
    sdp_description,
    unknown_codec_webm,
)
from tests.support.io_watch import FileOpens, PortWatch
from tests.support.media_files import write_video

ROOT = Path(__file__).resolve().parents[2]
OCTET = {"content-type": "application/octet-stream"}


def config(base_url: str) -> dict:
    backend = {"model": "fake-yes", "base_urls": [base_url], "timeout_s": 10, "max_retries": 0}
    return {
        "backends": {"yes": backend},
        "judges": {
            "quality": {"kind": "yes_no", "backend": "yes", "template": "image_quality@1"},
            "cosmos_reason1": {"kind": "yes_no", "backend": "yes", "template": "cosmos_reason1@1", "default": False},
        },
        "flow_factory": {"profiles": {"t2i": {"judges": {"quality": 1.0}},
                                      "t2v": {"judges": {"cosmos_reason1": 1.0}}}},
    }


@pytest.fixture
async def client(fake_backend):
    gw = Gateway(validate_config(config(fake_backend.base_url)))
    app = create_app(gw)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
                                 base_url="http://localhost", timeout=60) as c:
        yield c
    await app.state.cosmos_rl.aclose()
    await gw.aclose()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def send(client: httpx.AsyncClient, api: str, payload: bytes) -> tuple[int, str]:
    """The payload where each API takes media: a native video (and image), Flow-Factory video
    frames, cosmos-rl tensor bytes. Returns (status, the reason the API gives)."""
    if api == "native":
        r = await client.post("/v1/rewards", json={"samples": [{"prompt": "a", "video": {"mp4": b64(payload)}}],
                                                   "judges": ["cosmos_reason1"]})
        return r.status_code, r.json()["error"]["message"] if r.status_code != 200 else r.text
    if api == "native_image":
        r = await client.post("/v1/rewards", json={"samples": [{"prompt": "a", "image": b64(payload)}]})
        return r.status_code, r.json()["error"]["message"] if r.status_code != 200 else r.text
    if api == "flow_factory":
        r = await client.post("/flow-factory/t2v/compute", json={
            "prompt": ["a"], "image": None, "video": [[b64(payload)]], "condition_images": None,
            "condition_videos": None})
        return r.status_code, r.json().get("error") or r.text
    meta = {"reward_fn": {"cosmos_reason1": 1.0}, "media_type": "video", "prompts": ["a"],
            "video_infos": [{"video_fps": 8}]}
    r = await client.post("/api/reward/enqueue", content=json.dumps(meta).encode() + b"\n" + payload, headers=OCTET)
    return r.status_code, r.json().get("message") or r.text


REFUSED = {"native": 422, "native_image": 422, "flow_factory": 200, "cosmos_rl": 400}
APIS = list(REFUSED)


def _refused(api: str, status: int, reason: str) -> None:
    assert status == REFUSED[api], (status, reason)
    if api == "flow_factory":
        assert "rewards" not in reason  # a 200 with `error`: the client raises, no retry


@pytest.mark.parametrize("api", APIS)
async def test_ffconcat_script_opens_no_file_and_tells_nothing_about_existence(client, api, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the concat demuxer resolves names against the working directory
    write_video(tmp_path / "canary.mp4", frames=2)
    opens = FileOpens(tmp_path / "canary.mp4")
    try:
        existing = await send(client, api, ffconcat_script("canary.mp4"))
        missing = await send(client, api, ffconcat_script("missing.mp4"))
        assert opens.count() == 0, "the gateway opened the file a request's ffconcat script named"
    finally:
        opens.close()
    for status, reason in (existing, missing):
        _refused(api, status, reason)
    # the same answer whether the named file exists or not: no existence oracle
    assert existing == missing
    if api == "native":
        assert "an ffconcat script" in existing[1] and "accepted containers: mp4/mov, matroska/webm, avi" in existing[1]
        assert "canary" not in existing[1]


@pytest.mark.parametrize("api", APIS)
async def test_hls_playlist_opens_no_file(client, api, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_video(tmp_path / "segment.mp4", frames=2)
    opens = FileOpens(tmp_path / "segment.mp4")
    try:
        status, reason = await send(client, api, hls_playlist("segment.mp4"))
        assert opens.count() == 0, "the gateway opened an HLS segment a request named"
    finally:
        opens.close()
    _refused(api, status, reason)
    if api == "native":
        assert "an HLS playlist" in reason


@pytest.mark.parametrize("api", APIS)
async def test_sdp_description_binds_no_socket(client, api):
    port = free_port() & ~1  # RTP takes an even port and the next one
    watch = PortWatch({port, port + 1})
    try:
        status, reason = await asyncio.wait_for(send(client, api, sdp_description(port)), 30)
    finally:
        seen = watch.stop()
    assert seen == set(), f"the gateway bound UDP ports {sorted(seen)} that a request named"
    _refused(api, status, reason)
    if api == "native":
        assert "an SDP session description" in reason


@pytest.mark.parametrize("make, detected", [
    (lambda: b"GIF89a" + b"\x00" * 64, "a GIF image"),
    (lambda: b"\x47" + b"\x00" * 187 + b"\x47" + b"\x00" * 200, "an MPEG transport stream"),
    (lambda: b"FLV\x01" + b"\x00" * 64, "an FLV file"),
    (lambda: b"hello, world\n", "text"),
])
def test_other_formats_are_refused_naming_what_they_look_like(make, detected):
    with pytest.raises(MediaError, match=f"the data looks like {detected}"):
        VideoMedia.from_mp4(make())


@pytest.mark.parametrize("suffix, container", [(".mp4", "mp4"), (".mov", "mov"), (".avi", "avi"), (".webm", "webm")])
def test_accepted_containers_still_decode(tmp_path, suffix, container):
    v = VideoMedia.from_mp4(write_video(tmp_path / f"v{suffix}", frames=4).read_bytes())
    assert v.format == container and v.frames_array().shape == (4, 48, 64, 3)


def test_a_video_that_grows_mid_stream_is_refused_at_its_first_big_frame():
    data = mkv_switching_size(big_frames=3)
    v = VideoMedia.from_mp4(data)  # the header and the first frame say 32x32
    assert (v.width, v.height, v.num_frames) == (32, 32, 7)
    assert v.frames_array([0, 3]).shape == (2, 32, 32, 3)  # before the switch: fine
    with pytest.raises(MediaError, match="video frame 4 is 3840x2160 but the video was validated as 32x32"):
        v.frames_array()
    handed_out = []
    with pytest.raises(MediaError, match="changes size mid-stream"):
        for i, _ in v.iter_frames(range(7)):
            handed_out.append(i)
    assert handed_out == [0, 1, 2, 3]  # no big frame was converted or handed out


def test_a_frame_over_max_image_pixels_fails_in_the_decoder(monkeypatch):
    from judge_gateway.media import limits

    data = mkv_switching_size(big=(1024, 1024), big_frames=2)
    v = VideoMedia.from_mp4(data)
    monkeypatch.setattr(limits, "MAX_IMAGE_PIXELS", 512 * 512)  # read at decode: the decoder's max_pixels
    with pytest.raises(MediaError, match="cannot decode video frame 4 .*larger than media.max_image_pixels"):
        v.frames_array()


def test_growing_video_through_the_api_keeps_rss_bounded():
    """The issue's 43 KB mkv declaring 32x32 that switches to 3840x2160: +3.8 GB before; here the
    judge's cell is invalid (bad_input, the reason) after decoding 4 small frames."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "tests.support.hostile_rss", "mkv_32_to_4k"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["status"] == 200, result
    cell = json.loads(result["body"])["results"][0]["scores"]["cosmos_reason1"]
    assert not cell["valid"] and cell["error"]["code"] == "bad_input", cell
    assert "changes size mid-stream" in cell["error"]["message"]
    assert result["rss_delta_mb"] < 150, result


async def test_a_stream_ffmpeg_cannot_decode_is_a_4xx(client):
    status, reason = await send(client, "native", unknown_codec_webm())
    assert status == 422 and "codec is unknown to FFmpeg" in reason, (status, reason)


def _npy_header(shape: tuple[int, ...]) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "|u1", "fortran_order": False, "shape": shape})
    return buf.getvalue()


@pytest.mark.parametrize("ndim", [65, 200])
async def test_npy_with_too_many_dimensions_is_a_400(client, ndim):
    meta = {"reward_fn": {"quality": 1.0}, "media_type": "image", "prompts": ["a"]}
    body = json.dumps(meta).encode() + b"\n" + _npy_header((1,) * ndim) + b"\x00"
    r = await client.post("/api/reward/enqueue", content=body, headers=OCTET)
    assert r.status_code == 400, r.text
    assert f"{ndim} dimensions" in r.json()["message"]
