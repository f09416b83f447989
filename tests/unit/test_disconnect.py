"""A client that hangs up (Flow-Factory's 60 s timeout, then a retry) takes its scoring with it:
the gateway cancels the request's judge calls - the backend sees its HTTP requests closed, a
head's queued items are never run - and counts it in /metrics. Real HTTP on both sides."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import os
import re
import stat
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.conftest import png_bytes
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.live_server import LiveServer

STALL_S = 30.0  # the backend answers after this; every test ends long before


@pytest.fixture
def stalling_backend():
    server = FakeOpenAIServer(stall_s=STALL_S).start()
    yield server
    server.stop()


@pytest.fixture
def slow_head_python(tmp_path: Path) -> tuple[Path, Path]:
    """An 'interpreter' for the head that runs tests/support/slow_head_worker.py (whatever the
    arguments the supervisor passes), and the file it logs the prompts it runs to."""
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tests.support.slow_head_worker\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return wrapper, tmp_path / "ran.txt"


def gateway_config(backend_url: str, head_python: Path | None = None, head_log: Path | None = None) -> dict:
    judges: dict = {"slow_judge": {"kind": "yes_no", "backend": "slow", "template": "image_quality@1",
                                   "deadline_s": 120}}
    if head_python is not None:
        judges["slow_head"] = {"kind": "clip", "default": False, "options": {
            "python": str(head_python), "max_batch_size": 1, "max_wait_ms": 0,
            "env": {"SLOW_HEAD_LOG": str(head_log), "SLOW_HEAD_S": "3"}}}
    return {
        "backends": {"slow": {"model": "fake-stall", "base_urls": [backend_url], "timeout_s": 120,
                              "max_retries": 0}},
        "judges": judges,
        "flow_factory": {"profiles": {"slow": {"judges": {"slow_judge": 1.0}}}},
    }


def b64png(seed: int) -> str:
    return base64.b64encode(png_bytes(seed)).decode()


def metric(url: str, name: str, **labels: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10, headers={"Authorization": "Bearer k1"}).text
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    match = re.search(rf"^{name}\{{{re.escape(want)}\}} ([0-9.e+-]+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> float:
    """Seconds until `condition()` held; fails after `timeout`."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, "condition not met in time"
        time.sleep(0.05)
    return time.monotonic() - started


def hang_up(method: str, url: str, after_s: float, **kwargs) -> None:
    """A real HTTP client that gives up after `after_s` and closes its connection."""
    with pytest.raises(httpx.ReadTimeout):
        httpx.request(method, url, timeout=httpx.Timeout(after_s, connect=5.0), **kwargs)


def no_errors_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("api_keys", [None, ["k1"]], ids=["open", "with-api-keys"])
def test_native_disconnect_cancels_the_backend_calls(stalling_backend, caplog, api_keys):
    caplog.set_level(logging.WARNING)
    app = create_app(Gateway(validate_config(gateway_config(stalling_backend.base_url))), api_keys=api_keys)
    counters = stalling_backend.counters
    auth = {"Authorization": "Bearer k1"} if api_keys else {}
    with LiveServer(app) as live:
        body = {"samples": [{"prompt": f"p{i}", "image": b64png(i)} for i in range(3)], "judges": ["slow_judge"]}
        hang_up("POST", f"{live.url}/v1/rewards", 1.0, json=body, headers=auth)
        # The backend sees all three calls closed at once, not answered 30 s later.
        took = wait_for(lambda: counters["stall_disconnected"] == 3 and counters["inflight"] == 0)
        assert took < 5.0
        assert metric(live.url, "judge_gateway_cancelled_requests_total", api="native") == 1.0
        assert metric(live.url, "judge_gateway_cancelled_scores_total", judge="slow_judge") == 3.0
        assert metric(live.url, "judge_gateway_requests_total", api="native", status="cancelled") == 1.0
        time.sleep(1.0)  # no retry, no new call
        assert counters["requests"] == 3 and counters["stall_answered"] == 0
    assert no_errors_logged(caplog) == []


def test_flow_factory_disconnect_cancels_the_backend_calls(stalling_backend, caplog):
    caplog.set_level(logging.WARNING)
    app = create_app(Gateway(validate_config(gateway_config(stalling_backend.base_url))))
    counters = stalling_backend.counters
    with LiveServer(app) as live:
        payload = {"prompt": ["a", "b"], "image": [b64png(1), b64png(2)], "video": None,
                   "condition_images": None, "condition_videos": None}
        hang_up("POST", f"{live.url}/flow-factory/slow/compute", 1.0, json=payload)
        wait_for(lambda: counters["stall_disconnected"] == 2 and counters["inflight"] == 0, timeout=5.0)
        assert metric(live.url, "judge_gateway_cancelled_requests_total", api="flow_factory") == 1.0
        assert metric(live.url, "judge_gateway_cancelled_scores_total", judge="slow_judge") == 2.0
        assert counters["stall_answered"] == 0
    assert no_errors_logged(caplog) == []


def enqueue_body(meta: dict, arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return json.dumps(meta).encode() + b"\n" + buf.getvalue()


def test_cosmos_enqueue_is_cancelled_while_preparing_but_runs_once_it_has_a_uuid(stalling_backend):
    gateway = Gateway(validate_config(gateway_config(stalling_backend.base_url)))
    app = create_app(gateway)
    service = app.state.cosmos_rl
    prepare = service.prepare
    prepared: list[bool] = []

    async def slow_prepare(body: bytes):
        await asyncio.sleep(float(os.environ.get("TEST_PREPARE_S", "2")))
        result = await prepare(body)
        prepared.append(True)
        return result

    images = np.random.default_rng(0).integers(0, 256, size=(2, 32, 32, 3), dtype=np.uint8)
    body = enqueue_body({"reward_fn": {"slow_judge": 1.0}, "prompts": ["a", "b"], "media_type": "image"}, images)
    headers = {"Content-Type": "application/octet-stream"}
    counters = stalling_backend.counters
    with LiveServer(app) as live:
        service.prepare = slow_prepare
        hang_up("POST", f"{live.url}/api/reward/enqueue", 0.5, content=body, headers=headers)
        wait_for(lambda: metric(live.url, "judge_gateway_cancelled_requests_total", api="cosmos_rl") == 1.0)
        time.sleep(2.5)  # past the preparation: it was cancelled, so nothing was accepted or scored
        assert prepared == [] and service.jobs.tasks == {} and counters["requests"] == 0

        service.prepare = prepare
        r = httpx.post(f"{live.url}/api/reward/enqueue", content=body, headers=headers, timeout=10)
        uid = r.json()["uuid"]
        # The client has its uuid and is gone; the accepted request keeps scoring.
        wait_for(lambda: counters["inflight"] == 2)
        assert uid in service.jobs.tasks and not service.jobs.tasks[uid].done()
        assert metric(live.url, "judge_gateway_cancelled_requests_total", api="cosmos_rl") == 1.0


def test_head_items_of_a_cancelled_request_are_not_run(stalling_backend, slow_head_python, caplog):
    caplog.set_level(logging.WARNING)
    python, ran = slow_head_python
    app = create_app(Gateway(validate_config(gateway_config(stalling_backend.base_url, python, ran))))
    with LiveServer(app) as live:
        # Start the worker first, so the request's items reach it.
        wait_for(lambda: any(j["name"] == "slow_head" and j["ready"]
                             for j in httpx.get(f"{live.url}/v1/judges", timeout=10).json()["judges"]),
                 timeout=60)
        body = {"samples": [{"prompt": f"p{i}", "image": b64png(i)} for i in range(4)], "judges": ["slow_head"]}
        # The first item to arrive runs for 3 s (one item per batch); the other three wait in the
        # worker's queue when the client leaves.
        hang_up("POST", f"{live.url}/v1/rewards", 1.5, json=body)
        wait_for(lambda: metric(live.url, "judge_gateway_cancelled_scores_total", judge="slow_head") == 4.0)
        time.sleep(4.0)  # the first is done by now; a queued item that was not dropped would be running
        first = ran.read_text().split()
        assert len(first) == 1 and first[0] in {"p0", "p1", "p2", "p3"}
        assert metric(live.url, "judge_gateway_cancelled_requests_total", api="native") == 1.0
        # The worker still serves: a later request scores.
        r = httpx.post(f"{live.url}/v1/rewards", timeout=30,
                       json={"samples": [{"prompt": "later", "image": b64png(9)}], "judges": ["slow_head"]})
        assert r.status_code == 200 and r.json()["results"][0]["scores"]["slow_head"]["raw"] == 0.5
    assert ran.read_text().split() == [*first, "later"]
    assert no_errors_logged(caplog) == []


def gauge(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    match = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


@pytest.mark.parametrize("api", ["native", "flow_factory"])
def test_a_client_that_leaves_while_waiting_for_a_slot_gives_its_place_back(stalling_backend, api):
    data = gateway_config(stalling_backend.base_url)
    data["server"] = {"admission": {"max_active": 1, "max_waiting": 1, "max_wait_s": 60}}
    app = create_app(Gateway(validate_config(data)))
    if api == "native":
        path, body = "/v1/rewards", {"samples": [{"prompt": "p", "image": b64png(1)}], "judges": ["slow_judge"]}
    else:
        path, body = "/flow-factory/slow/compute", {"prompt": ["a"], "image": [b64png(1)], "video": None,
                                                    "condition_images": None, "condition_videos": None}
    with LiveServer(app) as live:
        holder = threading.Thread(target=hang_up, args=("POST", live.url + path, 14.0), kwargs={"json": body})
        holder.start()  # holds the one slot (the backend answers after 30 s)
        try:
            wait_for(lambda: gauge(live.url, "judge_gateway_admission_active") == 1.0)
            hang_up("POST", live.url + path, 1.0, json=body)  # waits for the slot, then leaves
            # its waiting place is free while the holder still scores (old: only once the holder ended)
            wait_for(lambda: gauge(live.url, "judge_gateway_admission_waiting") == 0.0, timeout=8.0)
            assert gauge(live.url, "judge_gateway_admission_active") == 1.0
            assert metric(live.url, "judge_gateway_cancelled_requests_total", api=api) == 1.0
        finally:
            holder.join()


class FakeRequest:
    """The part of a Starlette request the watcher uses: `receive()` after the body was read."""

    def __init__(self) -> None:
        self.gone = asyncio.Event()

    async def receive(self) -> dict:
        await self.gone.wait()
        return {"type": "http.disconnect"}


async def test_unless_disconnected_returns_raises_or_cancels():
    from judge_gateway.server.disconnect import ClientDisconnected, unless_disconnected

    async def answer(value: int, delay: float = 0.0) -> int:
        await asyncio.sleep(delay)
        return value

    async def fail() -> int:
        raise ValueError("bad judge name")

    assert await unless_disconnected(FakeRequest(), answer(7)) == 7
    with pytest.raises(ValueError, match="bad judge name"):
        await unless_disconnected(FakeRequest(), fail())

    request, cancelled = FakeRequest(), asyncio.Event()

    async def slow() -> int:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return 1

    asyncio.get_running_loop().call_later(0.1, request.gone.set)
    started = time.monotonic()
    with pytest.raises(ClientDisconnected):
        await unless_disconnected(request, slow())
    assert cancelled.is_set() and time.monotonic() - started < 5
