"""Flow-Factory fidelity on the stub backend: vllm_evaluate reproduced, PickScore_Rank's scale as
the groupwise default, condition_videos passed to judges that take a source video.

`fake-yes` lists Yes 0.7, " yes" 0.1, No 0.15: vllm_evaluate's exact-token rule gives
sigmoid(log 0.7 - log 0.15) = 0.824; our variant counting gives 0.8 / 0.95 = 0.842.
"""

from __future__ import annotations

import base64
import io
import math
from pathlib import Path

import httpx
import pytest
from PIL import Image

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.config import FlowFactoryProfile
from judge_gateway.schema import RewardRequest
from judge_gateway.server import create_app
from tests.conftest import png_bytes
from tests.support.peer_formulas import VLLM_EVALUATE_PROMPT as EVALUATE_PROMPT  # its five-criteria question
from tests.support.protocol_clients import ff_compute, ff_payload, pil_images

REFERENCE = 1.0 / (1.0 + math.exp(-(math.log(0.7) - math.log(0.15))))  # vllm_evaluate on fake-yes
OURS = 0.8 / 0.95

ROOT = Path(__file__).resolve().parents[2]

VLLM_EVALUATE = {
    "kind": "yes_no", "backend": "yes", "template": "flow_factory_quality@1",
    "image": {"format": "jpeg", "jpeg_quality": 75},
    "options": {"counting": "exact", "min_answer_mass": 0.0, "video_first_frame": True},
}


def fidelity_config(base_url: str) -> dict:
    backend = {"model": "fake-yes", "base_urls": [base_url], "timeout_s": 10, "max_retries": 1}
    return {
        "backends": {"yes": backend},
        "judges": {
            "vllm_evaluate": VLLM_EVALUATE,
            "ours": {"kind": "yes_no", "backend": "yes", "template": "image_quality@1"},
            "video_edit": {"kind": "yes_no", "backend": "yes", "template": "video_edit@1"},
        },
        "flow_factory": {"profiles": {
            "vllm_evaluate": {"judges": {"vllm_evaluate": 1.0}},
            "ours": {"judges": {"ours": 1.0}},
            "group": {"judges": {"ours": 1.0}, "mode": "groupwise"},
            "video_edit": {"judges": {"video_edit": 1.0}, "video_fps": 8},
        }},
    }


@pytest.fixture
async def ff(fake_backend):
    gw = Gateway(validate_config(fidelity_config(fake_backend.base_url)))
    app = create_app(gw)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=60) as c:
        yield gw, c
    await app.state.cosmos_rl.aclose()
    await gw.aclose()


def flow_factory_jpeg_url(png_b64: str) -> str:
    """What vllm_evaluate sends: the server's PIL image through pil_image_to_base64 (PIL's JPEG defaults)."""
    image = Image.open(io.BytesIO(base64.b64decode(png_b64)))
    buf = io.BytesIO()
    image.save(buf, format="JPEG")
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("utf-8")


def sent(fake_backend) -> list[dict]:
    return fake_backend.counters["bodies"]


# ---- item 4: vllm_evaluate -----------------------------------------------------------------


async def test_vllm_evaluate_reproduces_the_reference_number(ff):
    _, client = ff
    payload = ff_payload(["a cat", "a dog"], image=pil_images(2, size=48))
    assert await ff_compute(client, "/flow-factory/vllm_evaluate", payload) == [pytest.approx(REFERENCE)] * 2
    assert round(REFERENCE, 3) == 0.824
    assert await ff_compute(client, "/flow-factory/ours", payload) == [pytest.approx(OURS)] * 2
    assert round(OURS, 3) == 0.842


async def test_vllm_evaluate_request_is_the_one_flow_factory_sends(ff, fake_backend):
    _, client = ff
    payload = ff_payload(["a caption that is not sent"], image=pil_images(1, size=48, seed=4))
    sent(fake_backend).clear()
    await ff_compute(client, "/flow-factory/vllm_evaluate", payload)
    assert sent(fake_backend) == [{
        "model": "fake-yes",
        "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": flow_factory_jpeg_url(payload["image"][0])}},
            {"type": "text", "text": EVALUATE_PROMPT},
        ]}],
        "temperature": 0.0,
        "max_completion_tokens": 1,
        "logprobs": True,
        "top_logprobs": 20,
    }]


async def test_video_without_image_is_scored_by_its_first_frame(ff, fake_backend):
    _, client = ff
    frames = pil_images(3, size=40, seed=8)
    payload = ff_payload(["a ball"], video=[frames])
    sent(fake_backend).clear()
    assert await ff_compute(client, "/flow-factory/vllm_evaluate", payload) == [pytest.approx(REFERENCE)]
    [body] = sent(fake_backend)
    url = body["messages"][0]["content"][0]["image_url"]["url"]
    assert url == flow_factory_jpeg_url(payload["video"][0][0])
    # a judge that did not opt in still needs an image
    r = await client.post("/flow-factory/ours/compute", json=payload)
    assert r.status_code == 200 and "needs `image`" in r.json()["error"]


async def test_first_frame_is_reported_in_details(ff):
    gw, _ = ff
    frames = [png_bytes(s, (40, 40)) for s in range(3)]
    response = await gw.score(RewardRequest(samples=[{"prompt": "x", "video": {"frames": frames, "fps": 8}}],
                                            judges=["vllm_evaluate"]))
    s = response.results[0].scores["vllm_evaluate"]
    assert s.valid and s.reward == pytest.approx(REFERENCE)
    assert s.details["image"]["from_video_frame"] == 0 and s.details["image"]["format"] == "jpeg"
    assert s.details["counting"] == "exact"


# ---- item 5: groupwise rank scale ---------------------------------------------------------


def test_flow_factory_profile_defaults_to_pickscore_rank_scale():
    assert FlowFactoryProfile(judges={"a": 1.0}).group_transform == "ordinal_rank"


async def test_groupwise_profile_ranks_like_pickscore_rank(ff):
    _, client = ff
    # fake-yes scores every sample the same: argsort ranks ties by position, / n
    rewards = await ff_compute(client, "/flow-factory/group", ff_payload(["a cat"] * 4, image=pil_images(4)))
    assert rewards == [0.0, 0.25, 0.5, 0.75]


async def test_native_api_offers_both_rank_scales(ff):
    gw, _ = ff
    samples = [{"prompt": "a", "image": png_bytes(i), "group_id": "g"} for i in range(3)]
    for kind, expected in (("ordinal_rank", [0.0, 1 / 3, 2 / 3]), ("rank", [0.5, 0.5, 0.5])):
        response = await gw.score(RewardRequest(samples=samples, judges=["ours"], group_transform=kind))
        assert [r.group_reward for r in response.results] == [pytest.approx(v) for v in expected]
        assert response.combine.group_transform == kind


# ---- item 10: condition_videos ------------------------------------------------------------


async def test_condition_videos_reach_a_video_edit_judge(ff, fake_backend):
    _, client = ff
    source, edited = pil_images(4, size=32, seed=1), pil_images(4, size=32, seed=2)
    payload = ff_payload(["make it snow"], video=[edited], condition_videos=[[source]])
    sent(fake_backend).clear()
    assert await ff_compute(client, "/flow-factory/video_edit", payload) == [pytest.approx(OURS)]
    [body] = sent(fake_backend)
    content = body["messages"][0]["content"]
    assert [p["type"] for p in content] == ["video_url", "text", "video_url", "text"]
    assert content[0]["video_url"]["url"] != content[2]["video_url"]["url"]  # source first, then the edit
    # without its source video the edit judge refuses the request
    r = await client.post("/flow-factory/video_edit/compute", json=ff_payload(["make it snow"], video=[edited]))
    assert r.status_code == 200 and "needs `condition_videos`" in r.json()["error"]


async def test_condition_videos_in_native_details(ff):
    gw, _ = ff
    src = [png_bytes(s, (32, 32)) for s in range(4)]
    out = [png_bytes(s + 10, (32, 32)) for s in range(6)]
    response = await gw.score(RewardRequest(samples=[{
        "prompt": "make it snow", "video": {"frames": out, "fps": 8},
        "condition_videos": [{"frames": src, "fps": 8}]}], judges=["video_edit"]))
    s = response.results[0].scores["video_edit"]
    assert s.valid and s.reward == pytest.approx(OURS)
    assert s.details["condition_videos"][0]["source_frames"] == 4
    assert s.details["video"]["source_frames"] == 6


async def test_condition_videos_refused_where_no_judge_takes_them(ff):
    _, client = ff
    payload = ff_payload(["a cat"], image=pil_images(1), condition_videos=[[pil_images(2, seed=3)]])
    r = await client.post("/flow-factory/ours/compute", json=payload)
    assert r.status_code == 200
    assert "no judge takes `condition_videos`" in r.json()["error"]


@pytest.mark.parametrize("value, reason", [
    ([["not a frame list"]], "condition_videos[0]"),
    (["x"], "condition_videos[0]"),
])
async def test_malformed_condition_videos_are_an_error(ff, value, reason):
    _, client = ff
    payload = {**ff_payload(["a"], video=[pil_images(2)]), "condition_videos": value}
    r = await client.post("/flow-factory/video_edit/compute", json=payload)
    assert r.status_code == 200 and reason in r.json()["error"]


def test_shipped_vllm_evaluate_asks_what_flow_factory_sends():
    """Flow-Factory's VLMEvaluateRewardModel sends its five-criteria EVALUATE_PROMPT
    (src/flow_factory/rewards/vllm_evaluate.py at a0b2bc5, lines 144-158), not "Is it a beautiful
    image?": a second assignment that only commit 6f3a641 (not an ancestor of its main branch) has."""
    from judge_gateway.config import load_config
    from judge_gateway.prompts import load_template

    for path in (None, ROOT / "configs" / "flow_factory.toml"):
        judge = load_config(path).judges["vllm_evaluate"]
        messages = load_template(judge.template).render("any prompt", {"image": [{"type": "image_url",
                                                                                  "image_url": {"url": "u"}}]})
        assert messages == [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}},
                                                         {"type": "text", "text": EVALUATE_PROMPT}]}]
