"""Local heads end to end: real worker processes under the heads venv, tiny models built with the
real libraries, the real RapidOCR model. No network (HF_HUB_OFFLINE=1)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import numpy as np
import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.media import VideoMedia
from judge_gateway.schema import RewardRequest, RewardResponse
from tests.support.heads_env import (
    head_judges,
    heads_python,
    load_test_images,
    text_image_png,
)
from tests.support.tolerance import assert_close

pytestmark = pytest.mark.integration
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="module")
def models(tiny_heads):
    return tiny_heads


@pytest.fixture(scope="module")
def reference(models):
    return json.loads((models / "reference.json").read_text())


@pytest.fixture(scope="module")
def images(models):
    return load_test_images(models)


@pytest.fixture(scope="module")
def gw(clip_heads):
    """Every head of this module in the session's heads gateway (tests/support/clip_heads_gateway.py:
    its workers start once), next to yes/no VLM judges on the session's vLLM server."""
    return clip_heads.gateway


def request(prompts_images, judges) -> RewardRequest:
    return RewardRequest(samples=[{"prompt": p, "image": img} for p, img in prompts_images], judges=judges)


async def test_heads_become_ready_and_report_it(gw):
    await gw.readiness(fresh=True)  # starts every worker
    # every head's worker imports torch and loads its model at once: minutes on 2 cores busy with
    # the test command's other stream (the wait ends as soon as all are ready)
    deadline = time.monotonic() + 600
    while True:
        ready = await gw.readiness(fresh=True)
        if all(ok for ok, _ in ready.values()) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    assert all(ok for ok, _ in ready.values()), ready
    infos = {i.name: i for i in await gw.judge_infos()}
    assert infos["pickscore"].ready and infos["pickscore"].kind == "pickscore"


async def test_scores_equal_the_saved_models_reference(gw, reference, images):
    """Save -> load from path -> the same scores as the in-memory model (the real loading path)."""
    prompts = reference["prompts"]
    pairs = [(p, img) for img in images for p in prompts]
    judges = ["clip", "clip_hf", "pickscore", "hpsv2"]
    response = await gw.score(request(pairs, judges))
    scale = reference["logit_scale_exp"]
    got: dict[str, list[float]] = {j: [] for j in judges}
    want: dict[str, list[float]] = {j: [] for j in judges}
    for k, result in enumerate(response.results):
        i, j = divmod(k, len(prompts))
        s = result.scores
        assert all(v.valid for v in s.values()), s
        for judge, ref in (("clip", reference["clip_open_clip"][i][j]), ("hpsv2", reference["hpsv2"][i][j]),
                           ("clip_hf", reference["hf_cosine"][i][j]),
                           ("pickscore", scale * reference["hf_cosine"][i][j])):
            got[judge].append(s[judge].raw)
            want[judge].append(ref)
        assert s["pickscore"].reward == pytest.approx(s["pickscore"].raw / 26.0)  # the peers' scale
    # float32 on both sides; a cosine sums terms of size ~1, PickScore's of size exp(logit_scale)
    for judge in ("clip", "hpsv2", "clip_hf"):
        assert_close(got[judge], want[judge], what=f"{judge} vs the in-memory model", scale=1.0)
    assert_close(got["pickscore"], want["pickscore"], what="pickscore vs the in-memory model", scale=scale)
    assert response.results[0].scores["hpsv2"].details["head"]["preprocess"] == "resize_longest+pad_square_black"


async def test_batched_equals_unbatched_and_order_invariant(gw, reference, images):
    prompts = reference["prompts"]
    pairs = [(prompts[i % len(prompts)], img) for i, img in enumerate(images)]
    judges = ["clip", "clip_unbatched", "pickscore", "pickscore_unbatched", "clip_6"]
    before = await gw.judges["clip"].worker.stats()
    before_6 = await gw.judges["clip_6"].worker.stats()
    forward = await gw.score(request(pairs, judges))
    backward = await gw.score(request(pairs[::-1], judges))
    after = await gw.judges["clip"].worker.stats()
    after_6 = await gw.judges["clip_6"].worker.stats()
    n = len(pairs)
    assert n == 6
    # A batch of 6 and a batch of 1 take other BLAS paths in float32: equal to a few spacings at the
    # magnitude of the summed terms (a cosine's ~1, PickScore's exp(logit_scale)), never to a fixed
    # absolute 1e-5 (-9.56723690 vs -9.56724739 failed that once; tests/support/tolerance.py).
    logit_scale = reference["logit_scale_exp"]
    for batched, single in (("clip", "clip_unbatched"), ("pickscore", "pickscore_unbatched"),
                            ("clip_6", "clip_unbatched")):
        scale = logit_scale if batched == "pickscore" else 1.0
        ours = [forward.results[i].scores[batched].raw for i in range(n)]
        assert_close(ours, [forward.results[i].scores[single].raw for i in range(n)],
                     what=f"{batched} batched vs {single}", scale=scale)
        assert_close(ours, [backward.results[n - 1 - i].scores[batched].raw for i in range(n)],
                     what=f"{batched} in reverse order", scale=scale)
    assert after["items"] - before["items"] == 2 * n, (before, after)
    # The batched head really batched across the request's concurrent cells: each request's six
    # cells went through one forward (a count, not a timing).
    assert after_6["items"] - before_6["items"] == 2 * n and after_6["batches"] - before_6["batches"] == 2
    new = {k: v - before_6["batch_sizes"].get(k, 0) for k, v in after_6["batch_sizes"].items()}
    assert {k: v for k, v in new.items() if v} == {"6": 2}, (before_6, after_6)
    single_stats = await gw.judges["clip_unbatched"].worker.stats()
    assert set(single_stats["batch_sizes"]) == {"1"}


async def test_text_embedding_cache_encodes_a_group_prompt_once(gw, images):
    worker = gw.judges["hpsv2"].worker
    prompt = f"a GRPO group prompt {time.time()}"
    before = await worker.stats()
    group = [(prompt, images[i % len(images)]) for i in range(8)]
    r1 = await gw.score(request(group, ["hpsv2"]))
    mid = await worker.stats()
    r2 = await gw.score(request(group, ["hpsv2"]))
    after = await worker.stats()
    assert all(r.valid for r in r1.results + r2.results)
    assert mid["text_encoded"] - before["text_encoded"] == 1  # 8 images, one prompt: encoded once
    assert after["text_encoded"] == mid["text_encoded"]  # the next step hits the cache
    assert after["text_cache_hits"] - mid["text_cache_hits"] >= 1
    assert [r.scores["hpsv2"].raw for r in r1.results] == pytest.approx([r.scores["hpsv2"].raw for r in r2.results])


async def test_video_frames_are_scored_and_pooled(gw, images):
    frames = np.stack([np.resize(img, (48, 64, 3)) for img in images[:6]])
    video = VideoMedia.from_array(frames, fps=6.0)
    response = await gw.score(RewardRequest(
        samples=[{"prompt": "a red bicycle", "video": video}], judges=["clip_video"]))
    s = response.results[0].scores["clip_video"]
    assert s.valid, s.error
    assert s.details["frames"] == 4 and s.details["pooling"] == "min"
    per_frame = await gw.score(request([("a red bicycle", frames[i]) for i in s.details["frame_indices"]], ["clip"]))
    expected = [r.scores["clip"].raw for r in per_frame.results]
    assert_close(s.details["frame_scores"], expected, what="clip per frame vs each frame alone", scale=1.0)
    assert_close([s.raw], [min(expected)], what="clip min over the frames", scale=1.0)


async def test_ocr_reads_rendered_text_with_the_shipped_model(gw):
    hello = text_image_png("Hello World")
    response = await gw.score(RewardRequest(samples=[
        {"prompt": 'a sign that says "Hello World"', "image": hello},
        {"prompt": 'a sign that says "Goodbye Moon"', "image": hello},
        {"prompt": "a sign on a wall", "image": hello},
        {"prompt": "a sign that says \u201cHello World\u201d", "image": hello},
    ], judges=["ocr"]))
    right, wrong, none, typographic = (r.scores["ocr"] for r in response.results)
    assert right.valid and right.reward >= 0.9, right
    assert right.details["recognized"].replace(" ", "").lower() == "helloworld"
    assert wrong.valid and wrong.reward <= 0.5, wrong
    assert not none.valid and none.error.code.value == "not_applicable" and none.reward is None
    assert typographic.valid and typographic.reward >= 0.9


async def test_killed_worker_fails_in_flight_items_and_comes_back(models, images):
    judges = head_judges(models, max_wait_ms=3000, max_batch_size=64)  # items wait in the worker
    gateway = Gateway(validate_config({"judges": {"clip": judges["clip"]}}))
    worker = gateway.judges["clip"].worker
    try:
        await worker.wait_ready()
        old_pid = worker.pid
        pairs = [("a red bicycle", img) for img in images]
        scoring = asyncio.create_task(gateway.score(request(pairs, ["clip"])))
        # Killed once every item is sent to the worker (it holds them in its batcher for up to 3 s):
        # on 2 busy cores the request may take more than a second to get there.
        sent_by = time.monotonic() + 120
        while len(worker._pending) < len(pairs) or worker._outbox:
            assert time.monotonic() < sent_by and not scoring.done(), (len(worker._pending), scoring.done())
            await asyncio.sleep(0.02)
        os.kill(old_pid, signal.SIGKILL)
        killed_at = time.monotonic()
        response = await asyncio.wait_for(scoring, 60)
        for r in response.results:
            s = r.scores["clip"]
            assert not s.valid and s.error.code.value == "head_error" and s.reward is None
            assert "crashed" in s.error.message
        while not worker.readiness()[0]:  # the supervisor restarts it (a bound for a hang, not a timing)
            assert time.monotonic() - killed_at < 300, worker.readiness()
            await asyncio.sleep(0.1)
        print(f"\n[heads] the killed clip worker was back after {time.monotonic() - killed_at:.1f} s")
        assert worker.pid != old_pid and worker.restarts == 1
        later = await gateway.score(request(pairs[:2], ["clip"]))
        assert all(r.scores["clip"].valid for r in later.results)
    finally:
        await gateway.aclose()
    assert worker.pid is None


async def test_a_head_that_cannot_load_is_not_ready_with_the_reason(tmp_path, images):
    missing = tmp_path / "no-such-model"
    cfg = {"judges": {"pick": {"kind": "pickscore", "options": {
        "python": str(heads_python()), "model": str(missing), "processor": str(missing)}}}}
    gateway = Gateway(validate_config(cfg))
    try:
        response = await gateway.score(request([("a cat", images[0])], ["pick"]))
        s = response.results[0].scores["pick"]
        assert not s.valid and s.error.code.value == "head_error"
        assert "no-such-model" in s.error.message
        ready, reason = (await gateway.readiness(fresh=True))["pick"]
        assert not ready and "failed" in reason and "no-such-model" in reason
    finally:
        await gateway.aclose()


async def test_bf16_head_scores_close_to_fp32(gw, reference, images):
    response = await gw.score(request([(reference["prompts"][0], images[0])], ["clip_bf16"]))
    s = response.results[0].scores["clip_bf16"]
    assert s.valid and s.details["dtype"] == "bf16"
    assert s.raw == pytest.approx(reference["clip_open_clip"][0][0], abs=0.05)


async def test_heads_and_vlm_judges_in_one_response(gw):
    """pickscore, hpsv2, clip and ocr next to yes/no VLM judges on the real vLLM: one schema."""
    judges = ["clip", "pickscore", "hpsv2", "ocr", "image_quality", "alignment"]
    response = await gw.score(RewardRequest(samples=[
        {"prompt": 'a sign that says "Hello World"', "image": text_image_png("Hello World")},
        {"prompt": "a red bicycle", "image": text_image_png("bike", (256, 256))},
    ], judges=judges))
    again = RewardResponse.model_validate_json(response.model_dump_json())  # the shared schema
    assert again.judges == judges
    first, second = again.results
    assert all(first.scores[name].valid for name in judges), first.scores
    assert first.scores["ocr"].reward >= 0.9
    assert first.scores["image_quality"].template.id == "image_quality"
    assert second.scores["ocr"].error.code.value == "not_applicable"
    assert all(second.scores[name].valid for name in judges if name != "ocr")
    assert first.reward is not None and first.valid
