"""The conformance table's CLIP-family rows on real models (docs/integrations/conformance.md):
Flow-Factory's PickScore (images, and a video as the mean over all its frames), CLIP (a video by
its first frame) and PickScore_Rank through its remote client's wire format, and cosmos-rl's
pickscore and hpsv2 through enqueue / pull, against the peers' own computation on the same tiny
weights (tests/support/peer_heads_reference.py under .venv-heads), to a relative 1e-5.

The gateway is the session's heads gateway (tests/support/clip_heads_gateway.py), configured as
configs/flow_factory.toml and the cosmos-rl defaults are, with the tiny models in place of the hub
weights (the test checks the shipped settings it copies)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.support.clip_heads_gateway import shipped_flow_factory
from tests.support.cosmos_client import enqueue_body, enqueue_retrying, poll
from tests.support.heads_env import head_judges, heads_python, python_path
from tests.support.protocol_clients import ff_compute, ff_payload
from tests.support.served_gateway import asgi_client
from tests.support.tolerance import assert_close

pytestmark = pytest.mark.integration
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[2]
REL = 1e-5
PROMPTS = ["a red bicycle", "a photo of a cat", 'a sign that says "hello"', "a bowl of fruit"]
VIDEO_PROMPTS = ["a dog running", "waves at sunset"]
GROUP_PROMPT = "a lighthouse at night"


def _images(n: int, h: int, w: int, seed: int) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for _ in range(n)]


@pytest.fixture(scope="module")
def models(tiny_heads) -> Path:
    return tiny_heads


@pytest.fixture(scope="module")
def media() -> dict:
    return {"images": _images(4, 40, 48, 1), "videos": [_images(3, 36, 36, 2), _images(5, 28, 44, 3)],
            "group": _images(6, 44, 40, 4)}


@pytest.fixture(scope="module")
def reference(models, media, tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("peer-heads")

    def saved(images: list[Image.Image], stem: str) -> list[str]:
        paths = []
        for i, im in enumerate(images):
            path = folder / f"{stem}{i}.png"
            im.save(path)
            paths.append(str(path))
        return paths

    hpsv2 = head_judges(models)["hpsv2"]["options"]
    spec = {"hf_clip": str(models / "hf_clip"),
            "openclip": {"name": "jg-tiny-clip", "config": str(models / "openclip_cfg" / "jg-tiny-clip.json"),
                         "checkpoint": str(models / "openclip.pt")},
            "hpsv2_options": {k: v for k, v in hpsv2.items() if k != "python"} | {"kind": "hpsv2"},
            "images": saved(media["images"], "image"), "prompts": PROMPTS,
            "videos": [saved(v, f"video{j}_") for j, v in enumerate(media["videos"])], "video_prompts": VIDEO_PROMPTS,
            "group": saved(media["group"], "group"), "group_prompt": GROUP_PROMPT}
    (folder / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.run([str(heads_python()), "-m", "tests.support.peer_heads_reference", str(folder / "spec.json"),
                           str(folder / "out.json")], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": python_path()})
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((folder / "out.json").read_text())


@pytest.fixture(scope="module")
async def client(clip_heads):
    async with asgi_client(clip_heads.app) as c:
        yield c


def test_the_copied_settings_are_the_shipped_ones(clip_heads):
    shipped = shipped_flow_factory()
    assert shipped["judges"]["pickscore"]["video"] == {"max_frames": 4096}  # every frame
    assert shipped["judges"]["clip"]["video"] == {"num_frames": 1}  # the first frame
    assert shipped["flow_factory"]["profiles"]["PickScore_Rank"]["group_transform"] == "ordinal_rank"
    assert shipped["judges"]["clip"]["options"]["dtype"] == "bf16"  # RewardArguments.dtype's default
    assert shipped["judges"]["clip"]["options"]["cosine_dtype"] == "model"
    # the session's heads gateway copies them: Flow-Factory's CLIP is its `clip_ff` (the HF CLIPModel)
    config = clip_heads.gateway.config
    pickscore, clip = config.judges["pickscore"], config.judges["clip_ff"]
    assert pickscore.video.max_frames == 4096
    assert pickscore.options.pooling == shipped["judges"]["pickscore"]["options"]["pooling"]
    assert clip.kind == "clip" and clip.video.num_frames == 1 and clip.options.library == "transformers"
    assert (clip.options.dtype, clip.options.cosine_dtype) == ("bf16", "model")
    profiles = config.flow_factory.profiles
    assert dict(profiles["CLIP"].judges) == {"clip_ff": 1.0}
    assert dict(profiles["PickScore"].judges) == {"pickscore": 1.0}
    rank = profiles["PickScore_Rank"]
    assert dict(rank.judges) == {"pickscore": 1.0}
    assert (rank.mode, rank.group_transform) == ("groupwise", "ordinal_rank")


async def test_flow_factory_pickscore_images_and_videos(client, media, reference):
    # float32 both sides: PickScore / 26 sums terms of size exp(logit_scale) / 26 (tests/support/tolerance.py)
    scale = reference["logit_scale_exp"] / 26
    got = await ff_compute(client, "/flow-factory/PickScore", ff_payload(PROMPTS, image=media["images"]))
    assert_close(got, reference["ff_pickscore"], what="Flow-Factory PickScore", scale=scale)
    got = await ff_compute(client, "/flow-factory/PickScore", ff_payload(VIDEO_PROMPTS, video=media["videos"]))
    assert_close(got, reference["ff_pickscore_video"], what="Flow-Factory PickScore, videos", scale=scale)


def bf16_ulps(ours: list[float], theirs: list[float]) -> float:
    """The largest difference in units of bfloat16's spacing at the peer's value (8 significant
    bits: 2^(floor(log2 |x|) - 7))."""
    return max(abs(a - b) / 2.0 ** (math.floor(math.log2(abs(b))) - 7) for a, b in zip(ours, theirs))


async def test_flow_factory_clip_images_and_first_frames(client, media, reference):
    """Flow-Factory's CLIP at its default bfloat16, by its own __call__ where its mirror is here
    (reference["ff_clip_bf16_by"]): normalised and multiplied in bf16. The same towers on the same
    tiny weights; the batches differ (its one forward of every prompt and image, our image batches
    and cached text rows), which can move a bf16 rounding: the bound is one bf16 step of the value,
    where float32 arithmetic on the same embeddings was off by up to ~1.3 steps (0.9%)."""
    got = await ff_compute(client, "/flow-factory/CLIP", ff_payload(PROMPTS, image=media["images"]))
    video = await ff_compute(client, "/flow-factory/CLIP", ff_payload(VIDEO_PROMPTS, video=media["videos"]))
    ulps = max(bf16_ulps(got, reference["ff_clip_bf16"]), bf16_ulps(video, reference["ff_clip_bf16_video"]))
    print(f"[conformance] Flow-Factory CLIP bf16 ({reference['ff_clip_bf16_by']}): max {ulps:.2f} bf16 steps "
          f"apart", file=sys.stderr)
    assert ulps <= 1.0


async def test_flow_factory_pickscore_rank(client, media, reference):
    prompts = [GROUP_PROMPT] * len(media["group"])
    got = await ff_compute(client, "/flow-factory/PickScore_Rank", ff_payload(prompts, image=media["group"]))
    assert got == pytest.approx(reference["ff_pickscore_rank"], rel=REL, abs=1e-12)
    assert sorted(got) == [i / len(prompts) for i in range(len(prompts))]


async def test_cosmos_rl_pickscore_and_hpsv2(client, media, reference):
    arr = np.stack([np.asarray(im) for im in media["images"]])  # [B, H, W, 3] uint8, as the trainer sends
    meta = {"reward_fn": {"pickscore": 1.0, "hpsv2": 1.0}, "prompts": PROMPTS, "media_type": "image"}
    # the trainer sends an enqueue again after a 503's Retry-After (a head still loading past
    # cosmos_rl.load_wait_s: on 2 busy cores the session's heads may take longer than 45 s)
    r = await enqueue_retrying(client, enqueue_body(meta, arr))
    assert r.status_code == 200, r.text
    uid = r.json()["uuid"]
    pickscore = (await poll(client, uid, "pickscore", timeout=600)).json()
    hpsv2 = (await poll(client, uid, "hpsv2", timeout=600)).json()
    assert_close(pickscore["scores"]["pickscore"], reference["cosmos_pickscore"], what="cosmos-rl pickscore",
                 scale=reference["logit_scale_exp"] / 26)
    assert_close(hpsv2["scores"]["hpsv2"], reference["cosmos_hpsv2_on_our_embeddings"], what="cosmos-rl hpsv2",
                 scale=1.0)
    # The pixels: cosmos-rl resizes a float tensor (torchvision, bicubic) where ours resizes uint8
    # images as HPSv2's own PIL transform does; on the same model, that is all that differs.
    pixels = max(abs(a - b) / abs(b) for a, b in zip(hpsv2["scores"]["hpsv2"], reference["cosmos_hpsv2"]))
    print(f"[conformance] hpsv2: ours vs cosmos-rl's tensor preprocessing, max relative difference {pixels:.2e}",
          file=sys.stderr)
    assert pixels < 0.05
