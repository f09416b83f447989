"""How a judge's sampled video reaches its backend: a `video/jpeg` frame list with its rate in the
request's media_io_kwargs where the backend takes one (vLLM 0.32's VideoMediaIO.load_base64, the
server started with --trust-request-mm-kwargs), else Motion JPEG in mp4; what a score's details
say about it; and the config's refusals. (The real server's reading of both is tested in
tests/integration/test_media_vllm.py.)"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from judge_gateway.config import validate_config
from judge_gateway.exceptions import ConfigurationError
from judge_gateway.gateway import Gateway
from judge_gateway.media import VideoMedia, VideoSampling, encode_video
from judge_gateway.media.wire import parse_data_url
from judge_gateway.schema import RewardRequest
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.natural_media import natural_frames, psnr


@pytest.fixture(scope="module")
def server():
    fake = FakeOpenAIServer().start()
    yield fake
    fake.stop()


def _jpeg_frames(url: str) -> list[np.ndarray]:
    head, _, data = url.partition(",")
    assert head == "data:video/jpeg;base64"
    import base64

    return [np.asarray(Image.open(io.BytesIO(base64.b64decode(part))).convert("RGB")) for part in data.split(",")]


def test_jpeg_frames_are_the_frames_mjpeg_muxes() -> None:
    video = VideoMedia.from_array(natural_frames(9, 448, 252), 12)
    sampling = VideoSampling(max_pixels=224 * 126 + 1000)
    frames = encode_video(video, VideoSampling(max_pixels=224 * 126 + 1000, codec="jpeg_frames"))
    mjpeg = encode_video(video, sampling)
    assert frames.codec == "jpeg_frames" and mjpeg.codec == "mjpeg"
    assert frames.frame_indices == mjpeg.frame_indices == list(range(8))
    assert frames.media_io_kwargs == {"num_frames": -1, "fps": 12.0} and mjpeg.media_io_kwargs is None
    got = _jpeg_frames(frames.data_url)
    import av

    with av.open(io.BytesIO(parse_data_url(mjpeg.data_url)[1])) as c:
        muxed = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    assert len(got) == len(muxed) == 8 and got[0].shape == (frames.height, frames.width, 3)
    # the same JPEG bytes either way: decoders may differ by a rounding step, no more
    assert min(psnr(a, b) for a, b in zip(got, muxed)) >= 45.0
    d = frames.details()
    assert (d["codec"], d["path"], d["passthrough"]) == ("jpeg_frames", "gateway", False)
    assert frames.num_bytes < len(frames.data_url)


def _config(base_url: str, video_input: str | None, codec: str = "auto") -> dict:
    backend = {"model": "fake-yes", "base_urls": [base_url]}
    if video_input is not None:
        backend["video_input"] = video_input
    return {"backends": {"vlm": backend},
            "judges": {"physics": {"kind": "yes_no", "backend": "vlm", "template": "cosmos_reason1@2",
                                   "video": {"max_frames": 160, "total_pixels": 16 * 22_000, "codec": codec}}}}


@pytest.mark.parametrize(("video_input", "codec", "sent"), [
    ("jpeg_frames", "auto", "jpeg_frames"),
    ("mp4", "auto", "mjpeg"),
    (None, "auto", "mjpeg"),          # auto, and no launch table: an external server, mp4
    ("jpeg_frames", "mjpeg", "mjpeg"),  # the judge's own choice wins
])
async def test_what_the_backend_is_sent(server, video_input, codec, sent) -> None:
    gateway = Gateway(validate_config(_config(server.base_url, video_input, codec)))
    try:
        before = len(server.counters["bodies"])
        clip = {"array": {"dtype": "uint8", "shape": [17, 180, 320, 3],
                          "data": __import__("base64").b64encode(natural_frames(17, 320, 180).tobytes()).decode()},
                "fps": 16}
        response = await gateway.score(RewardRequest.model_validate({"samples": [{"prompt": "a ball", "video": clip}]}))
    finally:
        await gateway.aclose()
    score = response.results[0].scores["physics"]
    assert score.valid, score.error
    details = score.details["video"]
    assert (details["codec"], details["path"]) == (sent, "gateway")
    body = server.counters["bodies"][before:][-1]
    part = next(p for m in body["messages"] for p in (m["content"] if isinstance(m["content"], list) else [])
                if p["type"] == "video_url")
    if sent == "jpeg_frames":
        assert part["video_url"]["url"].startswith("data:video/jpeg;base64,")
        assert body["media_io_kwargs"] == {"video": {"num_frames": -1, "fps": details["fps"]}}
        assert len(_jpeg_frames(part["video_url"]["url"])) == details["num_frames"] == 16
    else:
        assert part["video_url"]["url"].startswith("data:video/mp4;base64,")
        assert "media_io_kwargs" not in body


def test_jpeg_frames_need_a_backend_that_takes_them() -> None:
    with pytest.raises(ConfigurationError, match="video.codec: jpeg_frames needs a backend that takes them"):
        validate_config(_config("http://127.0.0.1:9/v1", "mp4", "jpeg_frames"))
    cfg = _config("http://127.0.0.1:9/v1", None, "jpeg_frames")
    cfg["judges"]["physics"]["template"] = "video_edit@1"  # a video and a condition video: one rate cannot do
    cfg["backends"]["vlm"]["video_input"] = "jpeg_frames"
    with pytest.raises(ConfigurationError, match="several video slots"):
        validate_config(cfg)


def test_a_launched_backend_takes_jpeg_frames_and_a_two_video_template_gets_mp4() -> None:
    launched = {"model": "m", "base_urls": ["http://127.0.0.1:8101/v1"], "launch": {"model": "/m", "gpus": 0}}
    cfg = validate_config({"backends": {"vlm": launched}, "judges": {
        "one": {"kind": "yes_no", "backend": "vlm", "template": "cosmos_reason1@2"},
        "two": {"kind": "yes_no", "backend": "vlm", "template": "video_edit@1"}}})
    gateway = Gateway(cfg)
    assert gateway.judges["one"].video_sampling.codec == "jpeg_frames"
    assert gateway.judges["two"].video_sampling.codec == "auto"  # Motion JPEG
