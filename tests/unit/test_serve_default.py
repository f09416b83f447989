"""`judge-gateway serve` on the embedded default config starts with no judge backend up."""

from __future__ import annotations

import subprocess
import sys

import httpx

from tests.conftest import png_bytes
from tests.support.fake_openai import free_port
from tests.support.health import wait_healthy


def test_serve_default_config_without_backends():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "judge_gateway.cli", "serve", "--port", str(port),
                             "--log-level", "warning"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, 30)
        ready = httpx.get(f"{url}/readyz", timeout=30)
        assert ready.status_code == 503
        assert ready.json()["judges"]["cosmos_reason1"]["ready"] is False
        judges = {j["name"]: j for j in httpx.get(f"{url}/v1/judges", timeout=30).json()["judges"]}
        assert judges["image_quality"]["ready"] is False and "replica 1 of 1: cannot connect" in judges["image_quality"]["ready_reason"]
        assert "8005" not in judges["image_quality"]["ready_reason"]  # no backend URL in a reply
        assert judges["cosmos_reason1"]["template"]["version"] == "1"
        # a request still gets an answer: explicit backend_unavailable, no number
        import base64
        body = {"samples": [{"prompt": "a cat", "image": base64.b64encode(png_bytes(1)).decode()}]}
        r = httpx.post(f"{url}/v1/rewards", json=body, timeout=60)
        assert r.status_code == 200, r.text
        res = r.json()["results"][0]
        assert res["valid"] is False and res["reward"] is None
        assert {s["error"]["code"] for s in res["scores"].values()} == {"backend_unavailable"}
    finally:
        proc.terminate()
        proc.wait(timeout=20)
