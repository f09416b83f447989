"""The fast media path against the real vLLM: a Motion JPEG clip (codec "auto") decodes in vLLM's
own video loader (run in the vLLM venv, as the server is configured by scripts/start_vllm.sh) to
the frames the gateway sent, every one, within PSNR 40 dB; the real server turns it into the same
number of video tokens as the x264 clip of the same frames (the old default), and scores it."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import openai

from judge_gateway.media import VideoMedia, VideoSampling, encode_video
from judge_gateway.media.resize import resize_rgb
from judge_gateway.media.wire import parse_data_url
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
