"""`browse` over a watch run folder: the watch page (alarms with evidence, curves, disagreements,
windows), a disagreement's sample page and thumbnail, and a page that follows the folder as the
gateway writes it. The folder is written by the real watch in a gateway on the fault-injection
backend: the training judge's P(yes) is the image's brightness, which the "policy" raises from
step 6 on, and the shadow (fake-yes) answers the same whatever it sees."""

from __future__ import annotations

import asyncio
import base64
import html
import io
import time

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from judge_gateway.browse.app import create_browse_app
from judge_gateway.browse.data import load_runs
from judge_gateway.browse.watch import GatewayWatch
from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.support.live_server import LiveServer


def gray_png(value: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    arr = np.clip(value + rng.integers(-20, 21, size=(24, 32, 3)), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def brightness_gateway(url: str, root) -> Gateway:
    return Gateway(validate_config({
        "backends": {"bright": {"model": "fake-p-from-image", "base_urls": [url]},
                     "yes": {"model": "fake-yes", "base_urls": [url]}},
        "judges": {"brightness": {"kind": "yes_no", "backend": "bright", "template": "image_quality@1"},
                   "steady": {"kind": "yes_no", "backend": "yes", "template": "image_quality@1", "default": False}},
        "watch": {"enabled": True, "shadows": {"brightness": ["steady"]}, "sample_rate": 1.0, "seed": 0,
                  "folder": str(root), "window_s": 3600, "thumbnails_per_window": 2},
    }))


def training_steps(steps: int = 12) -> list[dict]:
    """Request bodies, one per step: from step 6 the "policy" makes ever brighter images."""
    rng = np.random.default_rng(0)
    bodies = []
    for step in range(steps):
        level = 90 + (0 if step < 6 else 25 * (step - 5))
        samples = [{"prompt": f"step {step} sample {i}", "image": gray_png(int(level + rng.integers(-30, 31)), i)}
                   for i in range(8)]
        bodies.append({"samples": samples, "run": "bright-run", "step": step})
    return bodies


@pytest.fixture(scope="module")
async def watch_folder(fake_backend, tmp_path_factory):
    root = tmp_path_factory.mktemp("watch")
    gw = brightness_gateway(fake_backend.base_url, root)
    app = create_app(gw)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
        for body in training_steps():
            r = await client.post("/v1/rewards", json=body)
            assert r.status_code == 200, r.text
        deadline = time.monotonic() + 30
        while app.state.watch.report().queue.scored < 96:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
    await app.state.watch.aclose()
    await gw.aclose()
    return root / "bright-run"


@pytest.fixture(scope="module")
def browse(watch_folder):
    app = create_browse_app(load_runs([str(watch_folder)]), refresh_s=0)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        yield client


def test_the_index_opens_the_watch_page_with_the_alarm_and_its_evidence(browse):
    r = browse.get("/", follow_redirects=False)
    assert r.headers["location"] == "/watch/0"
    page = browse.get("/watch/0").text
    assert 'class="card alarm firing" data-kind="divergence"' in page
    assert "training judge brightness rose" in page and "shadow steady stayed flat" in page
    assert "train_auc" in page and "mean per window" in page
    assert 'id="curve-brightness"' in page and 'id="curve-steady"' in page  # the curves, as SVG
    assert 'id="alarm-divergence-' in page  # the alarm marked on them
    assert 'id="invalid-brightness"' in page
    assert "setTimeout" not in page  # refresh 0: no reload


def test_disagreements_link_their_sample_page_and_thumbnail(browse):
    page = browse.get("/watch/0").text
    rows = page.split('<table id="disagreements">')[1].split("</table>")[0]
    assert "/watch/0/sample/" in rows and 'class="thumb"' in rows
    index = int(rows.split('data-index="')[1].split('"')[0])
    sample = browse.get(f"/watch/0/sample/{index}")
    assert sample.status_code == 200
    assert "brightness" in sample.text and "steady" in sample.text and f"/watch/0/thumb/{index}" in sample.text
    thumb = browse.get(f"/watch/0/thumb/{index}")
    assert thumb.status_code == 200 and thumb.content[:2] == b"\xff\xd8"  # a JPEG
    assert browse.get("/watch/0/sample/99999").status_code == 404
    assert browse.get("/watch/1").status_code == 404
    assert browse.get("/watch/0?refresh=5").text.count("setTimeout") == 1


def test_the_page_follows_the_folder_and_survives_a_broken_report(browse, watch_folder):
    report = (watch_folder / "watch.json").read_text()
    try:
        (watch_folder / "watch.json").write_text("{not json")
        r = browse.get("/watch/0")
        assert r.status_code == 200 and "not a watch report" in r.text
        assert "divergence" in r.text  # the last good report is still shown
    finally:
        (watch_folder / "watch.json").write_text(report)
    assert "not a watch report" not in browse.get("/watch/0").text


def test_a_watch_folder_is_a_run_folder_for_the_grid_too(browse):
    grid = browse.get("/run/0")
    assert grid.status_code == 200 and "step 11 sample" in grid.text


def test_live_mode_follows_a_served_gateway(fake_backend, tmp_path):
    gw = brightness_gateway(fake_backend.base_url, tmp_path)
    with LiveServer(create_app(gw)) as server:
        for body in training_steps():
            assert httpx.post(f"{server.url}/v1/rewards", json=body, timeout=30).status_code == 200
        deadline = time.monotonic() + 30
        while httpx.get(f"{server.url}/v1/watch").json()["queue"]["scored"] < 96:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        source = GatewayWatch(server.url)
        with TestClient(create_browse_app([], gateway=source, refresh_s=0), base_url="http://127.0.0.1") as client:
            assert client.get("/", follow_redirects=False).headers["location"] == "/live"
            page = client.get("/live").text
            assert 'data-kind="divergence"' in page and 'id="curve-brightness"' in page
            rows = page.split('<table id="disagreements">')[1].split("</table>")[0]
            index = int(rows.split('data-index="')[1].split('"')[0])
            assert f"/live/thumb?run=bright-run&amp;index={index}" in rows
            sample = client.get("/live/sample", params={"run": "bright-run", "index": index})
            assert sample.status_code == 200 and "brightness (training)" in sample.text
            thumb = client.get("/live/thumb", params={"run": "bright-run", "index": index})
            assert thumb.status_code == 200 and thumb.content[:2] == b"\xff\xd8"
            assert client.get("/live/thumb", params={"run": "bright-run", "index": 10**6}).status_code == 404
            assert "no watched run 'nope' (runs: bright-run)" in html.unescape(client.get("/live", params={"run": "nope"}).text)
            # the gateway goes away: the page says why and keeps the last report
            server.__exit__(None, None, None)
            gone = client.get("/live").text
            assert "ConnectError" in gone and 'data-kind="divergence"' in gone
        source.close()
    assert gw  # closed by the server's lifespan
