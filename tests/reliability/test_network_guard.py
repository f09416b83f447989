"""The network guards, over a real socket as `judge-gateway serve` runs them (uvicorn with
`uvicorn_options`): proxy headers from a peer that is no trusted proxy do not pass
server.allow_networks, and with no API keys a web page in the user's browser reaches nothing (a
foreign Host, a cross-site POST, a non-JSON body on a JSON route) while the trainers' stock
clients, sending what they send, are served."""

from __future__ import annotations

import base64
import json
import sys

import httpx
import pytest
import requests

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from judge_gateway.server.guards import uvicorn_options
from tests.conftest import png_bytes
from tests.support.cosmos_client import enqueue_body, image_batch
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.live_server import LiveServer
from tests.support.reliability import figures

ALLOWED = "10.0.0.0/8"  # the trainers' network; the test's own peer (127.0.0.1) is outside it


@pytest.fixture(scope="module")
def backend():
    server = FakeOpenAIServer().start()
    yield server
    server.stop()


def served(config: dict) -> tuple[LiveServer, object]:
    cfg = validate_config(config)
    app = create_app(Gateway(cfg))
    return LiveServer(app, **uvicorn_options(cfg.server)), app


def scoring_config(backend_url: str, **server: object) -> dict:
    return {
        "server": server,
        "backends": {"yes": {"model": "fake-yes", "base_urls": [backend_url]}},
        "judges": {"quality": {"kind": "yes_no", "backend": "yes", "template": "image_quality@1"}},
        "flow_factory": {"profiles": {"t2i": {"judges": {"quality": 1.0}}}},
        "cosmos_rl": {"rewards": {"quality": {"judge": "quality", "keys": {"quality": "reward"}}}},
    }


def native_body() -> dict:
    return {"samples": [{"prompt": "a red square", "image": base64.b64encode(png_bytes(1)).decode()}]}


# ---- proxy headers and server.allow_networks -------------------------------------------------------


def test_proxy_headers_from_an_untrusted_peer_do_not_pass_allow_networks(backend):
    """From 127.0.0.1 (not in allow_networks, and no trusted proxy), naming an allowed address in
    X-Forwarded-For, Forwarded or X-Real-IP: 403 each (uvicorn's defaults trusted X-Forwarded-For
    from 127.0.0.1, and the request was scored). With server.trusted_proxies naming 127.0.0.1,
    its X-Forwarded-For is the client's address: an allowed one is served, another refused."""
    live, _ = served(scoring_config(backend.base_url, allow_networks=[ALLOWED]))
    spoofs = {"X-Forwarded-For": {"X-Forwarded-For": "10.1.2.3"},
              "Forwarded": {"Forwarded": "for=10.1.2.3;proto=http"},
              "X-Real-IP": {"X-Real-IP": "10.1.2.3"}}
    with live:
        codes = {name: httpx.post(f"{live.url}/v1/rewards", json=native_body(), headers=headers, timeout=30).status_code
                 for name, headers in spoofs.items()}
        plain = httpx.post(f"{live.url}/v1/rewards", json=native_body(), timeout=30).status_code
    live, _ = served(scoring_config(backend.base_url, allow_networks=[ALLOWED], trusted_proxies=["127.0.0.1"]))
    with live:
        via_proxy = httpx.post(f"{live.url}/v1/rewards", json=native_body(), timeout=30,
                               headers={"X-Forwarded-For": "10.1.2.3"}).status_code
        outside = httpx.post(f"{live.url}/v1/rewards", json=native_body(), timeout=30,
                             headers={"X-Forwarded-For": "192.0.2.9"}).status_code
    figures("proxy headers from an untrusted peer", **{k.replace("-", "_"): v for k, v in codes.items()},
            without_header=plain, trusted_proxy_allowed=via_proxy, trusted_proxy_outside=outside)
    assert codes == {"X-Forwarded-For": 403, "Forwarded": 403, "X-Real-IP": 403} and plain == 403
    assert (via_proxy, outside) == (200, 403)


# ---- what a web page may not do without API keys ---------------------------------------------------


def latents_config(backend_url: str) -> dict:
    """A gateway with a latent decoder configured (never started here): latent_attr has
    load_mean_std to set, as cosmos-rl's reward service has."""
    config = scoring_config(backend_url)
    config["cosmos_rl"]["latents"] = {"python": sys.executable, "wan2_1": {
        "checkpoint": "never-loaded", "images_mean_std": "images.pt", "video_mean_std": "video.pt"}}
    return config


def test_a_web_page_reaches_nothing_and_the_stock_clients_everything(backend):
    """No API keys, on loopback. A page's requests, as a browser sends them: text/plain and form
    POSTs with a foreign Origin (and Sec-Fetch-Site), a text/plain POST with no Origin (an older
    browser), any request with a foreign Host (DNS rebinding): refused, nothing scored or
    changed. The stock clients' requests (Flow-Factory's RemoteRewardClient and cosmos-rl's
    RemoteRewardCalculator, through `requests` with their headers) are served."""
    live, app = served(latents_config(backend.base_url))
    page = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
    text = json.dumps(native_body())
    with live:
        base = live.url
        worker = app.state.cosmos_rl.payloads.worker
        attack = {
            "text/plain POST /v1/rewards": requests.post(f"{base}/v1/rewards", data=text, timeout=30, headers={
                **page, "Content-Type": "text/plain"}),
            "text/plain POST, no Origin": requests.post(f"{base}/v1/rewards", data=text, timeout=30, headers={
                "Content-Type": "text/plain"}),
            "form POST latent_attr": requests.post(f"{base}/api/reward/latent_attr", timeout=30, headers=page,
                                                   data={"fields": json.dumps({"load_mean_std": True})}),
            "POST enqueue from a page": requests.post(f"{base}/api/reward/enqueue", timeout=30, headers={
                "Origin": "null", "Content-Type": "text/plain"},
                data=enqueue_body({"reward_fn": {"quality": 1.0}, "prompts": ["a"], "media_type": "image"},
                                  image_batch(1))),
            "foreign Host GET /v1/judges": requests.get(f"{base}/v1/judges", timeout=30, headers={
                "Host": "rebound.evil.example"}),
            "foreign Host POST /v1/rewards": requests.post(f"{base}/v1/rewards", json=native_body(), timeout=30,
                                                           headers={"Host": "rebound.evil.example"}),
        }
        load_mean_std_after = worker.load_mean_std
        localhost = base.replace("127.0.0.1", "localhost")
        stock = stock_clients(localhost) | stock_clients(base)
    codes = {k: r.status_code for k, r in attack.items()}
    figures("a web page without API keys", **{k.replace(" ", "_"): v for k, v in codes.items()},
            load_mean_std_after=load_mean_std_after, stock_clients=sorted(set(stock.values())))
    assert codes == {"text/plain POST /v1/rewards": 403, "text/plain POST, no Origin": 415,
                     "form POST latent_attr": 403, "POST enqueue from a page": 403,
                     "foreign Host GET /v1/judges": 403, "foreign Host POST /v1/rewards": 403}, codes
    assert attack["foreign Host GET /v1/judges"].json()["error"]["type"] == "host_not_allowed"
    assert load_mean_std_after is False
    assert set(stock.values()) == {200}, stock


def stock_clients(base: str) -> dict[str, int]:
    """The stock clients' calls, with the headers they send (`requests` adds Host, User-Agent,
    Accept, Accept-Encoding, Connection):
    - Flow-Factory's RemoteRewardClient (X-GenGroup/Flow-Factory src/flow_factory/rewards/
      my_reward_remote.py, a0b2bc5): a requests.Session, GET {url}/health, POST {url}/compute json=;
    - cosmos-rl's RemoteRewardCalculator (nvidia-cosmos/cosmos-rl cosmos_rl/reward/remote_calculator.py,
      89f2e5b): enqueue `<JSON>\\n<npy>` as application/octet-stream with `Authorization: Bearer
      <token>` (None when unset), pulls as a form with the same Authorization header;
      latent_attr as a form."""
    out = {}
    session = requests.Session()
    ff = f"{base}/flow-factory/t2i"
    out[f"{base} flow-factory health"] = session.get(f"{ff}/health", timeout=5.0).status_code
    image = base64.b64encode(png_bytes(2)).decode()
    r = session.post(f"{ff}/compute", json={"prompt": ["a cat"], "image": [image], "video": None,
                                            "condition_images": None, "condition_videos": None}, timeout=60)
    assert "rewards" in r.json(), r.text
    out[f"{base} flow-factory compute"] = r.status_code
    auth = {"Authorization": "Bearer None"}
    payload = enqueue_body({"reward_fn": {"quality": 1.0}, "prompts": ["a cat"], "media_type": "image"},
                           image_batch(1))
    r = requests.post(f"{base}/api/reward/enqueue", data=payload, timeout=(100, 60),
                      headers={"Content-Type": "application/octet-stream", **auth})
    out[f"{base} cosmos-rl enqueue"] = r.status_code
    uid = r.json()["uuid"]
    for _ in range(300):
        r = requests.post(f"{base}/api/reward/pull", data={"uuid": uid, "type": "quality"}, headers=auth,
                          timeout=10.0)
        if r.status_code == 200:
            break
    out[f"{base} cosmos-rl pull"] = r.status_code
    out[f"{base} cosmos-rl latent_attr"] = requests.post(f"{base}/api/reward/latent_attr", headers=auth, data={
        "fields": json.dumps({"load_mean_std": False})}, timeout=10.0).status_code
    return out
