"""Smoke tests of the real vLLM CPU server that the integration tests rely on.

Runs against the session's server (tests/integration/conftest.py: the tiny Qwen2.5-VL of
tests/support/build_tiny_vlm.py, started through scripts/start_vllm.sh --cpu) and checks, with the openai client,
the behaviour judge-gateway depends on: served names, Yes/No top logprobs on images and mp4
videos, input-dependent Yes/No splits, determinism, regex structured outputs, and a clean stop.
A failed start is a failure, not a skip.
"""

from __future__ import annotations

import base64
import io
import math
import os
import re

import numpy as np
import pytest
from PIL import Image

from tests.support.vllm_server import VllmServer

openai = pytest.importorskip("openai")
av = pytest.importorskip("av")

pytestmark = pytest.mark.integration

# The session server serves the tiny model under every judge model's name; this one comes first.
FIRST_NAME = "nvidia/Cosmos-Reason1-7B-Reward"
YES_NO_QUESTION = "Does this image show a cat? Answer Yes or No."
RUBRIC_REGEX = (
    r"# Detailed Judgement\n1\. Text Faithfulness:\n## Justification: [a-z ]{5,40}\n"
    r"## Score: [1-4]\.[0-9]\n"
)


# --------------------------------------------------------------------------- media helpers


def png_data_url(img: Image.Image) -> str:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def solid(color: tuple[int, int, int], size=(128, 96)) -> Image.Image:
    return Image.new("RGB", size, color)


def video_frames(n: int, seed: int = 0, size: int = 112) -> np.ndarray:
    rng = np.random.default_rng(seed)
    frames = np.zeros((n, size, size, 3), np.uint8)
    frames[..., 0] = 40 + 10 * seed
    for i in range(n):  # a bright bar moving right
        x = (i * 7) % (size - 16)
        frames[i, 24:88, x : x + 16] = (255, 200, 0)
    frames += rng.integers(0, 20, frames.shape, dtype=np.uint8)
    return frames


def encode_mp4(frames: np.ndarray, fps: int, codec: str) -> bytes:
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.height, stream.width = frames.shape[1:3]
        stream.pix_fmt = "yuv420p"
        for frame in frames:
            for packet in stream.encode(
                av.VideoFrame.from_ndarray(frame, format="rgb24")
            ):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()


def encode_mp4_any(frames: np.ndarray, fps: int) -> tuple[bytes, str]:
    """H.264 when this PyAV build can encode it, else MPEG-4 part 2."""
    errors = []
    for codec in ("libx264", "h264", "mpeg4"):
        try:
            return encode_mp4(frames, fps, codec), codec
        except (ValueError, av.FFmpegError) as exc:  # codec not built into this FFmpeg
            errors.append(f"{codec}: {exc}")
    raise RuntimeError("no mp4 encoder available: " + "; ".join(errors))


def mp4_data_url(data: bytes) -> str:
    return "data:video/mp4;base64," + base64.b64encode(data).decode()


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def smoke_server(vllm) -> VllmServer:
    """The session's vLLM server (tests/integration/conftest.py): no second server for the smoke
    tests; test_stop_ends_the_process stops it, and runs last in the session for that reason."""
    # the first request pays for lazy initialisation (seconds); keep it out of the tests
    client = openai.OpenAI(base_url=vllm.base_url, api_key="EMPTY", timeout=180, max_retries=0)
    client.chat.completions.create(
        model=vllm.model,
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "image_url",
                        "image_url": {"url": png_data_url(solid((9, 9, 9)))},
                    },
                    {"type": "text", "text": "warm up"},
                ],
            }
        ],
        max_tokens=1,
    )
    return vllm


@pytest.fixture(scope="module")
def client(smoke_server):
    return openai.OpenAI(
        base_url=smoke_server.base_url, api_key="EMPTY", timeout=120, max_retries=0
    )


def ask_yes_no(client, content, model=FIRST_NAME):
    """One yes/no logprob request; returns (p_yes, p_no, top logprobs, response)."""
    resp = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": content}],
        max_tokens=1,
        temperature=0,
        logprobs=True,
        top_logprobs=20,
    )
    top = resp.choices[0].logprobs.content[0].top_logprobs
    p_yes = sum(math.exp(t.logprob) for t in top if t.token.strip().lower() == "yes")
    p_no = sum(math.exp(t.logprob) for t in top if t.token.strip().lower() == "no")
    return p_yes, p_no, top, resp


def image_question(img: Image.Image, text: str = YES_NO_QUESTION):
    return [
        {"type": "image_url", "image_url": {"url": png_data_url(img)}},
        {"type": "text", "text": text},
    ]


# --------------------------------------------------------------------------- tests


def test_models_lists_served_names(client, smoke_server):
    ids = {m.id for m in client.models.list().data}
    assert smoke_server.served_names[0] == FIRST_NAME
    assert len(smoke_server.served_names) >= 2 and set(smoke_server.served_names) <= ids


def test_image_top_logprobs_hold_yes_no(client):
    p_yes, p_no, top, _ = ask_yes_no(client, image_question(solid((200, 30, 30))))
    tokens = {t.token for t in top}
    assert len(top) == 20
    assert {"Yes", "No"} <= tokens
    assert {" Yes", " No", "yes", "no"} & tokens  # case/space variants are there too
    assert p_yes + p_no >= 0.5, (p_yes, p_no, [(t.token, t.logprob) for t in top])


def test_every_served_alias_answers(client, smoke_server):
    for name in smoke_server.served_names:
        p_yes, p_no, _, resp = ask_yes_no(
            client, image_question(solid((30, 30, 200))), model=name
        )
        # vLLM names the first served name in the reply, whichever alias was asked for
        assert resp.model == FIRST_NAME
        assert p_yes + p_no >= 0.5


def test_split_differs_between_images(client):
    splits = []
    for color in [(230, 20, 20), (20, 20, 230)]:
        p_yes, p_no, _, _ = ask_yes_no(client, image_question(solid(color)))
        splits.append(p_yes / (p_yes + p_no))
    assert abs(splits[0] - splits[1]) > 0.05, splits


def test_split_differs_between_texts(client):
    img = solid((20, 200, 20))
    splits = []
    for text in [
        "Does this image show a cat?",
        "Are the objects consistent with gravity?",
    ]:
        p_yes, p_no, _, _ = ask_yes_no(client, image_question(img, text))
        splits.append(p_yes / (p_yes + p_no))
    assert abs(splits[0] - splits[1]) > 0.005, splits


def test_mp4_video_url(client, record_property):
    data, codec = encode_mp4_any(video_frames(16), fps=8)
    record_property("mp4_codec", codec)
    content = [
        {"type": "video_url", "video_url": {"url": mp4_data_url(data)}},
        {"type": "text", "text": "Does the video contain any physical anomalies?"},
    ]
    p_yes, p_no, _, resp = ask_yes_no(client, content)
    assert p_yes + p_no >= 0.5, (codec, p_yes, p_no)
    text_only = ask_yes_no(client, content[1:])[3]
    assert (
        resp.usage.prompt_tokens > text_only.usage.prompt_tokens + 2
    )  # frames became tokens


@pytest.mark.parametrize("codec", ["libx264", "mpeg4"])
def test_mp4_codecs_decode(client, codec):
    try:
        data = encode_mp4(video_frames(8, seed=1), fps=4, codec=codec)
    except (ValueError, av.FFmpegError) as exc:
        pytest.skip(f"this PyAV build cannot encode {codec}: {exc}")
    content = [
        {"type": "video_url", "video_url": {"url": mp4_data_url(data)}},
        {"type": "text", "text": "Is the motion plausible?"},
    ]
    p_yes, p_no, _, _ = ask_yes_no(client, content)
    assert p_yes + p_no >= 0.5


def test_video_keeps_every_frame_we_send(client):
    """scripts/start_vllm.sh serves with --media-io-kwargs '{"video": {"fps": 30}}', so vLLM keeps
    every frame of a clip up to 30 fps instead of resampling at its default 2 fps: the frames
    judge-gateway samples (and records) are the frames the model sees."""

    def prompt_tokens(n_frames, fps):
        data, _ = encode_mp4_any(video_frames(n_frames, seed=2), fps=fps)
        content = [
            {"type": "video_url", "video_url": {"url": mp4_data_url(data)}},
            {"type": "text", "text": "Any anomalies?"},
        ]
        return ask_yes_no(client, content)[3].usage.prompt_tokens

    two_s_8fps = prompt_tokens(16, 8)
    two_s_16fps = prompt_tokens(32, 16)
    four_s_8fps = prompt_tokens(32, 8)
    # the token count follows the frame count, not the duration
    assert two_s_16fps == four_s_8fps
    # 112x112 frames: 16 tokens per temporal patch (2 frames); 16 frames more = 128 tokens
    assert four_s_8fps - two_s_8fps == 128


def test_video_split_depends_on_content(client):
    splits = []
    for color in [(230, 20, 20), (20, 20, 230)]:
        frames = np.zeros((8, 112, 112, 3), np.uint8)
        frames[:] = color
        data, _ = encode_mp4_any(frames, fps=4)
        content = [
            {"type": "video_url", "video_url": {"url": mp4_data_url(data)}},
            {"type": "text", "text": "Any anomalies?"},
        ]
        p_yes, p_no, _, _ = ask_yes_no(client, content)
        splits.append(p_yes / (p_yes + p_no))
    assert abs(splits[0] - splits[1]) > 0.05, splits


def test_identical_requests_identical_logprobs(client):
    content = image_question(Image.fromarray(video_frames(1, seed=5)[0]))
    runs = []
    for _ in range(3):
        _, _, top, _ = ask_yes_no(client, content)
        runs.append([(t.token, t.logprob) for t in top])
    assert runs[0] == runs[1] == runs[2]


def test_top_logprobs_above_20_rejected(client):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model=FIRST_NAME,
            messages=[{"role": "user", "content": "Yes or no?"}],
            max_tokens=1,
            logprobs=True,
            top_logprobs=21,
        )


def test_structured_outputs_regex(client):
    resp = client.chat.completions.create(
        model=FIRST_NAME,
        messages=[
            {
                "role": "user",
                "content": image_question(solid((120, 120, 20)), "Judge the image."),
            }
        ],
        max_tokens=120,
        temperature=0,
        extra_body={"structured_outputs": {"regex": RUBRIC_REGEX}},
    )
    text = resp.choices[0].message.content
    assert re.fullmatch(RUBRIC_REGEX, text), text
    assert resp.choices[0].finish_reason == "stop"
    # without the constraint the tiny model does not write a rubric
    free = client.chat.completions.create(
        model=FIRST_NAME,
        messages=[{"role": "user", "content": "Judge the image."}],
        max_tokens=30,
        temperature=0,
    )
    assert not re.fullmatch(RUBRIC_REGEX, free.choices[0].message.content or "")


@pytest.mark.stops_the_session_vllm
def test_stop_ends_the_process(smoke_server):
    pid_file = smoke_server.run_dir / f"{smoke_server.name}.pid"
    assert pid_file.exists() and smoke_server.is_alive()
    smoke_server.stop()
    assert not smoke_server.is_alive()
    assert not pid_file.exists()
    # nothing of the server's process group is left either
    with pytest.raises(ProcessLookupError):
        os.killpg(smoke_server.pid, 0)
