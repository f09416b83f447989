"""End to end against a real vLLM OpenAI server (CPU, tiny Qwen2.5-VL)."""

from __future__ import annotations

import base64
import io
import json
import math
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest
import uvicorn
from openai import AsyncOpenAI
from PIL import Image

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.judges import ScoreContext
from judge_gateway.media import MediaCache, VideoMedia, VideoSampling, encode_video
from judge_gateway.schema import RewardResponse, SampleInput
from judge_gateway.server import create_app
from tests.support.cli_configs import vlm_config, write_config
from tests.support.fake_openai import free_port
from tests.support.real_vllm_config import real_config

pytestmark = pytest.mark.integration


def png_b64(arr: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def images(n: int, size: int = 96) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    out = []
    for i in range(n):
        arr = np.zeros((size, size, 3), dtype=np.uint8)
        arr[..., i % 3] = 40 + 25 * i
        arr[size // 4: size // 2, size // 4: 3 * size // 4] = rng.integers(0, 256, 3, dtype=np.uint8)
        out.append(arr)
    return out


def frames(n: int, size: int = 64, seed: int = 0) -> np.ndarray:
    t = np.arange(n)[:, None, None, None]
    base = np.zeros((n, size, size, 3), dtype=np.int64) + (np.arange(size)[None, None, :, None] * 3 + t * 9 + seed * 50)
    return (base % 256).astype(np.uint8)


@pytest.fixture(scope="module")
def served_gateway(vllm, fake_backend):
    gw = Gateway(validate_config(real_config(vllm.base_url, fake_backend.base_url)))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(gw), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}", gw
    server.should_exit = True
    thread.join(timeout=15)


def yes_no_mass(top_logprobs) -> tuple[float, float]:
    """Independent of our parser: sum every case/space variant of Yes and of No."""
    p_yes = sum(math.exp(t.logprob) for t in top_logprobs if t.token.strip().lower() == "yes")
    p_no = sum(math.exp(t.logprob) for t in top_logprobs if t.token.strip().lower() == "no")
    return p_yes, p_no


async def test_images_and_videos_score_and_match_direct_openai(served_gateway, vllm):
    url, gw = served_gateway
    imgs = images(8)
    mp4 = encode_video(VideoMedia.from_array(frames(12, seed=1), fps=12.0), VideoSampling()).data_url
    samples = [{"prompt": f"a photo number {i} of a red square", "image": png_b64(a)} for i, a in enumerate(imgs)]
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        r = await http.post("/v1/rewards", json={"samples": samples, "judges": ["image_quality", "alignment"]})
        assert r.status_code == 200, r.text
        image_resp = RewardResponse.model_validate(r.json())
        videos = [
            {"prompt": "a ball rolls", "video": {"frames": [png_b64(f) for f in frames(8, seed=0)], "fps": 8}},
            {"prompt": "a ball falls", "video": {"mp4": mp4.split(",", 1)[1]}},
        ]
        r = await http.post("/v1/rewards", json={"samples": videos, "judges": ["cosmos_reason1"]})
        assert r.status_code == 200, r.text
        video_resp = RewardResponse.model_validate(r.json())

    for resp, judges in ((image_resp, ["image_quality", "alignment"]), (video_resp, ["cosmos_reason1"])):
        for res in resp.results:
            assert res.valid, res
            for j in judges:
                s = res.scores[j]
                assert s.valid and 0.0 <= s.reward <= 1.0
                assert s.details["answer_mass"] >= 0.5
                assert s.template.sha256 and s.model
    # The judge sees different inputs differently (the tiny model's split depends on them).
    assert len({round(r.scores["alignment"].reward, 6) for r in image_resp.results}) > 1
    v0 = video_resp.results[0].scores["cosmos_reason1"].details["video"]
    assert v0["num_frames"] == 8 and v0["fps"] == pytest.approx(8.0)
    assert video_resp.results[1].scores["cosmos_reason1"].details["video"]["source_fps"] == pytest.approx(12.0)

    # The same messages sent straight through openai give the same p_yes / p_no.
    direct = AsyncOpenAI(base_url=vllm.base_url, api_key="EMPTY")
    checks = [(SampleInput(**{**samples[3], "image": base64.b64decode(samples[3]["image"])}), "alignment",
               image_resp.results[3]),
              (SampleInput(prompt="a ball rolls", video={"frames": [f for f in frames(8, seed=0)], "fps": 8}),
               "cosmos_reason1", video_resp.results[0])]
    try:
        for sample, judge_name, result in checks:
            judge = gw.judges[judge_name]
            messages, _ = await judge.build_messages(sample, ScoreContext(media=MediaCache(), request_id="t"))
            completion = await direct.chat.completions.create(
                model=judge.model, messages=messages, max_tokens=1, temperature=0.0,
                logprobs=True, top_logprobs=20)
            p_yes, p_no = yes_no_mass(completion.choices[0].logprobs.content[0].top_logprobs)
            details = result.scores[judge_name].details
            assert details["p_yes"] == pytest.approx(p_yes, abs=1e-6)
            assert details["p_no"] == pytest.approx(p_no, abs=1e-6)
            positive = p_no if judge.positive == "no" else p_yes
            assert result.scores[judge_name].reward == pytest.approx(positive / (p_yes + p_no), abs=1e-6)
    finally:
        await direct.close()


async def test_rubric_and_final_score_end_to_end(served_gateway):
    url, _ = served_gateway
    body = {"samples": [{"prompt": "a red bicycle", "image": png_b64(images(1)[0])}],
            "judges": ["rubric", "final"]}
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        r = await http.post("/v1/rewards", json=body)
    assert r.status_code == 200, r.text
    res = r.json()["results"][0]
    rubric = res["scores"]["rubric"]
    assert rubric["valid"], rubric
    aspects = rubric["details"]["aspect_scores"]
    assert set(aspects) == {"Text Faithfulness", "Physical and Visual Quality", "Text Rendering"}
    numeric = [v for v in aspects.values() if v is not None]
    assert rubric["raw"] == pytest.approx(sum(numeric) / len(numeric))
    assert rubric["reward"] == pytest.approx((rubric["raw"] - 1) / 3)
    final = res["scores"]["final"]
    assert final["valid"], final
    assert final["reward"] == pytest.approx((final["raw"] - 1) / 4)


async def test_failures_stay_in_their_cells_next_to_real_judges(served_gateway):
    url, _ = served_gateway
    body = {"samples": [{"prompt": "a cat", "image": png_b64(a)} for a in images(2)],
            "judges": ["alignment", "rubric_garbage", "no_answer", "down", "stalled"]}
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        r = await http.post("/v1/rewards", json=body)
    assert r.status_code == 200, r.text
    for res in r.json()["results"]:
        s = res["scores"]
        assert s["alignment"]["valid"] and s["alignment"]["reward"] is not None
        assert s["rubric_garbage"]["error"]["code"] == "parse_error"
        assert s["no_answer"]["error"]["code"] == "answer_missing"
        assert s["down"]["error"]["code"] == "backend_unavailable"
        assert s["stalled"]["error"]["code"] == "timeout"
        assert res["valid"] is False and res["reward"] is None  # default policy: invalidate


async def test_group_transform_on_real_scores(served_gateway):
    url, _ = served_gateway
    samples = [{"prompt": "a red square", "image": png_b64(a), "group_id": "g" + str(i % 2)}
               for i, a in enumerate(images(6))]
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        r = await http.post("/v1/rewards", json={"samples": samples, "judges": ["alignment"],
                                                 "group_transform": "zscore"})
    res = r.json()["results"]
    for g in ("g0", "g1"):
        z = [x["group_reward"] for x in res if x["group_id"] == g]
        assert sum(z) == pytest.approx(0.0, abs=1e-9) and len(z) == 3


def test_cli_score_against_real_vllm(tmp_path, vllm):
    cfg = write_config(tmp_path, vlm_config(vllm.base_url, "Qwen/Qwen2.5-VL-7B-Instruct",
                                            {"alignment": "vqa_alignment@1"}, backend="qwen_vl"))
    for i, a in enumerate(images(3)):
        Image.fromarray(a).save(tmp_path / f"{i}.png")
        (tmp_path / f"{i}.txt").write_text(f"a picture {i}")
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "judge_gateway.cli", "score", str(tmp_path), "-o", str(out),
                           "--config", str(cfg), "--no-progress"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in (out / "scores.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(r["scores"]["alignment"]["valid"] for r in rows)
    assert {r["prompt"] for r in rows} == {"a picture 0", "a picture 1", "a picture 2"}


def test_start_vllm_script_status(vllm):
    proc = subprocess.run(["bash", "scripts/start_vllm.sh", "status", "--run-dir", str(vllm.run_dir),
                           "--name", vllm.name], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "running" in proc.stdout


async def test_vllm_sees_every_frame_the_judge_sampled(served_gateway, vllm):
    """scripts/start_vllm.sh serves with --media-io-kwargs video fps 30, so vLLM keeps our frames
    instead of resampling at its default 2 fps: more sampled frames means more prompt tokens."""
    _, gw = served_gateway
    judge = gw.judges["cosmos_reason1"]
    direct = AsyncOpenAI(base_url=vllm.base_url, api_key="EMPTY")
    tokens = {}
    try:
        for n in (8, 16):
            sample = SampleInput(prompt="x", video={"array": frames(n, seed=2), "fps": 8})
            messages, facts = await judge.build_messages(sample, ScoreContext(media=MediaCache(), request_id="t"))
            assert facts["video"]["num_frames"] == n
            c = await direct.chat.completions.create(model=judge.model, messages=messages, max_tokens=1)
            tokens[n] = c.usage.prompt_tokens
    finally:
        await direct.close()
    # at vLLM's default 2 fps both clips (1 s and 2 s) would be clamped to 4 frames
    assert tokens[16] > tokens[8]
