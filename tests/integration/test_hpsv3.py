"""hpsv3 head end to end: a tiny Qwen2-VL + HPSv3 checkpoint built offline with the real `hpsv3`
package (tests/support/tiny_hpsv3.py), loaded from local paths by HPSv3RewardInferencer in a
worker under .venv-hpsv3, scored through the Gateway, its HTTP API and cosmos-rl's protocol.

The key check: the gateway's numbers equal what the package's own documented call,
`HPSv3RewardInferencer(yaml, checkpoint, "cpu").reward(png_paths, prompts)`, gave for the same
files (reference.json, computed when the checkpoint was built)."""

from __future__ import annotations

import base64
import json
import math
import os
import subprocess

import httpx
import numpy as np
import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.media import VideoMedia
from judge_gateway.schema import RewardRequest, RewardResponse
from judge_gateway.server import create_app
from tests.support.cosmos_client import enqueue_body, headers, poll
from tests.support.heads_env import (
    ROOT,
    build_tiny_hpsv3,
    hpsv3_judge,
    hpsv3_python,
    hpsv3_tiny_yaml,
)
from tests.support.natural_media import photo_path
from tests.support.tolerance import assert_close

pytestmark = pytest.mark.integration
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TOL = 1e-4  # fp32 on CPU; batched vs single forwards differ by ~1e-5


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_hpsv3()


@pytest.fixture(scope="module")
def ref(tiny):
    return json.loads((tiny / "reference.json").read_text())


@pytest.fixture(scope="module")
def images(tiny):
    with np.load(tiny / "images.npz") as z:
        return [z[f"arr_{i}"] for i in range(len(z.files))]


@pytest.fixture(scope="module")
async def gw(tiny):
    judges = {
        # the package's shipped yaml, base model replaced by the tiny one; batches of up to 4
        "hpsv3": hpsv3_judge(tiny, threads=2, max_wait_ms=300, max_batch_size=4),
        # the tiny yaml (which names the base model itself), one image per forward
        "hpsv3_1": {"kind": "hpsv3", "options": {
            "python": str(hpsv3_python()), "checkpoint": str(tiny / "HPSv3.safetensors"),
            "config": str(hpsv3_tiny_yaml(tiny)), "threads": 2, "max_wait_ms": 0, "max_batch_size": 1}},
        "hpsv3_video": {**hpsv3_judge(tiny, threads=2, max_wait_ms=50), "default": False,
                        "video": {"num_frames": 2}},
        # closes a batch when it holds 4 images: a request's cells go out to the worker in one
        # frame, and the wait (10 s, the most the config allows) is a margin: batches are a count
        "hpsv3_4": {**hpsv3_judge(tiny, threads=2, max_wait_ms=10_000, max_batch_size=4), "default": False},
        # the pixels made as tensor ops on the head's device (the default on cuda)
        "hpsv3_device": {**hpsv3_judge(tiny, threads=2, max_wait_ms=300, max_batch_size=4, preprocess="device"),
                         "default": False},
    }
    gateway = Gateway(validate_config({"judges": judges}))
    try:
        yield gateway
    finally:
        await gateway.aclose()


def _samples(prompts, images):
    from judge_gateway.media import ImageMedia

    return [{"prompt": p, "image": ImageMedia.from_array(img)} for p, img in zip(prompts, images)]


async def test_scores_equal_the_packages_own_reward_batched_and_not(gw, ref, images):
    before = await gw.judges["hpsv3_4"].worker.stats()
    resp = await gw.score(RewardRequest(samples=_samples(ref["prompts"], images), judges=["hpsv3", "hpsv3_1", "hpsv3_4"]))
    after = await gw.judges["hpsv3_4"].worker.stats()
    assert len(images) == 4
    assert len(set(ref["token_lengths"])) > 1  # the prompts differ in length: batches are padded
    mus = []
    for r, (mu, log_sigma), single_ref in zip(resp.results, ref["package"], ref["in_memory"]):
        batched, single, full = r.scores["hpsv3"], r.scores["hpsv3_1"], r.scores["hpsv3_4"]
        assert batched.valid and single.valid and full.valid, (batched, single, full)
        assert full.raw == pytest.approx(mu, abs=TOL)
        assert full.details["log_sigma"] == pytest.approx(log_sigma, abs=TOL)
        # raw (and, with no normalisation configured, reward) is mu; sigma = exp(log sigma) in details
        assert batched.raw == pytest.approx(mu, abs=TOL) and batched.reward == batched.raw
        assert batched.details["log_sigma"] == pytest.approx(log_sigma, abs=TOL)
        assert batched.details["sigma"] == pytest.approx(math.exp(log_sigma), rel=1e-3)
        # one image per forward: the same numbers, and the in-memory model before saving
        assert single.raw == pytest.approx(batched.raw, abs=TOL)
        assert single.details["log_sigma"] == pytest.approx(batched.details["log_sigma"], abs=TOL)
        assert single.raw == pytest.approx(single_ref[0], abs=TOL)
        mus.append(batched.raw)
    assert max(mus) - min(mus) > 1.0  # distinct items give distinct scores: the checks have teeth
    # really batched: the four images went through one forward (a count, not a timing)
    new = {k: v - before["batch_sizes"].get(k, 0) for k, v in after["batch_sizes"].items()}
    assert {k: v for k, v in new.items() if v} == {"4": 1}, (before, after)
    single_stats = await gw.judges["hpsv3_1"].worker.stats()
    assert set(single_stats["batch_sizes"]) == {"1"}


async def test_batch_order_does_not_change_scores(gw, ref, images):
    prompts = ref["prompts"]
    order = [2, 0, 3, 1]
    resp = await gw.score(RewardRequest(samples=_samples([prompts[i] for i in order], [images[i] for i in order]),
                                        judges=["hpsv3"]))
    for r, i in zip(resp.results, order):
        s = r.scores["hpsv3"]
        assert s.valid and s.raw == pytest.approx(ref["package"][i][0], abs=TOL)
        assert s.details["log_sigma"] == pytest.approx(ref["package"][i][1], abs=TOL)


@pytest.fixture(scope="module")
def fidelity(tiny):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([str(hpsv3_python()), "-m", "tests.support.hpsv3_preprocess_fidelity", str(tiny),
                           str(photo_path())],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("images", ["natural", "noise"])
def test_device_preprocessing_is_the_packages_batch_within_the_measured_bounds(fidelity, images):
    """`preprocess = "device"` against the package's prepare_batch, same images and prompts:
    token ids, masks and grids identical; the resize at PSNR >= 40 dB against the package's PIL
    bicubic; single pixels may differ by more (PIL clips its first pass to uint8, torch does not:
    a few pixels at text edges and in noise); mu and log sigma within 0.05, and mu within 1% of
    its spread over natural images. The measured figures, well inside each bound, are in
    docs/judges/heads/hpsv3.md."""
    assert fidelity["modes"] == ["device", "reference"]
    row = fidelity[images]
    assert row["images"] >= (11 if images == "natural" else 2)
    assert row["ids_equal"] and row["grid_equal"], row
    assert "pixel_shapes" not in row, row
    assert row["min_psnr_db"] >= 40.0, row
    assert row["max_pixel_diff"] <= 1.0, row
    assert row["max_abs_delta_mu"] <= 0.05 and row["max_abs_delta_log_sigma"] <= 0.05, row
    if images == "natural":
        assert row["mu_spread"] > 1.0, row  # the images score apart: the bound has teeth
        assert row["max_abs_delta_mu"] <= 0.01 * row["mu_spread"], row


def test_device_preprocessing_refuses_a_processor_it_cannot_reproduce(fidelity):
    """The device path assumes a 1/255 rescale, normalisation, 28-pixel patches and no second
    resize by the processor: the loaded one passes, a copy that differs in any is refused (the
    head then fails to load and says to set preprocess = "reference")."""
    said = fidelity["check_processor"]
    assert said["loaded"] is None
    assert "1/255" in said["rescale_1_127"]
    assert "normalise" in said["no_normalize"]
    assert "resize again" in said["max_pixels_small"] and "resize again" in said["patch_16"]


async def test_device_preprocessing_through_the_gateway_scores_the_packages_numbers(gw, ref, images):
    resp = await gw.score(RewardRequest(samples=_samples(ref["prompts"], images), judges=["hpsv3", "hpsv3_device"]))
    for r, (mu, log_sigma) in zip(resp.results, ref["package"]):
        dev, reference = r.scores["hpsv3_device"], r.scores["hpsv3"]
        assert dev.valid, dev
        assert dev.details["head"]["preprocess_mode"] == "device"
        assert reference.details["head"]["preprocess_mode"] == "reference"  # the default off cuda
        assert dev.raw == pytest.approx(mu, abs=0.05)
        assert dev.details["log_sigma"] == pytest.approx(log_sigma, abs=0.05)


async def test_head_reports_how_it_scored(gw, ref, images, tiny):
    resp = await gw.score(RewardRequest(samples=_samples(ref["prompts"][:1], images[:1]), judges=["hpsv3"]))
    s = resp.results[0].scores["hpsv3"]
    head = s.details["head"]
    assert s.model == str(tiny / ref["checkpoint"])
    assert head["hpsv3_version"] == "1.0.0" and head["transformers_version"] == "4.45.2"
    assert head["attn_implementation"] == "sdpa" and head["weights_dtype"] == "float32"
    assert head["rm_head_dtype"] == "float32" and head["image_pixels"] == 448 * 448
    assert head["padding_side"] == "right" and head["base_model"] == str(tiny / ref["base"])
    assert head["vision_per_image"] is True  # SDPA here: the vision tower runs image by image
    assert head["config"].endswith("hpsv3/config/HPSv3_7B.yaml")  # the package's shipped yaml
    assert s.details["device"] == "cpu" and s.details["dtype"] == "fp32"


async def test_http_api_returns_the_shared_schema(gw, ref, tiny):
    """PNG files -> /v1/rewards -> the package's numbers for the same files."""
    app = create_app(gw)
    body = {"samples": [{"prompt": p, "image": base64.b64encode((tiny / "images" / f"{i}.png").read_bytes()).decode()}
                        for i, p in enumerate(ref["prompts"])], "judges": ["hpsv3"], "request_id": "hps-1"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
        r = await client.post("/v1/rewards", json=body)
    assert r.status_code == 200, r.text
    data = r.json()
    parsed = RewardResponse.model_validate(data)
    assert data["schema_version"] == 1 and parsed.id == "hps-1"
    for res, (mu, log_sigma) in zip(data["results"], ref["package"]):
        s = res["scores"]["hpsv3"]
        assert s["valid"] is True and s["error"] is None and s["judge"] == "hpsv3"
        assert s["raw"] == pytest.approx(mu, abs=TOL) and s["reward"] == pytest.approx(mu, abs=TOL)
        assert s["details"]["sigma"] == pytest.approx(math.exp(log_sigma), rel=1e-3)
        assert res["reward"] == pytest.approx(mu, abs=TOL) and res["valid"] is True


async def test_cosmos_rl_hpsv3_reward_is_mu(gw):
    rng = np.random.default_rng(5)
    batch = rng.integers(0, 256, size=(2, 64, 64, 3), dtype=np.uint8)
    prompts = ["a red square", "colourful noise"]
    direct = await gw.score(RewardRequest(samples=_samples(prompts, list(batch)), judges=["hpsv3"]))
    app = create_app(gw)
    meta = {"reward_fn": {"hpsv3": 1.0}, "prompts": prompts, "media_type": "image"}
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
            r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, batch), headers=headers())
            assert r.status_code == 200, r.text
            body = (await poll(client, r.json()["uuid"], "hpsv3", timeout=120, interval=0.1)).json()
    finally:
        await app.state.cosmos_rl.aclose()
    assert body["valid"] == [True, True], body
    want = [x.scores["hpsv3"].raw for x in direct.results]
    assert body["scores"] == {"hpsv3": [pytest.approx(v, abs=TOL) for v in want]}
    assert all("sigma" in js["details"] for js in body["judge_scores"])


PEER_HPSV3 = """
import json, sys, numpy as np, torch
from PIL import Image
from hpsv3 import HPSv3RewardInferencer
config, checkpoint, npz, prompts = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
inferencer = HPSv3RewardInferencer(config_path=config, checkpoint_path=checkpoint, device="cpu")
out = []
with torch.inference_mode():  # cosmos-rl model/hpsv3.py 57-76, one enqueue (a batch of one) per image
    for arr, prompt in zip(np.load(npz).values(), prompts):
        rewards = inferencer.reward(prompts=[prompt], image_paths=[Image.fromarray(arr).convert("RGB")])
        out.append(float(rewards[:, 0][0]))
print(json.dumps(out))
"""


async def test_cosmos_rl_hpsv3_is_the_inferencers_mu(gw, ref, images, tiny, tmp_path):
    """cosmos-rl's hpsv3 key is mu = rewards[:, 0] of HPSv3RewardInferencer.reward on PIL images
    of the enqueued uint8 pixels: that call, on the same checkpoint, gives what the trainer pulls
    (one image per enqueue, awaited in turn: the same batch of one on both sides)."""
    import subprocess

    from tests.support.heads_env import python_path

    app = create_app(gw)
    got = []
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
            for image, prompt in zip(images, ref["prompts"]):
                meta = {"reward_fn": {"hpsv3": 1.0}, "prompts": [prompt], "media_type": "image"}
                r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, image[None]), headers=headers())
                assert r.status_code == 200, r.text
                body = (await poll(client, r.json()["uuid"], "hpsv3", timeout=300, interval=0.1)).json()
                assert body["valid"] == [True], body
                got += body["scores"]["hpsv3"]
    finally:
        await app.state.cosmos_rl.aclose()
    np.savez(tmp_path / "images.npz", *images)
    proc = subprocess.run([str(hpsv3_python()), "-c", PEER_HPSV3, str(hpsv3_tiny_yaml(tiny)), str(tiny / "HPSv3.safetensors"),
                           str(tmp_path / "images.npz"), json.dumps(ref["prompts"])], capture_output=True, text=True,
                          timeout=600, check=False, env={**os.environ, "PYTHONPATH": python_path()})
    assert proc.returncode == 0, proc.stderr[-3000:]
    want = json.loads(proc.stdout.splitlines()[-1])
    assert_close(got, want, what="hpsv3 mu vs the inferencer's", scale=max(1.0, *map(abs, want)))


async def test_video_frames_are_scored_and_pooled_with_sigma_per_frame(gw, ref, images):
    frames = np.stack([images[0], np.ascontiguousarray(images[0][::-1])])
    resp = await gw.score(RewardRequest(samples=[{"prompt": ref["prompts"][0], "video": VideoMedia.from_array(frames, 2.0)}],
                                        judges=["hpsv3_video"]))
    s = resp.results[0].scores["hpsv3_video"]
    assert s.valid, s.error
    assert s.details["frames"] == 2 and len(s.details["frame_details"]) == 2
    assert all(d["sigma"] > 0 for d in s.details["frame_details"])
    assert s.details["frame_scores"][0] == pytest.approx(ref["package"][0][0], abs=TOL)
    assert s.raw == pytest.approx(sum(s.details["frame_scores"]) / 2)


async def test_prompts_with_special_tokens_fail_alone(gw, ref, images):
    """A prompt with <|Reward|> would give its row two reward tokens, one with <|image_pad|> would
    shift the processor's image tokens onto its neighbours: both must fail alone."""
    prompts = list(ref["prompts"])
    prompts[1] = "a fox <|Reward|> sticker"
    prompts[3] = "two cats <|image_pad|>"
    resp = await gw.score(RewardRequest(samples=_samples(prompts, images), judges=["hpsv3"]))
    for i, token in ((1, "<|Reward|>"), (3, "<|image_pad|>")):
        bad = resp.results[i].scores["hpsv3"]
        assert not bad.valid and bad.error.code.value == "head_error" and bad.reward is None
        assert token in bad.error.message, bad.error.message
    for i in (0, 2):
        s = resp.results[i].scores["hpsv3"]
        assert s.valid and s.raw == pytest.approx(ref["package"][i][0], abs=TOL)


async def test_bf16_runs_on_cpu_with_the_head_in_fp32(tiny, ref, images):
    gateway = Gateway(validate_config({"judges": {"hps_bf16": hpsv3_judge(tiny, threads=2, dtype="bf16")}}))
    try:
        resp = await gateway.score(RewardRequest(samples=_samples(ref["prompts"], images), judges=["hps_bf16"]))
    finally:
        await gateway.aclose()
    got = [r.scores["hps_bf16"] for r in resp.results]
    assert all(s.valid for s in got), got
    head = got[0].details["head"]
    assert head["weights_dtype"] == "bfloat16" and head["rm_head_dtype"] == "float32"
    mus = [s.raw for s in got]
    want = [m for m, _ in ref["package"]]
    assert mus != pytest.approx(want, abs=1e-4)  # really bf16 ...
    assert mus == pytest.approx(want, abs=1.0)  # ... and close to fp32 (random weights: loose)


@pytest.mark.parametrize("options, words", [
    ({"checkpoint": "/nonexistent/HPSv3.safetensors"}, "options.checkpoint"),
    ({"base_model": "/nonexistent/qwen2-vl"}, "options.base_model"),
    ({"config": "/nonexistent/hpsv3.yaml"}, "options.config"),
    ({"checkpoint": "{tiny}/base/model.safetensors"}, "HPSv3RewardInferencer could not load"),
    # the reply says what failed; the interpreter's path is only in the gateway's log (issue 32)
    ({"python": "/nonexistent/.venv-hpsv3/bin/python"}, "its interpreter could not be run"),
])
async def test_unloadable_heads_are_clear_head_errors(tiny, images, options, words):
    options = {k: v.format(tiny=tiny) for k, v in options.items()}
    judge = hpsv3_judge(tiny, retry_failed_load_s=600, **options)
    gateway = Gateway(validate_config({"judges": {"hps": judge}}))
    try:
        resp = await gateway.score(RewardRequest(samples=_samples(["a cat"], images[:1]), judges=["hps"]))
        s = resp.results[0].scores["hps"]
        assert not s.valid and s.error.code.value == "head_error" and s.reward is None
        assert words in s.error.message, s.error.message
        assert "/nonexistent/.venv-hpsv3" not in s.error.message
        ready, reason = (await gateway.readiness(fresh=True))["hps"]
        assert not ready and words in reason
    finally:
        await gateway.aclose()


async def test_without_the_hpsv3_venv_the_error_says_how_to_set_it_up(tiny, images):
    """The gateway's own interpreter has judge_gateway but neither torch nor hpsv3."""
    import sys

    gateway = Gateway(validate_config({"judges": {"hps": hpsv3_judge(tiny, python=sys.executable)}}))
    try:
        resp = await gateway.score(RewardRequest(samples=_samples(["a cat"], images[:1]), judges=["hps"]))
    finally:
        await gateway.aclose()
    s = resp.results[0].scores["hps"]
    assert not s.valid and s.error.code.value == "head_error"
    assert "scripts/setup_hpsv3.sh" in s.error.message
