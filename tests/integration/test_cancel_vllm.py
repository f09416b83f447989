"""A client that disconnects stops the generation in the real vLLM server, not only in the
gateway: the gateway closes its backend request and vLLM's OpenAI server aborts it (its chat
route watches for the disconnect). RationalRewards@2 sends no stop sequence, so an abandoned
critique would otherwise run to max_tokens.

vLLM's OpenAI server is slow to notice the hang-up when the machine is busy: while its engine
streams tokens, the server's event loop stalls for seconds (a GET /metrics here took 3-4.5 s
during a 3500-token reply, ~700 tokens a second). A CI run hung up at 196 tokens of a request with
room for 3500 and saw all 3500 generated. So the abandoned request has 30000 tokens of room, in
the session server's 32768-token context: a stall of seconds is a small part of it.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import time

import httpx
import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.conftest import png_bytes
from tests.support.live_server import LiveServer

pytestmark = pytest.mark.integration

MAX_TOKENS = 400  # the control, run to its end
# The abandoned request: a short prompt (unified_reward@1) and a minute of generation on this CPU.
ABANDONED_MAX_TOKENS = 30000


def vllm_metric(base_url: str, name: str) -> float:
    """Sum of a Prometheus series of the vLLM server over its labels."""
    # A busy server answers /metrics seconds late (5 s seen here).
    text = httpx.get(base_url.removesuffix("/v1") + "/metrics", timeout=60).text
    return sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? ([0-9.e+-]+)$", text, re.M))


def wait_for(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def settled(read, quiet_s: float = 3.0, timeout: float = 300) -> float:
    """The value once it has not changed for `quiet_s` (vLLM's counters arrive late)."""
    deadline = time.monotonic() + timeout
    value, since = read(), time.monotonic()
    while time.monotonic() - since < quiet_s:
        assert time.monotonic() < deadline, "the value kept changing"
        time.sleep(0.5)
        now = read()
        if now != value:
            value, since = now, time.monotonic()
    return value


def test_disconnect_aborts_the_generation_in_vllm(vllm):
    config = {
        "backends": {"rr": {"model": "RationalRewards-8B-T2I", "base_urls": [vllm.base_url], "timeout_s": 600,
                            "max_retries": 0},
                     "ur": {"model": "CodeGoat24/UnifiedReward-qwen-7b", "base_urls": [vllm.base_url],
                            "timeout_s": 600, "max_retries": 0}},
        "judges": {"rr": {"kind": "rubric", "backend": "rr", "template": "rational_rewards_t2i@2",
                          "options": {"max_tokens": MAX_TOKENS}},
                   "long": {"kind": "final_score", "backend": "ur", "template": "unified_reward@1",
                            "options": {"max_tokens": ABANDONED_MAX_TOKENS}}},
    }
    body = {"samples": [{"prompt": "a red car", "image": base64.b64encode(png_bytes(3)).decode()}],
            "judges": ["rr"]}
    tokens = "vllm:generation_tokens_total"
    running = "vllm:num_requests_running"
    gateway = Gateway(validate_config(config))
    with LiveServer(create_app(gateway)) as live:
        # Control: left alone, the tiny model's critique runs to max_tokens (no stop sequence).
        before = vllm_metric(vllm.base_url, tokens)
        started = time.monotonic()
        full = httpx.post(f"{live.url}/v1/rewards", json=body, timeout=600).json()["results"][0]["scores"]["rr"]
        full_s = time.monotonic() - started
        assert full["details"]["finish_reason"] == "length", full
        assert vllm_metric(vllm.base_url, tokens) - before == MAX_TOKENS

        # A long request, from a client that hangs up once vLLM is generating it (events, not a
        # share of the control's time: the machine's load varies between runs).
        pool = gateway.judges["long"].pool
        before = vllm_metric(vllm.base_url, tokens)
        payload = json.dumps({**body, "judges": ["long"]}).encode()
        host, port = live.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"POST /v1/rewards HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(payload) + payload)
            wait_for(lambda: vllm_metric(vllm.base_url, tokens) - before >= 10, timeout=300)
        gone_at = vllm_metric(vllm.base_url, tokens) - before
        wait_for(lambda: pool.stats()[0]["outstanding"] == 0, timeout=120)  # the gateway closed its call
        generated = settled(lambda: vllm_metric(vllm.base_url, tokens) - before)
        assert vllm_metric(vllm.base_url, running) == 0
        print(f"control: {MAX_TOKENS} tokens in {full_s:.1f} s; client gone after {gone_at:.0f} tokens: "
              f"vLLM generated {generated:.0f} of its {ABANDONED_MAX_TOKENS}")
        # Stopped, far short of max_tokens (most of what ran is the server's stall, not the abort).
        assert generated < ABANDONED_MAX_TOKENS / 2, (generated, gone_at, full_s)
        assert httpx.get(f"{live.url}/metrics", timeout=10).text.count(
            'judge_gateway_cancelled_requests_total{api="native"} 1.0') == 1
