"""The cosmos-rl contract as its README documents it, beyond the scores: request fields nobody
reads are logged once and counted, never dropped silently; `ocr_use_gpu` routes to a GPU OCR
judge or is reported; Flow-Factory's extra keys and profile names likewise. (Pending = 400 and
the `pin` path: tests/unit/test_cosmos_rl.py.)"""

from __future__ import annotations

import logging

import httpx
import numpy as np
import pytest

from judge_gateway.config import ConfigError, validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.support.cosmos_client import enqueue_body, headers, poll
from tests.support.fault_gateway import fault_config
from tests.support.protocol_clients import ff_payload, pil_images

IMAGES = np.random.default_rng(0).integers(0, 256, size=(2, 16, 16, 3), dtype=np.uint8)


def config(base_url: str, **cosmos) -> dict:
    data = fault_config(base_url)
    # two OCR judges (never started here: these tests stop at prepare) and a profile
    data["judges"]["ocr"] = {"kind": "ocr", "default": False}
    data["judges"]["ocr_gpu"] = {"kind": "ocr", "default": False, "options": {"device": "cuda"}}
    data["judges"]["video_q"] = {"kind": "yes_no", "backend": "yes", "template": "cosmos_reason1@1", "default": False}
    data["cosmos_rl"] = cosmos
    data["flow_factory"] = {"profiles": {"PickScore": {"judges": {"quality": 1.0}}}}
    return data


@pytest.fixture
async def app(fake_backend):
    made = []

    async def make(**cosmos):
        gw = Gateway(validate_config(config(fake_backend.base_url, **cosmos)))
        application = create_app(gw)
        made.append((application, gw))
        return application

    yield make
    for application, gw in made:
        await application.state.cosmos_rl.aclose()
        await gw.aclose()


def _metric(text: str, api: str, field: str) -> float:
    line = f'judge_gateway_ignored_request_fields_total{{api="{api}",field="{field}"}}'
    return next((float(x.split()[-1]) for x in text.splitlines() if x.startswith(line)), 0.0)


async def test_unread_fields_are_logged_once_counted_and_reported(app, caplog):
    application = await app()
    meta = {"reward_fn": {"quality": 1.0}, "prompts": ["a", "b"], "media_type": "image",
            "geneval_tags": ["single_object"] * 2, "ocr_use_gpu": False, "my_field": 3}
    caplog.set_level(logging.WARNING, logger="judge_gateway.server.ignored")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://localhost") as client:
        for _ in range(2):
            r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, IMAGES), headers=headers())
            assert r.status_code == 200, r.text
        body = (await poll(client, r.json()["uuid"], "quality")).json()
        metrics = (await client.get("/metrics")).text
    # quality is a yes/no judge: GenEval's and OCR's fields are not read for it
    assert body["ignored_fields"] == ["geneval_tags", "my_field", "ocr_use_gpu"]
    for field in ("geneval_tags", "my_field", "ocr_use_gpu"):
        assert _metric(metrics, "cosmos_rl", field) == 2.0, field
        assert sum(field in rec.getMessage() for rec in caplog.records) == 1, field  # once per field


async def test_video_infos_keys_beyond_the_frame_rate_are_reported(app):
    application = await app()
    service = application.state.cosmos_rl
    video = np.zeros((1, 3, 4, 16, 16), dtype=np.uint8)
    meta = {"reward_fn": {"video_q": 1.0}, "prompts": ["a"], "media_type": "video",
            "video_infos": [{"video_fps": 16, "height": 16, "codec": "h264"}]}
    prepared = await service.prepare(enqueue_body(meta, video), check_ready=False)
    assert prepared.ignored == ["video_infos[].codec", "video_infos[].height"]


async def test_ocr_use_gpu_goes_to_the_gpu_judge_or_is_reported(app):
    plain = (await app()).state.cosmos_rl
    meta = {"reward_fn": {"ocr": 1.0}, "prompts": ['a sign "Hi"'] * 2, "media_type": "image", "ocr_use_gpu": True}
    prepared = await plain.prepare(enqueue_body(meta, IMAGES), check_ready=False)
    assert prepared.rewards["ocr"].judge == "ocr"  # no gpu_judge: scored where it is, and said so
    assert prepared.notes["ocr"][0].startswith("ocr_use_gpu: true was not honoured: no GPU OCR judge is "
                                               "configured (cosmos_rl.rewards.ocr.gpu_judge); scored by judge 'ocr' on cpu")
    assert prepared.ignored == []  # read, and answered in the notes
    routed = (await app(rewards={"ocr": {"judge": "ocr", "gpu_judge": "ocr_gpu",
                                         "keys": {"ocr_reward": "reward"}}})).state.cosmos_rl
    prepared = await routed.prepare(enqueue_body(meta, IMAGES), check_ready=False)
    assert prepared.rewards["ocr"].judge == "ocr_gpu" and not prepared.notes
    prepared = await routed.prepare(enqueue_body({**meta, "ocr_use_gpu": False}, IMAGES), check_ready=False)
    assert prepared.rewards["ocr"].judge == "ocr"
    with pytest.raises(ValueError, match="ocr_use_gpu` must be true or false"):
        await routed.prepare(enqueue_body({**meta, "ocr_use_gpu": "yes"}, IMAGES), check_ready=False)


def test_gpu_judge_must_be_configured(fake_backend):
    data = config(fake_backend.base_url, rewards={"ocr": {"judge": "ocr", "gpu_judge": "nope", "keys": {"o": "reward"}}})
    with pytest.raises(ConfigError, match=r"cosmos_rl\.rewards\.ocr\.gpu_judge: unknown judge 'nope'"):
        validate_config(data)


async def test_flow_factory_extra_keys_and_profile_names_without_case(app):
    application = await app()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://localhost") as client:
        for path in ("/flow-factory/PickScore", "/flow-factory/pickscore", "/flow-factory/PICKSCORE"):
            assert (await client.get(f"{path}/health")).json()["profile"] == "PickScore"
            r = await client.post(f"{path}/compute", json={**ff_payload(["a"], image=pil_images(1)), "seed": 1})
            assert r.status_code == 200 and len(r.json()["rewards"]) == 1, r.text
        assert (await client.get("/flow-factory/pick_score/health")).status_code == 404
        metrics = (await client.get("/metrics")).text
    assert _metric(metrics, "flow_factory", "seed") == 3.0
