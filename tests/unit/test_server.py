"""The native HTTP API: status codes, error bodies, auth, limits, metrics, OpenAPI."""

from __future__ import annotations

import base64

import httpx
import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.conftest import png_bytes
from tests.support.fault_gateway import fault_config


def b64png(seed: int) -> str:
    return base64.b64encode(png_bytes(seed)).decode()


@pytest.fixture
async def make_client(fake_backend):
    made = []

    async def make(api_keys=None, max_body_bytes=None, max_samples=None, **combine):
        data = fault_config(fake_backend.base_url, **combine)
        data["server"] = {}
        if max_body_bytes:
            data["server"]["max_body_bytes"] = max_body_bytes
        if max_samples:
            data["server"]["max_samples_per_request"] = max_samples
        gw = Gateway(validate_config(data))
        app = create_app(gw, api_keys=api_keys)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost")
        made.append((client, gw))
        return client

    yield make
    for client, gw in made:
        await client.aclose()
        await gw.aclose()


async def test_rewards_roundtrip(make_client):
    client = await make_client()
    body = {"samples": [{"prompt": "a cat", "image": b64png(1), "group_id": "g"},
                        {"prompt": "a dog", "image": "data:image/png;base64," + b64png(2), "group_id": "g"}],
            "judges": ["quality", "final"], "group_transform": "rank", "request_id": "req-1"}
    r = await client.post("/v1/rewards", json=body)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["schema_version"] == 1 and data["id"] == "req-1"
    assert data["judges"] == ["quality", "final"]
    res = data["results"]
    assert [x["index"] for x in res] == [0, 1]
    assert res[0]["scores"]["quality"]["valid"] is True
    assert res[0]["scores"]["quality"]["template"]["sha256"]
    assert sorted(x["group_reward"] for x in res) == [0.5, 0.5]  # equal rewards tie


@pytest.mark.parametrize("body, field", [
    ({"samples": [{"prompt": "x", "image": "not base64 at all!!"}]}, "samples.0.image"),
    ({"samples": [{"prompt": "x", "image": base64.b64encode(b"\x00" * 64).decode()}]}, "samples.0.image"),
    ({"samples": [{"prompt": "x", "image": "https://example.com/cat.png"}]}, "samples.0.image"),
    ({"samples": []}, "samples"),
    ({"samples": [{"prompt": "x", "image": b64png(1), "colour": "red"}]}, "samples.0.colour"),
    ({"samples": [{"prompt": "x", "video": {"frames": [b64png(1)]}}]}, "samples.0.video"),
    ({"samples": [{"prompt": "x", "image": b64png(1)}], "group_transform": "softmax"}, "group_transform"),
])
async def test_bad_input_is_422_naming_the_field(make_client, body, field):
    client = await make_client()
    r = await client.post("/v1/rewards", json=body)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request"
    assert any(e["field"] == field for e in err["errors"]), err


async def test_not_json_is_422(make_client):
    client = await make_client()
    r = await client.post("/v1/rewards", content=b"\x89garbage", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["message"]


async def test_unknown_judge_is_400(make_client):
    client = await make_client()
    r = await client.post("/v1/rewards", json={"samples": [{"image": b64png(1)}], "judges": ["oracle"]})
    assert r.status_code == 400
    assert "oracle" in r.json()["error"]["message"]


async def test_body_limit_is_413(make_client):
    client = await make_client(max_body_bytes=2000)
    r = await client.post("/v1/rewards", json={"samples": [{"image": b64png(1)}]})
    assert r.status_code == 413
    assert "max_body_bytes" in r.json()["error"]["message"]


async def test_too_many_samples_is_413(make_client):
    client = await make_client(max_samples=2)
    r = await client.post("/v1/rewards", json={"samples": [{"image": b64png(i)} for i in range(3)]})
    assert r.status_code == 413
    assert "max_samples_per_request" in r.json()["error"]["message"]


async def test_api_keys(make_client):
    client = await make_client(api_keys=["s3cret"])
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/v1/judges")).status_code == 401
    r = await client.get("/v1/judges", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
    r = await client.get("/v1/judges", headers={"Authorization": "Bearer s3cret"})
    assert r.status_code == 200


async def test_judges_readyz_metrics(make_client):
    client = await make_client()
    judges = {j["name"]: j for j in (await client.get("/v1/judges")).json()["judges"]}
    assert judges["quality"]["template"]["id"] == "image_quality"
    assert judges["quality"]["template"]["version"] == "1"
    assert judges["quality"]["ready"] is True, judges["quality"]
    assert judges["down"]["ready"] is False and judges["down"]["ready_reason"]
    r = await client.get("/readyz")
    assert r.status_code == 503 and r.json()["judges"]["down"]["ready"] is False

    await client.post("/v1/rewards", json={"samples": [{"image": b64png(1)}], "judges": ["quality", "no_answer"]})
    text = (await client.get("/metrics")).text
    assert 'judge_gateway_invalid_scores_total{code="answer_missing",judge="no_answer"} 1.0' in text
    assert 'judge_gateway_judge_latency_seconds_count{judge="quality"} 1.0' in text
    assert 'judge_gateway_requests_total{api="native",status="ok"} 1.0' in text


async def test_openapi_describes_request_and_response(make_client):
    client = await make_client()
    spec = (await client.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    assert "RewardRequest" in schemas and "SampleInput" in schemas and "JudgeScore" in schemas
    assert schemas["JudgeScore"]["properties"]["valid"]["description"]
    assert schemas["SampleInput"]["properties"]["image"]["description"]
    op = spec["paths"]["/v1/rewards"]["post"]
    assert op["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("RewardRequest")
    # FastAPI's own parameter errors are answered in the one error body (errors.request_validation_error)
    assert "HTTPValidationError" not in schemas and "ErrorBody" in schemas
    four22 = [op["responses"]["422"] for methods in spec["paths"].values() for op in methods.values()
              if "422" in op.get("responses", {})]
    assert four22 and all(r["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody") for r in four22)
