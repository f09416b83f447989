"""The fast media path against the real vLLM: a Motion JPEG clip decodes in vLLM's own video loader
(run in the vLLM venv, as the server is configured by scripts/start_vllm.sh) to the frames the
gateway sent, every one, within PSNR 40 dB; the real server turns it into the same number of video
tokens as the x264 clip of the same frames (the old default), and scores it. A JPEG frame list
(codec jpeg_frames, with its media_io_kwargs) is the same clip to vLLM's loader and to the server.
An mp4 passed through untouched keeps the gateway's frame indices in vLLM's qwen2_vl loader, and the
judge's grid when the request names its per-frame pixels (what a pass-through path would rely on)."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import openai

from judge_gateway.media import VideoMedia, VideoSampling, encode_video
from judge_gateway.media.resize import resize_rgb
from judge_gateway.media.wire import _data_url, parse_data_url
from tests.support.natural_media import natural_frames, psnr
from tests.support.vllm_server import vllm_python

# vLLM's loader for Qwen2.5-VL (the qwen2_vl backend), with the server's --media-io-kwargs fps 30
LOAD = """
import json, sys, numpy as np
from vllm.multimodal.video import VIDEO_LOADER_REGISTRY
loader = VIDEO_LOADER_REGISTRY.load("qwen2_vl")
out = {}
for name, path in json.loads(sys.argv[1]).items():
    frames, meta = loader.load_bytes(open(path, "rb").read(), fps=30)
    np.save(path + ".npy", np.asarray(frames))
    out[name] = {"fps": meta["fps"], "total": meta["total_num_frames"], "indices": list(meta["frames_indices"])}
print(json.dumps(out))
"""


def test_motion_jpeg_decodes_in_vllm_to_the_frames_sent(vllm, tmp_path) -> None:
    frames = natural_frames(17, 448, 252)
    video = VideoMedia.from_array(frames, 12)
    sampling = VideoSampling(max_pixels=224 * 126 + 1000, size_multiple=28)  # a resize, as a judge's budget
    clips = {"mjpeg": encode_video(video, sampling),
             "libx264": encode_video(video, VideoSampling(max_pixels=224 * 126 + 1000, codec="libx264",
                                                          resampler="pil"))}
    assert clips["mjpeg"].codec == "mjpeg" and clips["mjpeg"].frame_indices == clips["libx264"].frame_indices
    w, h = clips["mjpeg"].width, clips["mjpeg"].height
    sent = np.stack([resize_rgb(frames[i], w, h) for i in clips["mjpeg"].frame_indices])  # what the gateway encoded
    paths = {}
    for name, enc in clips.items():
        paths[name] = str(tmp_path / f"{name}.mp4")
        (tmp_path / f"{name}.mp4").write_bytes(parse_data_url(enc.data_url)[1])
    done = subprocess.run([str(vllm_python()), "-c", LOAD, json.dumps(paths)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    meta = json.loads(done.stdout.strip().splitlines()[-1])
    for name, enc in clips.items():
        got = np.load(paths[name] + ".npy")
        assert meta[name]["total"] == enc.num_frames == 16, name  # every frame, none resampled
        assert meta[name]["fps"] == enc.fps == 12.0, name
        assert got.shape == (16, h, w, 3), name
    assert psnr(np.load(paths["mjpeg"] + ".npy"), sent) >= 40.0
    # the real server: the same video tokens as x264's clip of the same frames, and an answer
    client = openai.OpenAI(base_url=vllm.base_url, api_key="EMPTY", timeout=180, max_retries=0)
    usage = {}
    for name, enc in clips.items():
        resp = client.chat.completions.create(
            model=vllm.model, max_tokens=1, temperature=0, logprobs=True, top_logprobs=5,
            messages=[{"role": "user", "content": [{"type": "video_url", "video_url": {"url": enc.data_url}},
                                                   {"type": "text", "text": "Is the motion plausible?"}]}])
        assert resp.choices[0].logprobs.content[0].top_logprobs, name
        usage[name] = resp.usage.prompt_tokens
    assert usage["mjpeg"] == usage["libx264"], usage


# vLLM's loaders for the same frames as a JPEG frame list (with the request's media_io_kwargs) and as
# the Motion JPEG mp4 (the server's --media-io-kwargs fps 30), and for an mp4 passed through as sent
LOAD_BOTH = """
import base64, json, sys, numpy as np
from vllm.multimodal.media.image import ImageMediaIO
from vllm.multimodal.media.video import VideoMediaIO
from vllm.multimodal.video import VIDEO_LOADER_REGISTRY
spec = json.loads(open(sys.argv[1]).read())
io_ = VideoMediaIO(ImageMediaIO(), **spec["media_io_kwargs"])
frames, meta = io_.load_base64("video/jpeg", spec["jpeg_frames"]).media
np.save(sys.argv[1] + ".frames.npy", np.asarray(frames))
loader = VIDEO_LOADER_REGISTRY.load("qwen2_vl")
out = {"frames": {k: meta[k] for k in ("fps", "total_num_frames", "frames_indices")}}
for name in ("mjpeg", "source"):
    got, m = loader.load_bytes(base64.b64decode(spec[name]), fps=30)
    np.save(sys.argv[1] + f".{name}.npy", np.asarray(got))
    out[name] = {"fps": m["fps"], "total_num_frames": m["total_num_frames"], "frames_indices": list(m["frames_indices"])}
print(json.dumps(out))
"""


def _ask(client, model, url: str, extra: dict) -> tuple[int, list[tuple[str, float]]]:
    resp = client.chat.completions.create(
        model=model, max_tokens=1, temperature=0, logprobs=True, top_logprobs=5, extra_body=extra,
        messages=[{"role": "user", "content": [{"type": "video_url", "video_url": {"url": url}},
                                               {"type": "text", "text": "Is the motion plausible?"}]}])
    top = resp.choices[0].logprobs.content[0].top_logprobs
    return resp.usage.prompt_tokens, [(t.token, t.logprob) for t in top]


def test_a_jpeg_frame_list_is_the_motion_jpeg_clip_and_a_passed_through_mp4_keeps_the_frames(vllm, tmp_path) -> None:
    import base64

    from tests.support.natural_media import h264_clip

    source = h264_clip(natural_frames(33, 448, 252), 16, 18)  # a generator's clip: 33 frames at 16 fps
    video = VideoMedia.from_mp4(source)
    per_frame = 150 * 90
    sampling = {"max_frames": 160, "total_pixels": 32 * per_frame}  # cosmos-rl's rule, a small budget
    frames = encode_video(video, VideoSampling(**sampling, codec="jpeg_frames"))
    mjpeg = encode_video(video, VideoSampling(**sampling, codec="mjpeg"))
    assert frames.frame_indices == mjpeg.frame_indices == list(range(32))
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"media_io_kwargs": frames.media_io_kwargs,
                                "jpeg_frames": frames.data_url.partition(",")[2],
                                "mjpeg": base64.b64encode(parse_data_url(mjpeg.data_url)[1]).decode(),
                                "source": base64.b64encode(source).decode()}))
    done = subprocess.run([str(vllm_python()), "-c", LOAD_BOTH, str(spec)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    meta = json.loads(done.stdout.strip().splitlines()[-1])
    # vLLM's loader: the frame list is the Motion JPEG clip (its frames, count, rate and indices)
    assert meta["frames"] == meta["mjpeg"] == {"fps": 16.0, "total_num_frames": 32, "frames_indices": list(range(32))}
    listed, muxed = np.load(f"{spec}.frames.npy"), np.load(f"{spec}.mjpeg.npy")
    assert listed.shape == muxed.shape == (32, frames.height, frames.width, 3)
    assert psnr(listed, muxed) >= 45.0  # the same JPEG bytes, decoded by PIL and by FFmpeg
    # the source mp4 as sent: vLLM keeps the frames the gateway keeps (every one up to an even count)
    assert meta["source"]["frames_indices"] == frames.frame_indices
    assert np.load(f"{spec}.source.npy").shape == (32, 252, 448, 3)
    # the real server: the same tokens and answer for the list and the mp4; the passed-through source
    # gets the judge's grid when the request names its per-frame pixels
    client = openai.OpenAI(base_url=vllm.base_url, api_key="EMPTY", timeout=300, max_retries=0)
    grid = {"mm_processor_kwargs": {"max_pixels": per_frame, "min_pixels": 3136}}
    as_list = _ask(client, vllm.model, frames.data_url, {"media_io_kwargs": {"video": frames.media_io_kwargs}, **grid})
    as_mp4 = _ask(client, vllm.model, mjpeg.data_url, grid)
    passed = _ask(client, vllm.model, _data_url("video/mp4", source), grid)
    assert as_list[0] == as_mp4[0] == passed[0], (as_list[0], as_mp4[0], passed[0])
    assert as_list[1][0][0] == as_mp4[1][0][0] and abs(as_list[1][0][1] - as_mp4[1][0][1]) < 0.01, (as_list, as_mp4)
