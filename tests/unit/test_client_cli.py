"""The Python clients (in-process and over HTTP) and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest
import uvicorn

from judge_gateway import AsyncRewardClient, RewardAPIError, RewardClient, RewardConnectionError, RewardResponse
from judge_gateway.cli import main as cli_main
from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.conftest import png_bytes
from tests.support.cli_configs import write_config
from tests.support.fake_openai import free_port


def small_config(base_url: str) -> dict:
    return {
        "backends": {"yes": {"model": "fake-yes", "base_urls": [base_url]},
                     "final": {"model": "fake-final-4", "base_urls": [base_url]}},
        "judges": {"quality": {"kind": "yes_no", "backend": "yes", "template": "image_quality@1"},
                   "final": {"kind": "final_score", "backend": "final", "template": "unified_reward@1",
                             "default": False}},
    }


@pytest.fixture(scope="module")
def served(fake_backend):
    """The real service on a real socket, in a thread."""
    port = free_port()
    gw = Gateway(validate_config(small_config(fake_backend.base_url)))
    app = create_app(gw, api_keys=["k"])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


async def test_async_client_in_process_accepts_arrays(fake_backend):
    arr = np.random.default_rng(0).integers(0, 256, (32, 40, 3), dtype=np.uint8)
    async with AsyncRewardClient(config=validate_config(small_config(fake_backend.base_url))) as client:
        resp = await client.rewards.create(samples=[{"prompt": "p", "image": arr},
                                                    {"prompt": "q", "image": png_bytes(5)}])
        judges = await client.judges.list()
    assert isinstance(resp, RewardResponse)
    assert resp.judges == ["quality"]  # only default judges
    assert all(r.scores["quality"].valid for r in resp.results)
    assert [j.name for j in judges] == ["quality", "final"]


async def test_async_client_over_http(served):
    arr = np.random.default_rng(1).integers(0, 256, (32, 40, 3), dtype=np.uint8)
    async with AsyncRewardClient(served, api_key="k") as client:
        resp = await client.rewards.create(samples=[{"prompt": "p", "image": arr}], judges=["quality", "final"])
        assert resp.results[0].scores["final"].reward == pytest.approx(0.75)
        with pytest.raises(RewardAPIError) as err:
            await client.rewards.create(samples=[{"image": png_bytes(1)}], judges=["nope"])
        assert err.value.status == 400 and "nope" in err.value.message
    async with AsyncRewardClient(served, api_key="wrong") as client:
        with pytest.raises(RewardAPIError) as err:
            await client.judges.list()
        assert err.value.status == 401


TRANSPORT_FAULTS = {"connect": httpx.ConnectError, "protocol": httpx.RemoteProtocolError, "read": httpx.ReadError,
                    "write": httpx.WriteError, "read_timeout": httpx.ReadTimeout, "write_timeout": httpx.WriteTimeout,
                    "pool_timeout": httpx.PoolTimeout}


class _FlakyFront:
    """An httpx transport in front of the served gateway: answers `faults` first (a status, with
    Retry-After 0, or "connect" for a refused connection), then forwards; counts the calls."""

    def __init__(self, target: str, faults: list) -> None:
        self.target, self.faults, self.calls = target, list(faults), 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.faults:
            fault = self.faults.pop(0)
            if fault in TRANSPORT_FAULTS:
                raise TRANSPORT_FAULTS[fault]("fault", request=request)
            return httpx.Response(fault, headers={"retry-after": "0"}, json={"error": {"message": f"fault {fault}"}})
        async with httpx.AsyncClient(base_url=self.target) as real:
            resp = await real.request(request.method, request.url.path, content=request.content,
                                      headers={k: v for k, v in request.headers.items() if k != "host"})
            return httpx.Response(resp.status_code, headers=resp.headers, content=resp.content)


def _client_through(front: _FlakyFront, max_retries: int = 2) -> AsyncRewardClient:
    client = AsyncRewardClient("http://gateway.invalid", api_key="k", max_retries=max_retries)
    client._http = httpx.AsyncClient(base_url="http://gateway.invalid", headers={"Authorization": "Bearer k"},
                                     transport=httpx.MockTransport(front))
    return client


async def test_client_sends_again_what_the_service_could_not_take_or_lost(served):
    """429 / 503 (admission), a proxy's 500 for a replica that died, a refused connection: sent
    again (scoring is idempotent), up to max_retries; a 4xx naming the request's fault is not."""
    sample = [{"prompt": "p", "image": png_bytes(3)}]
    for faults in ([429, 503], [500], ["connect", 502], ["protocol", "read"], ["write"]):
        front = _FlakyFront(served, faults)
        async with _client_through(front) as client:
            resp = await client.rewards.create(samples=sample, judges=["final"])
        assert resp.results[0].scores["final"].reward == pytest.approx(0.75)
        assert front.calls == len(faults) + 1
    for timeout in ("read_timeout", "write_timeout", "pool_timeout"):  # may still be scoring: not sent again
        front = _FlakyFront(served, [timeout])
        async with _client_through(front) as client:
            with pytest.raises(RewardConnectionError) as err:  # naming the URL, httpx's error its cause
                await client.rewards.create(samples=sample, judges=["final"])
        assert isinstance(err.value.__cause__, TRANSPORT_FAULTS[timeout]) and isinstance(err.value, httpx.TransportError)
        assert "http://gateway.invalid/v1/rewards" in str(err.value)
        assert front.calls == 1, timeout
    front = _FlakyFront(served, [503, 503, 503])
    async with _client_through(front) as client:  # retries spent: the last answer is the error
        with pytest.raises(RewardAPIError) as err:
            await client.rewards.create(samples=sample)
    assert err.value.status == 503 and front.calls == 3
    front = _FlakyFront(served, [503])
    async with _client_through(front, max_retries=0) as client:
        with pytest.raises(RewardAPIError):
            await client.judges.list()
    assert front.calls == 1
    front = _FlakyFront(served, [])
    async with _client_through(front) as client:
        with pytest.raises(RewardAPIError) as err:
            await client.rewards.create(samples=sample, judges=["nope"])
    assert err.value.status == 400 and front.calls == 1
    with pytest.raises(ValueError, match="max_retries"):
        AsyncRewardClient("http://x", max_retries=-1)


def test_sync_client_both_modes(served, fake_backend):
    with RewardClient(served, api_key="k") as client:
        resp = client.rewards.create(samples=[{"prompt": "p", "image": png_bytes(2)}])
        assert resp.results[0].valid
    with RewardClient(config=validate_config(small_config(fake_backend.base_url))) as client:
        resp2 = client.rewards.create(samples=[{"prompt": "p", "image": png_bytes(2)}])
    assert resp2.results[0].scores["quality"].reward == pytest.approx(resp.results[0].scores["quality"].reward)


def test_cli_schema_and_prompts(capsys):
    assert cli_main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert "JudgeScore" in schema["$defs"] and schema["properties"]["schema_version"]
    assert cli_main(["prompts", "list"]) == 0
    out = capsys.readouterr().out
    assert "cosmos_reason1@1" in out and "rational_rewards_edit@1" in out
    assert cli_main(["prompts", "show", "cosmos_reason1@1"]) == 0
    out = capsys.readouterr().out
    assert "Does the video contain any anomalies or artifacts?" in out and "sha256:" in out
    assert cli_main(["prompts", "render", "vqa_alignment@1", "--prompt", "a red fox"]) == 0
    assert 'Does this figure show "a red fox"?' in capsys.readouterr().out
    assert cli_main(["prompts", "show", "cosmos_reason1"]) == 2  # unpinned
    assert cli_main(["prompts", "verify"]) == 0


def test_cli_score_jsonl(tmp_path, fake_backend):
    cfg = write_config(tmp_path, small_config(fake_backend.base_url))
    lines = []
    for i in range(5):
        (tmp_path / f"{i}.png").write_bytes(png_bytes(i))
        lines.append(json.dumps({"prompt": f"sample {i}", "image": f"{i}.png", "group_id": "g"}))
    (tmp_path / "in.jsonl").write_text("\n".join(lines))
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "judge_gateway.cli", "score", str(tmp_path / "in.jsonl"),
                           "-o", str(out), "--config", str(cfg), "--judges", "quality,final", "--batch-size", "2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in rows) == [0, 1, 2, 3, 4]
    assert all(r["scores"]["final"]["reward"] == pytest.approx(0.75) for r in rows)
    assert "5 samples" in proc.stderr and "quality" in proc.stderr  # the summary table


def test_cli_score_reports_bad_input_lines(tmp_path):
    (tmp_path / "in.jsonl").write_text('{"prompt": "x", "image": "missing.png"}\n')
    assert cli_main(["score", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "o.jsonl")]) == 2
