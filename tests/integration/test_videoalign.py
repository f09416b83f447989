"""VideoAlign head end to end: a tiny Qwen2-VL + reward-head checkpoint built offline in the
released layout, loaded by the real loader in a worker under the heads venv."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.media import VideoMedia
from judge_gateway.schema import RewardRequest
from tests.support.heads_env import (
    build_tiny_videoalign,
    heads_python,
    videoalign_checkpoint,
)
from tests.support.tolerance import assert_close

pytestmark = pytest.mark.integration
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_videoalign()


@pytest.fixture(scope="module")
async def gw(tiny):
    base = {"kind": "videoalign", "options": {"python": str(heads_python()), "checkpoint": str(videoalign_checkpoint(tiny)),
                                              "threads": 2, "max_wait_ms": 10_000, "max_batch_size": 3}}
    # `videoalign` closes a batch when it holds 3 videos (every request here sends 3, its cells go
    # out to the worker in one frame; the wait, 10 s, the most the config allows, is a margin): its
    # batches are a count
    # one video per forward, and its frames resized and patched as `preprocess = "device"` does
    # (the default on cuda; on this CPU the same ops as `reference`, through the device code path)
    unbatched = {"kind": "videoalign", "options": {**base["options"], "max_wait_ms": 0, "max_batch_size": 1,
                                                   "preprocess": "device"}}
    gateway = Gateway(validate_config({"judges": {"videoalign": base, "videoalign_1": unbatched}}))
    try:
        yield gateway
    finally:
        await gateway.aclose()


def _videos(tiny):
    with np.load(tiny / "videos.npz") as z:
        return [z[f"arr_{i}"] for i in range(len(z.files))]


async def test_loaded_checkpoint_scores_equal_in_memory_model_batched_and_not(gw, tiny):
    ref = json.loads((tiny / "reference.json").read_text())
    videos = _videos(tiny)
    # fps = 2: the checkpoint's rate, so every frame of these test clips is kept
    samples = [{"prompt": p, "video": VideoMedia.from_array(v, fps=2.0)} for v, p in zip(videos, ref["prompts"])]
    assert len(samples) == 3
    before = await gw.judges["videoalign"].worker.stats()
    resp = await gw.score(RewardRequest(samples=samples, judges=["videoalign", "videoalign_1"]))
    for r, want in zip(resp.results, ref["scores"]):
        batched, single = r.scores["videoalign"], r.scores["videoalign_1"]
        assert batched.valid and single.valid, (batched, single)
        assert batched.details["head"]["preprocess_mode"] == "reference"
        assert single.details["head"]["preprocess_mode"] == "device"
        for key in ("vq", "mq", "ta"):
            assert batched.details[key] == pytest.approx(want[key], abs=2e-4)
            assert batched.details[key] == pytest.approx(single.details[key], abs=2e-4)
        assert batched.raw == pytest.approx(want["overall"], abs=5e-4)
        assert batched.raw == pytest.approx(batched.details["vq"] + batched.details["mq"] + batched.details["ta"])
    stats = await gw.judges["videoalign"].worker.stats()
    # really batched: the three videos went through one forward (a count, not a timing)
    new = {k: v - before["batch_sizes"].get(k, 0) for k, v in stats["batch_sizes"].items()}
    assert {k: v for k, v in new.items() if v} == {"3": 1}, (before, stats)


async def test_sampling_follows_the_checkpoint_fps_not_the_videos(gw, tiny):
    """Must show: the same 2-second clip at 8, 16 and 24 fps is sampled at the checkpoint's 2 fps
    (4 frames spread over the whole clip, VideoAlign's rule), and the sampling is recorded."""
    from tests.support.tiny_videoalign import clip_frames

    samples = [{"prompt": "a red ball rolls to the right", "video": VideoMedia.from_array(clip_frames(f), fps=f)}
               for f in (8.0, 16.0, 24.0)]
    resp = await gw.score(RewardRequest(samples=samples, judges=["videoalign"]))
    recorded = []
    for r, f in zip(resp.results, (8.0, 16.0, 24.0)):
        s = r.scores["videoalign"]
        assert s.valid, s
        d = s.details
        recorded.append({k: d[k] for k in ("source_fps", "source_frames", "frames", "frame_indices",
                                           "frame_times_s", "sampled_fps", "checkpoint_fps")})
        n = int(2 * f)
        want = [int(np.round(x)) for x in np.linspace(0, n - 1, 4)]  # linspace + round, as the reference
        assert d["source_fps"] == f and d["source_frames"] == n and d["checkpoint_fps"] == 2.0
        assert d["sampled_fps"] == 2.0 and d["frames"] == 4 and d["frame_indices"] == want
        assert d["frame_times_s"] == [round(i / f, 6) for i in want]
    print("\nvideoalign sampling:", json.dumps(recorded, indent=1))
    # the clips' timestamps agree within a source frame, so do the scores' frames (not exactly)
    for a, b in zip(recorded[0]["frame_times_s"], recorded[2]["frame_times_s"]):
        assert abs(a - b) <= 1 / 8


async def test_videoalign_needs_a_video(gw):
    from judge_gateway.media import ImageMedia

    resp = await gw.score(RewardRequest(
        samples=[{"prompt": "x", "image": ImageMedia.from_array(np.zeros((8, 8, 3), np.uint8))}],
        judges=["videoalign"]))
    assert not resp.results[0].scores["videoalign"].valid


async def test_cosmos_rl_dance_grpo_keys_are_the_peers_formula(gw, tiny):
    """cosmos-rl's dance_grpo keys through enqueue / pull equal its formula (model/dance_grpo.py
    285-295: VideoAlign's `_norm` with the checkpoint's inference_config, Overall = VQ + MQ + TA)
    on the reward head's own logits for those videos (details raw_vq / raw_mq / raw_ta)."""
    import httpx

    from judge_gateway.server import create_app
    from tests.support import peer_formulas as peer
    from tests.support.cosmos_client import enqueue_body, headers, poll

    ref = json.loads((tiny / "reference.json").read_text())
    stats = json.loads((videoalign_checkpoint(tiny) / "model_config.json").read_text())["inference_config"]
    app = create_app(gw)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
            for video, prompt in zip(_videos(tiny), ref["prompts"]):
                arr = np.ascontiguousarray(video.transpose(3, 0, 1, 2))[None]  # [1, 3, T, H, W], as the trainer sends
                meta = {"reward_fn": {"dance_grpo": 1.0}, "prompts": [prompt], "media_type": "video",
                        "video_infos": [{"video_fps": 2.0}]}
                r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, arr), headers=headers())
                assert r.status_code == 200, r.text
                body = (await poll(client, r.json()["uuid"], "dance_grpo", timeout=300, interval=0.2)).json()
                assert body["valid"] == [True], body["errors"]
                d = body["judge_scores"][0]["details"]
                want = peer.dance_grpo({"VQ": d["raw_vq"], "MQ": d["raw_mq"], "TA": d["raw_ta"]}, stats)
                for key, dim in (("vq_reward", "VQ"), ("mq_reward", "MQ"), ("ta_reward", "TA"),
                                 ("overall_reward", "Overall")):
                    # the same float64 arithmetic on the worker's numbers: a few float64 spacings
                    assert_close(body["scores"][key], [want[dim]], what=key, dtype="float64",
                                 scale=max(1.0, abs(want[dim])))
    finally:
        await app.state.cosmos_rl.aclose()
