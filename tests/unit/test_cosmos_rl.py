"""cosmos-rl reward protocol: requests built as cosmos-rl's clients build them, fault-injection judges.

Real-judge runs are in tests/integration/test_protocols.py.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import time

import httpx
import numpy as np
import pytest

from judge_gateway.config import ConfigError, validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.config import CosmosReward, CosmosRLConfig, InvalidFill
from judge_gateway.schema import ErrorCode, JudgeScore
from judge_gateway.server import create_app
from judge_gateway.server.cosmos_rl.envelope import legacy_lists
from judge_gateway.store import MemoryStore
from judge_gateway.server.cosmos_rl.tensors import PayloadError, bf16_view_to_float32
from tests.support.cosmos_client import enqueue_body, headers, poll
from tests.support.fault_gateway import fault_config

# ---- the client side, as cosmos-rl's example clients and remote_calculator do it -------------


def image_batch(b: int = 2, size: int = 512) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, size=(b, size, size, 3), dtype=np.uint8)


def video_batch(b: int = 2, t: int = 8, size: int = 32) -> np.ndarray:
    rng = np.random.default_rng(1)
    return rng.integers(0, 256, size=(b, 3, t, size, size), dtype=np.uint8)


def cosmos_config(base_url: str, **cosmos) -> dict:
    data = fault_config(base_url)
    judges = data["judges"]
    # The protocol's reward names, played by fault-injection judges.
    judges["cosmos_reason1"] = {"kind": "yes_no", "backend": "yes", "template": "cosmos_reason1@1", "default": False}
    judges["unified_reward"] = {"kind": "final_score", "backend": "final", "template": "unified_reward@1",
                                "default": False}
    data["cosmos_rl"] = cosmos
    return data


@pytest.fixture
async def make_client(fake_backend):
    made = []

    async def make(api_keys=None, store=None, **cosmos):
        gw = Gateway(validate_config(cosmos_config(fake_backend.base_url, **cosmos)))
        app = create_app(gw, api_keys=api_keys, store=store)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost")
        made.append((client, app, gw))
        return client

    yield make
    for client, app, gw in made:
        await client.aclose()
        await app.state.cosmos_rl.aclose()
        await gw.aclose()


async def test_ping_form_encoded(make_client):
    client = await make_client()
    r = await client.post("/api/reward/ping", data={"info_data": json.dumps({"rank": 0})}, headers=headers())
    assert r.status_code == 200 and r.json()["message"] == "Ping request received"


async def test_image_request_like_the_example_client(make_client):
    client = await make_client()
    meta = {"reward_fn": {"unified_reward": 1.0, "quality": 0.5, "final": 2.0},
            "prompts": ["a cat on a mat", "a dog"], "media_type": "image"}
    r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch()), headers=headers())
    assert r.status_code == 200, r.text
    uid = r.json()["uuid"]
    for reward, keys in (("unified_reward", ["unified_reward"]), ("quality", ["quality"]), ("final", ["final"])):
        res = await poll(client, uid, reward)
        assert res.status_code == 200, res.text
        body = res.json()
        assert body["type"] == reward and set(body["scores"]) == set(keys)
        for key in keys:
            assert len(body["scores"][key]) == 2 and all(isinstance(v, float) for v in body["scores"][key])
        assert body["valid"] == [True, True]
        assert body["input_info"] == {"shape": [2, 512, 512, 3], "dtype": "torch.uint8",
                                      "min": "0.000", "max": "255.000"}
        float(body["duration"]), float(body["decoded_duration"])
        assert len(body["judge_scores"]) == 2 and body["judge_scores"][0]["valid"]
    # unified_reward's legacy key is cosmos-rl's score / 5 (fake: "Final Score: 4"), not
    # the raw 4.0
    res = (await poll(client, uid, "unified_reward")).json()
    assert res["scores"]["unified_reward"] == [pytest.approx(0.8), pytest.approx(0.8)]
    assert [s["raw"] for s in res["judge_scores"]] == [4.0, 4.0]
    # a custom judge by its own name: the normalised reward
    q = (await poll(client, uid, "quality")).json()
    assert q["scores"]["quality"] == [pytest.approx(s["reward"]) for s in q["judge_scores"]]


async def test_video_request_cosmos_reason1_keys(make_client):
    client = await make_client()
    meta = {"reward_fn": {"cosmos_reason1": 1.0}, "prompts": ["a ball", "a car"], "media_type": "video",
            "video_infos": [{"video_fps": 16.0}, {"video_fps": 8}]}
    r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, video_batch()), headers=headers())
    assert r.status_code == 200, r.text
    body = (await poll(client, r.json()["uuid"], "cosmos_reason1")).json()
    s = body["scores"]
    assert set(s) == {"prediction", "no_score", "yes_logit", "no_logit"}
    # fake-yes: "Yes" (anomaly) is likely, so the video is Bad and no_score < 0.5
    assert s["prediction"] == ["Bad", "Bad"]
    cell = body["judge_scores"][0]
    assert s["no_score"][0] == pytest.approx(cell["reward"])
    assert s["yes_logit"][0] == pytest.approx(cell["details"]["logprob_yes"])
    assert s["no_logit"][0] == pytest.approx(cell["details"]["logprob_no"])
    assert body["input_info"]["video_infos"] == meta["video_infos"]
    assert cell["details"]["video"]["fps"] == pytest.approx(16.0)


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


IMG_META = {"reward_fn": {"quality": 1.0}, "prompts": ["a", "b"], "media_type": "image"}


@pytest.mark.parametrize("body, reason", [
    (np.random.default_rng(3).bytes(4096), "not UTF-8 JSON"),  # holds a newline: its first line is junk
    (np.random.default_rng(3).bytes(4096).replace(b"\n", b" "), "no '\\n'"),
    (b"\x00\x01garbage\nmore garbage", "not UTF-8 JSON"),
    (b'{"prompts": ["a", "b"], "media_type": "image"}' + b"\n" + _npy(image_batch(2, 16)), "no `reward_fn`"),
    (json.dumps(IMG_META).encode() + _npy(image_batch(2, 16)), "no '\\n'"),
    (json.dumps({**IMG_META, "reward_fn": {"no_such_reward": 1}}).encode() + b"\n" + _npy(image_batch(2, 16)),
     "unknown reward 'no_such_reward'"),
    (json.dumps({**IMG_META, "reward_fn": {"hpsv2": 1}}).encode() + b"\n" + _npy(image_batch(2, 16)),
     "reward 'hpsv2' is not configured on this gateway"),
    (json.dumps({**IMG_META, "prompts": ["a", "b", "c"]}).encode() + b"\n" + _npy(image_batch(2, 16)),
     "batch is 2 but `prompts` has 3"),
    (json.dumps(IMG_META).encode() + b"\n" + _npy(image_batch(2, 16).astype(np.float32)), "must be uint8"),
    (json.dumps(IMG_META).encode() + b"\n" + _npy(image_batch(2, 16)[..., 0]), "must be [B,H,W,3]"),
    (json.dumps(IMG_META).encode() + b"\n" + b"random tensor bytes", "neither npy"),
    (json.dumps(IMG_META).encode() + b"\n" + _npy(np.array([{"a": 1}, None], dtype=object)), "refused"),
    (json.dumps(IMG_META).encode() + b"\n" + b"PK\x03\x04torch zip", "torch worker"),
    (json.dumps({**IMG_META, "media_type": "video", "reward_fn": {"cosmos_reason1": 1}}).encode() + b"\n"
     + _npy(video_batch()), "need `video_infos`"),
    (json.dumps({**IMG_META, "media_type": "video", "reward_fn": {"cosmos_reason1": 1},
                 "video_infos": [{"fps": 16}, {"fps": 16, "video_fps": 8}]}).encode() + b"\n" + _npy(video_batch()),
     "which is it?"),  # `fps` alone is accepted (test_cosmos_rl_inputs.py); two different rates are not
    (json.dumps({**IMG_META, "reward_fn": {"cosmos_reason1": 1}}).encode() + b"\n" + _npy(image_batch(2, 16)),
     "score videos"),
    (json.dumps({"reward_fn": {"quality": 1}, "prompts": ["a", "b"]}).encode() + b"\n"
     + _npy(np.zeros((2, 16, 1, 8, 8), np.float16)), "needs a latent decoder"),
    (json.dumps({**IMG_META, "reward_fn": {"quality": 0}}).encode() + b"\n" + _npy(image_batch(2, 16)),
     "weight <= 0"),
    (json.dumps({**IMG_META, "reward_fn": {"quality": "high"}}).encode() + b"\n" + _npy(image_batch(2, 16)),
     "must be a number"),
    # every reward of cosmos-rl's reward service reads metadata["prompts"]: no uuid without it
    (json.dumps({"reward_fn": {"quality": 1.0}, "media_type": "image"}).encode() + b"\n" + _npy(image_batch(2, 16)),
     "no `prompts`"),
    (json.dumps({**IMG_META, "prompt": "a"}).encode() + b"\n" + _npy(image_batch(2, 16)), "both `prompts` and `prompt`"),
])
async def test_bad_enqueue_is_400_with_reason_and_no_uuid(make_client, body, reason):
    client = await make_client()
    r = await client.post("/api/reward/enqueue", content=body, headers=headers())
    assert r.status_code == 400, r.text
    data = r.json()
    assert "uuid" not in data
    assert reason in data["message"], data


async def test_invalid_samples_carry_fill_value_and_are_flagged(make_client):
    # accept, to reach the fill path; retry_attempts = 0: fill at once (by default a backend that stays down
    # is retried until request_timeout_s)
    client = await make_client(fill_value=-7.0, refuse_unready=False, retry_attempts=0)
    meta = {**IMG_META, "reward_fn": {"down": 1.0, "quality": 1.0}}
    r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch(2, 16)), headers=headers())
    uid = r.json()["uuid"]
    body = (await poll(client, uid, "down")).json()
    assert body["scores"]["down"] == [-7.0, -7.0]
    assert body["valid"] == [False, False] and body["fill_value"] == -7.0
    assert all(e.startswith("backend_unavailable") for e in body["errors"])
    assert body["judge_scores"][0]["error"]["code"] == "backend_unavailable"
    ok = (await poll(client, uid, "quality")).json()  # the other reward is unaffected
    assert ok["valid"] == [True, True] and ok["errors"] == [None, None]


async def test_label_fill_for_invalid_cosmos_reason1(fake_backend):
    data = cosmos_config(fake_backend.base_url, refuse_unready=False, retry_attempts=0)  # the fill path, at once
    data["judges"]["cosmos_reason1"]["backend"] = "down"
    gw = Gateway(validate_config(data))
    app = create_app(gw)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
        meta = {"reward_fn": {"cosmos_reason1": 1}, "prompts": ["a"], "media_type": "video",
                "video_infos": [{"video_fps": 8}]}
        r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, video_batch(1)), headers=headers())
        body = (await poll(client, r.json()["uuid"], "cosmos_reason1")).json()
    await app.state.cosmos_rl.aclose()
    await gw.aclose()
    assert body["scores"]["prediction"] == ["Invalid"] and body["scores"]["no_score"] == [0.0]
    assert body["valid"] == [False]


async def test_pending_then_done_and_statuses(make_client):
    client = await make_client(retry_attempts=0)  # done once its one try timed out (not at request_timeout_s)
    meta = {**IMG_META, "reward_fn": {"stalled": 1.0}}  # answers after its 0.5 s deadline
    uid = (await client.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch(2, 16)),
                             headers=headers())).json()["uuid"]
    r = await client.post("/api/reward/pull", data={"uuid": uid, "type": "stalled"})
    # 425 by default (cosmos-rl's trainer polls through it), with cosmos-rl's message
    assert r.status_code == 425 and r.json()["status"] == "pending"
    assert r.json()["message"].startswith(f"Not found scores for {uid}")
    done = await poll(client, uid, "stalled")
    assert done.status_code == 200 and done.json()["valid"] == [False, False]
    r = await client.post("/api/reward/pull", data={"uuid": uid, "type": "quality"})
    assert r.status_code == 404 and r.json()["status"] == "unknown" and "did not ask" in r.json()["message"]
    r = await client.post("/api/reward/pull", data={"uuid": "nope", "type": "stalled"})
    assert r.status_code == 404 and r.json()["status"] == "unknown"
    r = await client.post("/api/reward/pull", json={"uuid": uid, "type": "stalled"})  # JSON too
    assert r.status_code == 200
    r = await client.post("/api/reward/pull", data={"uuid": uid})  # no type: cosmos-rl's dance_grpo
    assert r.status_code == 404 and r.json()["type"] == "dance_grpo" and "send `type`" in r.json()["message"]


async def test_pending_status_400_behind_its_option(make_client):
    """The reward service README's "400 Not Ready", for clients written to that README."""
    client = await make_client(pending_status=400)
    meta = {**IMG_META, "reward_fn": {"stalled": 1.0}}
    uid = (await client.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch(2, 16)),
                             headers=headers())).json()["uuid"]
    r = await client.post("/api/reward/pull", data={"uuid": uid, "type": "stalled"})
    assert r.status_code == 400 and r.json()["status"] == "pending"


async def test_ping_answers_on_the_readmes_pin_path_too(make_client):
    client = await make_client()
    for path in ("/api/reward/ping", "/api/reward/pin"):
        r = await client.post(path, data={"info_data": '{"prompts": ["a"]}'})
        assert r.status_code == 200 and r.json()["message"] == "Ping request received"


async def test_ping_says_which_reward_cannot_be_scored_and_why(make_client):
    """cosmos-rl's ping carries the enqueue's metadata: the answer stays its 200 and message, and
    says whether the rewards its reward_fn names can be scored (a dead backend: no, with why)."""
    client = await make_client()
    meta = {"reward_fn": {"quality": 1.0, "down": 1.0, "no_such_reward": 1.0}, "prompts": ["a"]}
    r = await client.post("/api/reward/pin", data={"info_data": json.dumps(meta)})
    body = r.json()
    assert r.status_code == 200 and body["message"] == "Ping request received" and body["ready"] is False
    assert set(body["not_ready"]) == {"down", "no_such_reward"}, body
    assert body["not_ready"]["down"].startswith("judge 'down' is not ready (replica 1 of 1: cannot connect")
    assert body["not_ready"]["no_such_reward"].startswith("unknown reward 'no_such_reward'")
    ok = await client.post("/api/reward/pin", data={"info_data": json.dumps({"reward_fn": {"quality": 1.0}})})
    assert ok.json()["ready"] is True and "not_ready" not in ok.json()


async def test_skipped_reward_says_so(make_client):
    client = await make_client()
    meta = {**IMG_META, "reward_fn": {"quality": 1.0, "final": 0.0}}
    uid = (await client.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch(2, 16)),
                             headers=headers())).json()["uuid"]
    assert (await poll(client, uid, "quality")).status_code == 200
    r = await poll(client, uid, "final")
    assert r.status_code == 404 and "weight <= 0" in r.json()["message"]


async def _pull_after_request_timeout(base_url: str, **cosmos) -> httpx.Response:
    meta = {**IMG_META, "reward_fn": {"stalled": 1.0}}
    data = cosmos_config(base_url, request_timeout_s=0.3, **cosmos)
    data["judges"]["stalled"]["deadline_s"] = 30  # the fake stalls 20 s: the request timeout ends it first
    gw = Gateway(validate_config(data))
    app = create_app(gw)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as c2:
        uid = (await c2.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch(2, 16)),
                             headers=headers())).json()["uuid"]
        r = await poll(c2, uid, "stalled")
    await app.state.cosmos_rl.aclose()
    await gw.aclose()
    return r


async def test_request_timeout_is_an_explicit_failure_the_trainer_can_pull(fake_backend):
    """cosmos-rl's trainer never drops a uuid it cannot pull (a 500 stalls it there): a failed
    request answers 200, every sample invalid, each legacy value the reward's policy's fill."""
    r = await _pull_after_request_timeout(fake_backend.base_url, fill_value=0.25)
    body = r.json()
    assert r.status_code == 200 and body["status"] == "failed" and "request_timeout_s" in body["reason"]
    assert body["scores"]["stalled"] == [0.25, 0.25]  # group_mean with nothing valid: one constant
    assert body["valid"] == [False, False] and body["filled_by"] == ["fill_value", "fill_value"]
    assert all("timeout" in e for e in body["errors"])
    r = await _pull_after_request_timeout(fake_backend.base_url, on_invalid="sentinel")
    assert r.status_code == 200 and r.json()["scores"]["stalled"] == [-1.0, -1.0]


async def test_request_timeout_is_a_500_with_on_failed_error(fake_backend):
    r = await _pull_after_request_timeout(fake_backend.base_url, on_failed="error")
    assert r.status_code == 500 and r.json()["status"] == "failed"
    assert "request_timeout_s" in r.json()["message"]


async def test_full_queue_is_503_not_a_silent_drop(make_client):
    client = await make_client(max_pending=1, retry_attempts=0)  # the stalled judge's fill at once
    meta = {**IMG_META, "reward_fn": {"stalled": 1.0}}
    first = await client.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch(2, 16)), headers=headers())
    assert first.status_code == 200
    second = await client.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch(2, 16)), headers=headers())
    assert second.status_code == 503 and "max_pending" in second.json()["message"]
    assert "uuid" not in second.json() and second.headers["Retry-After"]
    assert (await poll(client, first.json()["uuid"], "stalled")).status_code == 200


async def test_pending_entry_of_a_dead_process_reads_failed(make_client):
    store = MemoryStore(ttl_s=60, max_entries=100)
    client = await make_client(store=store)
    now = time.time()
    await store.put("00000000-0000-4000-8000-000000000001", {"status": "pending", "owner": "dead-instance", "accepted_at": now,
                               "deadline": now + 600, "rewards": ["quality"], "skipped": []})
    r = await client.post("/api/reward/pull", data={"uuid": "00000000-0000-4000-8000-000000000001", "type": "quality"})
    assert r.status_code == 500 and r.json()["status"] == "failed" and "gone" in r.json()["message"]
    await store.put("00000000-0000-4000-8000-000000000002", {"status": "pending", "owner": "x", "accepted_at": now - 10, "deadline": now - 1,
                            "rewards": ["quality"], "skipped": []})
    r = await client.post("/api/reward/pull", data={"uuid": "00000000-0000-4000-8000-000000000002", "type": "quality"})
    assert r.status_code == 500 and "request_timeout_s" in r.json()["message"]
    # An entry that kept its prompts (every entry this version writes) is filled per prompt group.
    await store.put("00000000-0000-4000-8000-000000000003", {"status": "pending", "owner": "dead-instance", "accepted_at": now,
                                "deadline": now + 600, "rewards": ["quality"], "skipped": [],
                                "prompts": ["a", "a", "b"]})
    r = await client.post("/api/reward/pull", data={"uuid": "00000000-0000-4000-8000-000000000003", "type": "quality"})
    body = r.json()
    assert r.status_code == 200 and body["status"] == "failed" and "gone" in body["reason"]
    assert body["scores"]["quality"] == [0.0, 0.0, 0.0] and body["valid"] == [False] * 3


async def test_bearer_none_refused_with_clear_message_when_keys_configured(make_client):
    client = await make_client(api_keys=["s3cret"])
    meta = {**IMG_META}
    r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch(2, 16)), headers=headers(None))
    assert r.status_code == 401 and "Bearer None" in r.json()["message"]
    r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch(2, 16)),
                          headers=headers("s3cret"))
    assert r.status_code == 200
    assert (await poll(client, r.json()["uuid"], "quality", token="s3cret")).status_code == 200


async def test_shutdown_stores_unfinished_as_failed(fake_backend):
    store = MemoryStore(ttl_s=60, max_entries=100)
    data = cosmos_config(fake_backend.base_url)
    data["judges"]["stalled"]["deadline_s"] = 30
    gw = Gateway(validate_config(data))
    app = create_app(gw, store=store)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
        uid = (await client.post("/api/reward/enqueue", headers=headers(),
                                 content=enqueue_body({**IMG_META, "reward_fn": {"stalled": 1}},
                                                      image_batch(2, 16)))).json()["uuid"]
        await app.state.cosmos_rl.aclose()
    await gw.aclose()
    entry = await store.get(uid)
    assert entry["status"] == "failed" and "shut down" in entry["reason"]
    assert entry["prompts"] == ["a", "b"] and entry["rewards"] == ["stalled"]  # a pull can still be filled


# ---- store, tensors, config ------------------------------------------------------------------


async def test_memory_store_ttl_and_lru_bound():
    s = MemoryStore(ttl_s=60, max_entries=2)
    await s.put("a", {"v": 1})
    await s.put("b", {"v": 2})
    assert (await s.get("a")) == {"v": 1}  # a is now most recent
    await s.put("c", {"v": 3})
    assert await s.get("b") is None and await s.get("a") and await s.get("c")
    await s.put("d", {"v": 4}, ttl_s=0.05)
    await asyncio.sleep(0.1)
    assert await s.get("d") is None


def test_bf16_byte_view_roundtrip():
    values = np.array([1.0, -2.5, 0.15625, 3.0e4], dtype=np.float32)
    bf16 = (values.view(np.uint32) >> 16).astype(np.uint16)
    as_u8 = bf16.view(np.uint8).reshape(1, 8)  # the client's uint8 view: last dim doubled
    assert bf16_view_to_float32(as_u8).reshape(-1).tolist() == [1.0, -2.5, 0.15625, 29952.0]


def test_config_names_bad_keys():
    with pytest.raises(ConfigError, match=r"cosmos_rl\.rewards\.x\.keys\.k\.source"):
        validate_config({"cosmos_rl": {"rewards": {"x": {"judge": "j", "keys": {"k": "logits"}}}}})
    with pytest.raises(ConfigError, match=r"store\.url"):
        validate_config({"store": {"kind": "redis", "url_env": None}})
    with pytest.raises(ConfigError, match=r"cosmos_rl\.latents\.python"):
        validate_config({"cosmos_rl": {"latents": {"checkpoint": "/x"}}})


# ---- invalid-sample policy (the trainer trains on `scores`, never reads `valid`) ---------------


def _cr1_cell(p_no: float | None) -> JudgeScore:
    """A cosmos_reason1 verdict (p_no = its reward), or a parse failure when None."""
    if p_no is None:
        return JudgeScore.failure("cosmos_reason1", ErrorCode.answer_missing, "no Yes/No in the top-K")
    return JudgeScore(judge="cosmos_reason1", reward=p_no, raw=p_no, valid=True,
                      details={"logprob_yes": math.log(1 - p_no), "logprob_no": math.log(p_no)})


def _advantages(rewards: list[float]) -> list[float]:
    """cosmos-rl remote_calculator's legacy advantage: (r - mean) / (std + 1e-4), torch's unbiased std."""
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1))
    return [(r - mean) / (std + 1e-4) for r in rewards]


def _cr1(**policy) -> tuple[CosmosReward, InvalidFill]:
    cfg = CosmosRLConfig.model_validate(policy)
    return cfg.rewards["cosmos_reason1"], cfg.fill_of(cfg.rewards["cosmos_reason1"])


def test_group_mean_fills_the_mean_of_the_samples_with_the_same_prompt():
    reward, fill = _cr1()  # the default policy
    assert fill.policy == "group_mean"
    cells = [_cr1_cell(v) for v in (0.9, 0.3, None, 0.2, None, None)]
    prompts = ["a", "a", "a", "b", "b", "c"]
    out = legacy_lists(reward, fill, cells, prompts)
    s = out.scores
    assert s["no_score"] == [0.9, 0.3, pytest.approx(0.6), 0.2, pytest.approx(0.2), pytest.approx(1.4 / 3)]
    # a label key gets the label of the filled number
    assert s["prediction"] == ["Good", "Bad", "Good", "Bad", "Bad", "Bad"]
    assert s["yes_logit"][2] == pytest.approx((math.log(0.1) + math.log(0.7)) / 2)
    assert out.valid == [True, True, False, True, False, False]
    assert out.filled_by == [None, None, "group_mean", None, "group_mean", "request_mean"]
    assert out.errors[2].startswith("answer_missing")
    # what the trainer computes for group "a": the filled sample's advantage is zero
    assert _advantages(s["no_score"][:3])[2] == pytest.approx(0.0, abs=1e-9)


def test_group_mean_of_an_all_invalid_request_is_one_constant():
    reward, fill = _cr1(fill_value=0.25, fill_label="Unscored")
    out = legacy_lists(reward, fill, [_cr1_cell(None)] * 3, ["a", "a", "b"])
    assert out.scores["no_score"] == [0.25, 0.25, 0.25] and out.scores["prediction"] == ["Unscored"] * 3
    assert out.filled_by == ["fill_value"] * 3
    assert _advantages(out.scores["no_score"]) == [0.0, 0.0, 0.0]


def test_value_and_sentinel_policies():
    cells = [_cr1_cell(0.9), _cr1_cell(None)]
    reward, fill = _cr1(on_invalid="value", fill_value=-3.0)
    out = legacy_lists(reward, fill, cells, ["a", "a"])
    assert out.scores["no_score"] == [0.9, -3.0] and out.scores["prediction"] == ["Good", "Invalid"]
    assert out.filled_by == [None, "fill_value"]
    reward, fill = _cr1(on_invalid="sentinel")
    out = legacy_lists(reward, fill, cells, ["a", "a"])
    assert out.scores["no_score"] == [0.9, -1.0] and out.scores["prediction"] == ["Good", "Error"]
    assert out.scores["yes_logit"][1] == -1.0 and out.filled_by == [None, "sentinel"]


def test_gen_eval_group_of_an_invalid_sample_is_not_applicable_in_every_tag():
    cfg = CosmosRLConfig()
    reward = cfg.rewards["gen_eval"]
    ok = JudgeScore(judge="gen_eval", reward=1.0, raw=1.0, valid=True,
                    details={"tag": "colors", "cosmos_rl": {"correct": 1.0, "strict": 0.0, "score": 0.75}})
    bad = JudgeScore.failure("gen_eval", ErrorCode.head_error, "worker died")
    out = legacy_lists(reward, cfg.fill_of(reward), [ok, bad], ["p", "p"])
    assert out.scores["gen_eval_group"] == {"single_object": [-10.0, -10.0], "two_object": [-10.0, -10.0],
                                            "counting": [-10.0, -10.0], "colors": [1.0, -10.0],
                                            "position": [-10.0, -10.0], "color_attr": [-10.0, -10.0]}
    assert out.scores["gen_eval_score"] == [0.75, 0.75] and out.filled_by == [None, "group_mean"]


async def test_per_reward_policy_overrides_the_global_one(make_client):
    client = await make_client(on_invalid="value", fill_value=-7.0, refuse_unready=False, retry_attempts=0, rewards={
        "down_sentinel": {"judge": "down", "keys": {"down": "reward"}, "on_invalid": "sentinel"},
        "down_mean": {"judge": "down", "keys": {"down": "reward"}, "on_invalid": "group_mean",
                      "fill_value": 0.5}})
    meta = {**IMG_META, "reward_fn": {"down": 1.0, "down_sentinel": 1.0, "down_mean": 1.0}}
    uid = (await client.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch(2, 16)),
                             headers=headers())).json()["uuid"]
    body = (await poll(client, uid, "down")).json()
    assert body["scores"]["down"] == [-7.0, -7.0] and body["on_invalid"] == "value"
    body = (await poll(client, uid, "down_sentinel")).json()
    assert body["scores"]["down"] == [-1.0, -1.0] and body["filled_by"] == ["sentinel", "sentinel"]
    body = (await poll(client, uid, "down_mean")).json()  # nothing valid: one constant, fill_value
    assert body["scores"]["down"] == [0.5, 0.5] and body["filled_by"] == ["fill_value", "fill_value"]
    assert body["valid"] == [False, False] and body["on_invalid"] == "group_mean"


def test_invalid_policy_is_validated_at_load_naming_the_key():
    with pytest.raises(ConfigError, match=r"cosmos_rl\.on_invalid"):
        validate_config({"cosmos_rl": {"on_invalid": "zero"}})
    with pytest.raises(ConfigError, match=r"cosmos_rl\.rewards\.x\.on_invalid"):
        validate_config({"cosmos_rl": {"rewards": {"x": {"judge": "j", "keys": {"k": "raw"}, "on_invalid": "mean"}}}})


async def test_transient_faults_are_scored_again_before_anything_is_filled():
    """A backend that answers 503 twice, with no retries of its own: the third try is scored."""
    from tests.support.fake_openai import FakeOpenAIServer

    server = FakeOpenAIServer(flaky_failures=2).start()
    try:
        data = cosmos_config(server.base_url, retry_attempts=2, retry_backoff_s=0.05)
        data["backends"]["flaky"]["max_retries"] = 0
        gw = Gateway(validate_config(data))
        app = create_app(gw)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as c:
            meta = {**IMG_META, "prompts": ["a"], "reward_fn": {"flaky": 1.0}}
            uid = (await c.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch(1, 16)),
                                headers=headers())).json()["uuid"]
            body = (await poll(c, uid, "flaky")).json()
        await app.state.cosmos_rl.aclose()
        await gw.aclose()
    finally:
        server.stop()
    assert body["valid"] == [True] and body["filled_by"] == [None]
    assert body["judge_scores"][0]["details"]["attempts"] == 3
    assert body["scores"]["flaky"] == [pytest.approx(0.7 / 0.9)]


async def test_retries_stop_at_the_request_deadline_and_the_sample_is_filled(make_client):
    # accept, to reach the retry and fill path (enqueue refuses an unreachable backend by default)
    client = await make_client(request_timeout_s=2.0, retry_attempts=50, retry_backoff_s=0.2,
                               refuse_unready=False)
    meta = {**IMG_META, "reward_fn": {"down": 1.0}}
    uid = (await client.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch(2, 16)),
                             headers=headers())).json()["uuid"]
    r = await poll(client, uid, "down")
    assert r.status_code == 200 and r.json()["filled_by"] == ["fill_value", "fill_value"]  # done, not failed
    # The 2 s deadline, not the 50 allowed retries, ended the re-scoring (0.2 s doubling waits
    # leave room for a handful of attempts at most).
    attempts = [cell["details"]["attempts"] for cell in r.json()["judge_scores"]]
    assert all(1 <= a < 10 for a in attempts), attempts


@pytest.mark.parametrize("uid", ["index", "gone:00000000-0000-4000-8000-000000000001", "instance:x",
                                 "00000000-0000-4000-8000-000000000001 ", "x" * 10_000])
async def test_pull_of_anything_but_a_uuid_is_unknown(make_client, uid):
    client = await make_client()
    r = await client.post("/api/reward/pull", data={"uuid": uid, "type": "quality"})
    assert r.status_code == 404 and r.json()["status"] == "unknown" and "not a uuid" in r.json()["message"]


async def test_the_readmes_single_prompt_is_every_samples_prompt(make_client):
    """The reward service README's GenEval body sends one `prompt` (a string) for its image."""
    client = await make_client()
    meta = {"reward_fn": {"quality": 1.0}, "prompt": "a red car", "media_type": "image"}
    prepared = await client._transport.app.state.cosmos_rl.prepare(enqueue_body(meta, image_batch(2, 16)))
    assert prepared.meta.prompts == ["a red car", "a red car"]


async def test_a_head_that_cannot_load_is_refused_before_a_uuid(fake_backend):
    """cosmos-rl's rewards.toml names dance_grpo's checkpoint as a folder (`/workspace/VideoReward`);
    one that does not exist can never load: the enqueue is 424 with the reason, at once (no worker is
    started), on every reward whose judge it is, never a uuid whose pull is filled."""
    data = cosmos_config(fake_backend.base_url)
    data["judges"]["videoalign"] = {"kind": "videoalign", "default": False,
                                    "options": {"checkpoint": "/nonexistent/VideoReward"}}
    gw = Gateway(validate_config(data))
    app = create_app(gw)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
            meta = {"reward_fn": {"dance_grpo": 1.0}, "prompts": ["a", "b"], "media_type": "video",
                    "video_infos": [{"video_fps": 8}, {"video_fps": 8}]}
            for reward in ("dance_grpo", "videoalign"):
                r = await client.post("/api/reward/enqueue", headers=headers(),
                                      content=enqueue_body({**meta, "reward_fn": {reward: 1.0}}, video_batch()))
                assert r.status_code == 424 and "uuid" not in r.json(), r.text
                assert "'/nonexistent/VideoReward' does not exist" in r.json()["message"]
        assert gw.judges["videoalign"].worker.pid is None  # nothing was started for it
    finally:
        await app.state.cosmos_rl.aclose()
        await gw.aclose()


# The reward service README's GenEval body (reward_service/README.md "Image (GenEval)" at cosmos-rl
# 833ddb86, before 28d72cf6 renamed its fields): one `prompt`, a `tag`, the image's `include` list.
README_GENEVAL_BODY = {"prompt": "a photo of a brown giraffe and a white stop sign", "reward_fn": {"gen_eval": 1.0},
                       "media_type": "image", "tag": "single_object",
                       "include": [{"class": "giraffe", "count": 1, "color": "brown"},
                                   {"class": "stop sign", "count": 1, "color": "black"}]}


@pytest.mark.parametrize("batch", [1, 2])
async def test_the_readmes_geneval_body_is_read_as_documented(fake_backend, batch):
    data = cosmos_config(fake_backend.base_url)
    data["judges"]["gen_eval"] = {"kind": "gen_eval", "default": False,
                                  "options": {"detector_checkpoint": "det.pth", "clip_pretrained": "openai"}}
    gw = Gateway(validate_config(data))
    app = create_app(gw)
    try:
        prepared = await app.state.cosmos_rl.prepare(enqueue_body(README_GENEVAL_BODY, image_batch(batch, 16)),
                                                     check_ready=False)
        assert prepared.meta.prompts == [README_GENEVAL_BODY["prompt"]] * batch
        assert prepared.ignored == []  # tag and include are read, not reported ignored
        for md in prepared.extra_meta:  # every sample: the README's tag and its whole include list
            assert md == {"geneval_tags": "single_object", "geneval_includes": README_GENEVAL_BODY["include"]}
        both = {**README_GENEVAL_BODY, "geneval_tags": ["single_object"] * batch}
        with pytest.raises(PayloadError, match="both `tag`"):
            await app.state.cosmos_rl.prepare(enqueue_body(both, image_batch(batch, 16)), check_ready=False)
    finally:
        await app.state.cosmos_rl.aclose()
        await gw.aclose()
