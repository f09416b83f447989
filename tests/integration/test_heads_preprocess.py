"""`preprocess = "device"` vs `"reference"` on the tiny CLIP-family models (tests/support/
preprocess_fidelity.py under the heads venv), and both modes through the Gateway's workers."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.schema import RewardRequest
from tests.support.heads_env import (
    ROOT,
    build_tiny_heads,
    head_judges,
    heads_python,
    load_test_images,
)
from tests.support.natural_media import photo_path

pytestmark = pytest.mark.integration
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="module")
def models():
    return build_tiny_heads("tiny")


@pytest.fixture(scope="module")
def fidelity(models):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([str(heads_python()), "-m", "tests.support.preprocess_fidelity", str(models), str(photo_path())],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("head", ["clip", "clip_hf", "pickscore", "hpsv2"])
def test_device_preprocessing_stays_within_the_measured_bounds(fidelity, head):
    """Measured on these tiny models (2026-11-22): natural images cosine >= 0.999997, |delta raw|
    <= 6e-4 (pickscore, raw = 80 x cosine: 0.046), pixels <= 0.18 (normalised units, a few
    pixels at text edges); noise cosine >= 0.999997. Bounds leave ~3x room."""
    row = fidelity["heads"][head]
    assert row["modes"] == ["device", "reference"]
    scale = 80.0 if head == "pickscore" else 1.0  # the tiny PickScore's exp(logit_scale)
    for images in ("natural", "noise"):
        r = row[images]
        assert r["images"] >= 2
        assert r["min_cosine"] >= 0.99999, (images, r)
        assert r["max_abs_delta_raw"] <= 2e-3 * scale, (images, r)
        assert r["max_pixel_diff"] <= 0.3, (images, r)
    assert row["natural"]["images"] >= 7  # 3 gradients, 2 rendered texts, the photo and its upscaled crop


@pytest.mark.parametrize("head", ["clip", "clip_hf", "pickscore", "hpsv2"])
def test_reference_mode_equals_the_library_formula(fidelity, head):
    tol = 1e-4 if head == "pickscore" else 1e-5  # raw = 80 x cosine
    assert fidelity["heads"][head]["reference_vs_library"] <= tol


@pytest.mark.parametrize("head", ["clip", "clip_hf", "pickscore", "hpsv2"])
def test_text_rows_made_in_prepare_are_used_by_infer(fidelity, head):
    """The worker's stager thread encodes a batch's new prompts in `prepare`, off the forward's
    thread; `infer` then encodes nothing and scores exactly as when it encodes them itself."""
    row = fidelity["heads"][head]["prepared_text"]
    assert row["encodes_in_prepare"] == 1 and row["encodes_in_infer"] == 0
    assert row["max_abs_delta_raw"] == 0.0


def test_reference_transform_runs_in_other_processes_not_threads(fidelity):
    """The transform ran in spawned processes; the process that runs the forward kept no
    preprocessing threads (the old thread pool was named `preprocess_*`)."""
    for row in fidelity["heads"].values():
        assert row["reference_pids"] and fidelity["pid"] not in row["reference_pids"]
    assert not [t for t in fidelity["new_threads"] if "preprocess" in t]


async def test_both_modes_through_the_gateway_say_which_ran(models):
    judges = {}
    for mode in ("device", "reference"):
        for name, judge in head_judges(models, preprocess=mode, max_batch_size=8, preprocess_processes=1).items():
            if name in ("pickscore", "hpsv2"):
                judges[f"{name}_{mode}"] = judge
    gw = Gateway(validate_config({"judges": judges}))
    try:
        images = load_test_images(models)
        response = await gw.score(RewardRequest(samples=[{"prompt": "a red bicycle", "image": im} for im in images],
                                                judges=list(judges)))
        for result in response.results:
            s = result.scores
            assert all(v.valid for v in s.values()), s
            for head in ("pickscore", "hpsv2"):
                assert s[f"{head}_device"].details["head"]["preprocess_mode"] == "device"
                assert s[f"{head}_reference"].details["head"]["preprocess_mode"] == "reference"
                scale = 80.0 if head == "pickscore" else 1.0
                assert abs(s[f"{head}_device"].raw - s[f"{head}_reference"].raw) <= 2e-3 * scale
        stats = await gw.judges["pickscore_reference"].worker.stats()
        worker_pid = gw.judges["pickscore_reference"].worker.info["pid"]
        assert stats["preprocess_pids"] and worker_pid not in stats["preprocess_pids"]
        assert (await gw.judges["pickscore_device"].worker.stats())["preprocess_pids"] == []
    finally:
        await gw.aclose()
