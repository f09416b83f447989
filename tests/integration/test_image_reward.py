"""image_reward head end to end: a tiny ImageReward checkpoint built offline with the
`image-reward` package's own classes (tests/support/tiny_image_reward.py), loaded from local
paths by the head in a worker under .venv-imagereward, checked against the package's own
`ImageReward.load(...)` + `model.score(prompt, image)` on the same files."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.schema import RewardRequest, RewardResponse
from tests.support.heads_env import (
    build_tiny_image_reward,
    image_reward_judge,
    imagereward_python,
    load_png,
    load_test_images,
    python_path,
)
from tests.support.served_gateway import asgi_client
from tests.support.tolerance import assert_close

pytestmark = pytest.mark.integration
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
TOL = 5e-5  # float32, different batch shapes (scores are O(1..5))


@pytest.fixture(scope="module")
def models():
    return build_tiny_image_reward("tiny")


@pytest.fixture(scope="module")
def reference(models):
    return json.loads((models / "reference.json").read_text())


@pytest.fixture(scope="module")
def images(models):
    return load_test_images(models)


@pytest.fixture(scope="module")
async def gw(models):
    judges = {
        "image_reward": image_reward_judge(models, threads=2, max_batch_size=8, max_wait_ms=200),
        "image_reward_1": image_reward_judge(models, threads=2, max_batch_size=1, max_wait_ms=0),
        "image_reward_device": image_reward_judge(models, threads=2, max_batch_size=8, preprocess="device"),
        # closes a batch when it holds 10 pairs: a request's cells go out to the worker in one frame,
        # and the wait (10 s, the most the config allows) is a margin: batches are a count
        "image_reward_10": image_reward_judge(models, threads=2, max_batch_size=10, max_wait_ms=10_000),
    }
    gateway = Gateway(validate_config({"judges": judges}))
    try:
        yield gateway
    finally:
        await gateway.aclose()


def request(pairs, judges) -> RewardRequest:
    return RewardRequest(samples=[{"prompt": p, "image": img} for p, img in pairs], judges=judges)


def all_pairs(reference, images):
    """(prompt, image, reference score) for every image x prompt."""
    return [(p, images[i], reference["scores"][i][j]) for i in range(len(images))
            for j, p in enumerate(reference["prompts"])]


async def test_tiny_checkpoint_loads_from_local_paths(gw, models):
    await gw.judges["image_reward"].worker.wait_ready()
    ready, reason = (await gw.readiness(fresh=True))["image_reward"]
    assert ready, reason
    info = gw.judges["image_reward"].worker.info
    assert info["library"] == "image-reward" and info["model"] == str(models / "ImageReward.pt")
    assert info["vision"] == {"embed_dim": 32, "depth": 2, "patch_size": 16} and info["text_layers"] == 2
    assert info["max_length"] == 35 and info["unused_checkpoint_keys"] == 0
    # the package's normalisation constants, read from its class
    assert info["norm"] == {"mean": pytest.approx(0.16717362830052426), "std": pytest.approx(1.0333394966054072)}


async def test_scores_equal_the_packages_own_score_function(gw, reference, images):
    """The honesty check: every pair scores what `ImageReward.load(ckpt).score(prompt, image)`
    of the package gives on the same checkpoint and PNG (computed by the builder, same venv)."""
    triples = all_pairs(reference, images)
    response = await gw.score(request([(p, img) for p, img, _ in triples], ["image_reward"]))
    got = [r.scores["image_reward"] for r in response.results]
    assert all(s.valid for s in got), [s.error for s in got if not s.valid]
    assert [s.raw for s in got] == pytest.approx([want for _, _, want in triples], abs=TOL)
    # scores really depend on both the prompt and the image (the random weights are not degenerate)
    assert np.ptp(reference["scores"], axis=0).min() > 0.05 and np.ptp(reference["scores"], axis=1).min() > 0.05


async def test_batched_equals_unbatched_and_order_invariant(gw, reference, images):
    triples = all_pairs(reference, images)
    pairs = [(p, img) for p, img, _ in triples]
    before = await gw.judges["image_reward"].worker.stats()
    before_10 = await gw.judges["image_reward_10"].worker.stats()
    forward = await gw.score(request(pairs, ["image_reward", "image_reward_1", "image_reward_10"]))
    backward = await gw.score(request(pairs[::-1], ["image_reward", "image_reward_10"]))
    after = await gw.judges["image_reward"].worker.stats()
    after_10 = await gw.judges["image_reward_10"].worker.stats()
    n = len(pairs)
    assert n == 20  # two full batches of 10 per request
    for k in range(n):
        batched, single = forward.results[k].scores["image_reward"], forward.results[k].scores["image_reward_1"]
        reversed_ = backward.results[n - 1 - k].scores["image_reward"]
        full, full_reversed = forward.results[k].scores["image_reward_10"], backward.results[n - 1 - k].scores["image_reward_10"]
        assert batched.valid and single.valid and reversed_.valid and full.valid and full_reversed.valid
        assert batched.raw == pytest.approx(single.raw, abs=TOL)
        assert batched.raw == pytest.approx(reversed_.raw, abs=TOL)
        assert full.raw == pytest.approx(single.raw, abs=TOL) and full_reversed.raw == pytest.approx(single.raw, abs=TOL)
    # really batched across cells: every forward of the size-closed head held 10 pairs (a count, not a timing)
    new_10 = {b: c - before_10["batch_sizes"].get(b, 0) for b, c in after_10["batch_sizes"].items()}
    assert {b: c for b, c in new_10.items() if c} == {"10": 4}, (before_10, after_10)
    assert set((await gw.judges["image_reward_1"].worker.stats())["batch_sizes"]) == {"1"}
    # each (prompt, image) pair is one item of one forward pass: n pairs, 2n items, no B x B
    assert after["items"] - before["items"] == 2 * n and after["pairs"] - before["pairs"] == 2 * n
    assert after_10["items"] - before_10["items"] == 2 * n and after_10["pairs"] - before_10["pairs"] == 2 * n


async def test_a_pairs_score_does_not_depend_on_its_batch_neighbours(gw, reference, images):
    """cosmos-rl's reference runs every prompt against every image and keeps the diagonal; here a
    batch holds pairs, so pair 0 scores the same whatever prompts and images share its batch."""
    prompts = reference["prompts"]
    first = (prompts[0], images[0])
    batches = [
        [first, (prompts[1], images[1]), (prompts[2], images[2])],
        [first, (prompts[3], images[3]), (prompts[3], images[4]), (prompts[1], images[4])],
        [first],
    ]
    seen = []
    for batch in batches:
        response = await gw.score(request(batch, ["image_reward"]))
        seen.append(response.results[0].scores["image_reward"].raw)
        for (p, img), r in zip(batch, response.results):
            i = next(k for k, im in enumerate(images) if im is img)
            assert r.scores["image_reward"].raw == pytest.approx(reference["scores"][i][prompts.index(p)], abs=TOL)
    assert seen == pytest.approx([reference["scores"][0][0]] * 3, abs=TOL)


async def test_response_is_the_shared_score_schema(gw, reference, images, models):
    response = await gw.score(request([(reference["prompts"][1], images[2])], ["image_reward"]))
    again = RewardResponse.model_validate_json(response.model_dump_json())  # the wire form round-trips
    s = again.results[0].scores["image_reward"]
    assert s.valid and s.error is None and s.judge == "image_reward"
    assert s.raw == pytest.approx(reference["scores"][2][1], abs=TOL)
    assert s.reward == s.raw  # identity normalisation: the z-score is the reward, as cosmos-rl reports it
    assert s.model == str(models / "ImageReward.pt") and s.latency_ms is not None
    d = s.details
    assert d["media"] == "image" and d["width"] == 180 and d["height"] == 300
    assert d["head"]["library"] == "image-reward" and d["device"] == "cpu" and d["dtype"] == "fp32"
    assert again.results[0].valid and again.results[0].reward == pytest.approx(s.raw)


PEER_INFERENCE_RANK = """
import json, sys, numpy as np, torch
import ImageReward as RM
from PIL import Image
from judge_gateway.heads.models.image_reward import package_redirects
ckpt, med, tok, vit, npz, prompts = sys.argv[1:7]
with package_redirects(tok, json.loads(vit)):  # the tiny vision tower (test plumbing, as the builder loads it)
    model = RM.load(ckpt, device="cpu", med_config=med)
arrays = list(np.load(npz).values())
with torch.inference_mode():  # cosmos-rl model/image_reward.py 96-116
    _, m = model.inference_rank(json.loads(prompts), [Image.fromarray(a) for a in arrays])
print(json.dumps(torch.tensor(m).reshape(len(arrays), len(arrays)).diagonal(0).float().tolist()))
"""


async def test_cosmos_rl_image_reward_is_the_inference_rank_diagonal(gw, models, reference, images, tmp_path):
    """cosmos-rl's `image_reward` reward (the module's gateway: its worker is up already): an
    enqueue/pull round trip whose legacy key `image_reward` holds the head's raw z-score, which is
    cosmos-rl's own number: the diagonal of the package's `inference_rank(prompts, images)` (a
    B x B grid) on the same files."""
    from judge_gateway.server import create_app
    from tests.support.cosmos_client import enqueue_body, headers, poll

    batch = np.stack([images[1], images[4]])  # both 256x320
    meta = {"reward_fn": {"image_reward": 1.0}, "prompts": [reference["prompts"][0], reference["prompts"][3]],
            "media_type": "image"}
    app = create_app(gw)
    try:
        async with asgi_client(app) as client:
            r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, batch), headers=headers())
            assert r.status_code == 200, r.text
            body = (await poll(client, r.json()["uuid"], "image_reward", timeout=300, interval=0.2)).json()
    finally:
        await app.state.cosmos_rl.aclose()
    assert body["valid"] == [True, True], body.get("errors")
    assert body["scores"]["image_reward"] == pytest.approx(
        [reference["scores"][1][0], reference["scores"][4][3]], abs=TOL)
    assert body["scores"]["image_reward"] == [pytest.approx(c["raw"]) for c in body["judge_scores"]]
    np.savez(tmp_path / "batch.npz", *batch)
    proc = subprocess.run([str(imagereward_python()), "-c", PEER_INFERENCE_RANK, str(models / "ImageReward.pt"),
                           str(models / "med_config.json"), str(models / "tokenizer"), (models / "vit.json").read_text(),
                           str(tmp_path / "batch.npz"), json.dumps(meta["prompts"])],
                          capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "PYTHONPATH": python_path()})
    assert proc.returncode == 0, proc.stderr[-3000:]
    # float32 both sides, (mlp - mean) / std: terms of size ~1 (tests/support/tolerance.py)
    assert_close(body["scores"]["image_reward"], json.loads(proc.stdout.splitlines()[-1]),
                 what="image_reward vs inference_rank's diagonal", scale=1.0)


async def test_bf16_scores_close_to_fp32(models, reference, images):
    gateway = Gateway(validate_config({"judges": {"ir": image_reward_judge(models, dtype="bf16", threads=2)}}))
    try:
        pairs = [(reference["prompts"][j], images[i]) for i in range(2) for j in range(2)]
        response = await gateway.score(request(pairs, ["ir"]))
    finally:
        await gateway.aclose()
    want = [reference["scores"][i][j] for i in range(2) for j in range(2)]
    got = [r.scores["ir"] for r in response.results]
    assert all(s.valid and s.details["dtype"] == "bf16" for s in got)
    assert [s.raw for s in got] == pytest.approx(want, abs=0.2)  # bf16: ~3 significant digits


async def test_the_released_vit_l_tower_through_the_unpatched_construction_path():
    """No `vit` option: the package builds its own ViT-L/16 (`vit='large'`, as for the released
    checkpoint; random weights, 2-layer text encoder); only the tokenizer is redirected."""
    models = build_tiny_image_reward("vitl")
    ref = json.loads((models / "reference.json").read_text())
    judge = image_reward_judge(models, threads=2, max_batch_size=4)
    assert "vit" not in judge["options"]
    gateway = Gateway(validate_config({"judges": {"ir": judge}}))
    images = [load_png(models / "images" / f"{i}.png") for i in range(2)]
    try:
        pairs = [(ref["prompts"][j], images[i]) for i in range(2) for j in range(2)]
        response = await gateway.score(request(pairs, ["ir"]))
        info = gateway.judges["ir"].worker.info
    finally:
        await gateway.aclose()
    assert info["vit"] == "large" and info["vision"] == {"embed_dim": 1024, "depth": 24, "patch_size": 16}
    got = [r.scores["ir"] for r in response.results]
    assert all(s.valid for s in got), [s.error for s in got]
    assert [s.raw for s in got] == pytest.approx([ref["scores"][i][j] for i in range(2) for j in range(2)], abs=TOL)


async def _load_failure(judge: dict, images) -> tuple[str, str]:
    gateway = Gateway(validate_config({"judges": {"ir": judge}}))
    try:
        response = await gateway.score(request([("a cat", images[0])], ["ir"]))
        s = response.results[0].scores["ir"]
        assert not s.valid and s.error.code.value == "head_error" and s.reward is None
        ready, reason = (await gateway.readiness(fresh=True))["ir"]
        assert not ready
        return s.error.message, reason
    finally:
        await gateway.aclose()


@pytest.fixture
def partial_checkpoint(models, tmp_path):
    """The tiny checkpoint less one weight (written by the ImageReward venv: the gateway's has no torch)."""
    partial = tmp_path / "partial.pt"
    code = ("import sys, torch; sd = torch.load(sys.argv[1], weights_only=True); "
            "del sd['mlp.layers.0.weight']; torch.save(sd, sys.argv[2])")
    subprocess.run([str(imagereward_python()), "-c", code, str(models / "ImageReward.pt"), str(partial)],
                   check=True, timeout=120)
    return partial


async def test_checkpoint_lacking_a_weight_is_refused_not_scored_with_random_layers(
        models, images, partial_checkpoint):
    """The package loads with strict=False and would score with a random layer; the head refuses."""
    message, _ = await _load_failure(image_reward_judge(models, checkpoint=str(partial_checkpoint)), images)
    assert "lacks 1 weights" in message and "mlp.layers.0.weight" in message


async def test_missing_checkpoint_is_a_head_error_naming_it(models, images, tmp_path):
    missing = tmp_path / "no-such" / "ImageReward.pt"
    message, reason = await _load_failure(image_reward_judge(models, checkpoint=str(missing)), images)
    assert str(missing) in message and "neither a file" in message
    assert str(missing) in reason


async def test_checkpoint_of_another_vision_tower_is_refused(models, images):
    judge = image_reward_judge(models, vit={"embed_dim": 64, "depth": 2, "num_heads": 2})
    message, _ = await _load_failure(judge, images)
    assert "does not fit the model" in message and "embed_dim" in message


async def test_interpreter_without_the_package_says_how_to_set_it_up(models, images):
    judge = image_reward_judge(models, python=sys.executable)  # the gateway's venv: no torch, no ImageReward
    message, _ = await _load_failure(judge, images)
    assert "image-reward package" in message and "setup_imagereward.sh" in message


async def test_device_preprocessing_stays_near_the_packages_transform(gw, reference, images):
    """`preprocess = "device"` (BLIP's resize as tensor ops) against the package's own transform
    in the preprocessing processes (the default on a CPU), on the same pairs."""
    triples = all_pairs(reference, images)
    response = await gw.score(request([(p, img) for p, img, _ in triples], ["image_reward", "image_reward_device"]))
    ref = [r.scores["image_reward"] for r in response.results]
    dev = [r.scores["image_reward_device"] for r in response.results]
    assert all(s.valid for s in ref + dev)
    assert ref[0].details["head"]["preprocess_mode"] == "reference"
    assert dev[0].details["head"]["preprocess_mode"] == "device"
    worst = max(abs(a.raw - b.raw) for a, b in zip(ref, dev))
    # Measured 0.041 (2026-11-22) on these noise images (180-320 px, one of 10 px blocks upscaled
    # to 224, where PIL and torch differ most), scores spread over ~1..5.
    assert worst <= 0.1, worst
    stats = await gw.judges["image_reward"].worker.stats()
    assert stats["preprocess_pids"] and gw.judges["image_reward"].worker.info["pid"] not in stats["preprocess_pids"]
