"""Hostile input: every case is a 4xx with the reason (Flow-Factory: 200 `{error}`), nothing is
decoded before its declared size is checked, enqueue limits come before the uuid, slow clients are
cut off, and an empty API key is refused."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import socket
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import httpx
import numpy as np
import pytest

from judge_gateway import cli
from judge_gateway.config import ConfigError, validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.media import MediaLimits
from judge_gateway.server import create_app
from judge_gateway.server.cosmos_rl.tensors import (
    PayloadError,
    check_enqueue_limits,
    decoded_video_shape,
    load_npy,
)
from tests.support.fake_openai import free_port
from tests.support.heads_env import installed, latents_python
from tests.support.health import wait_healthy
from tests.support.hostile_media import png_declaring, torch_zip_with_deflated_pickle

ROOT = Path(__file__).resolve().parents[2]


def hostile_config(base_url: str, media: dict | None = None, server: dict | None = None) -> dict:
    backend = {"model": "fake-yes", "base_urls": [base_url], "timeout_s": 10, "max_retries": 0}
    data = {
        "backends": {"yes": backend},
        "judges": {
            "quality": {"kind": "yes_no", "backend": "yes", "template": "image_quality@1"},
            "cosmos_reason1": {"kind": "yes_no", "backend": "yes", "template": "cosmos_reason1@1", "default": False},
        },
        "flow_factory": {"profiles": {"t2i": {"judges": {"quality": 1.0}}}},
        "server": server or {},
    }
    if media is not None:
        data["media"] = media
    return data


@pytest.fixture
async def make_client(fake_backend):
    made = []

    async def make(media: dict | None = None, server: dict | None = None, api_keys=None):
        gw = Gateway(validate_config(hostile_config(fake_backend.base_url, media, server)))
        app = create_app(gw, api_keys=api_keys)
        # raise_app_exceptions=False: a crash must show as the 500 a client would see
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        client = httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=60)
        made.append((client, app, gw))
        return client

    yield make
    for client, app, gw in made:
        await client.aclose()
        await app.state.cosmos_rl.aclose()
        await gw.aclose()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


IMAGE = b64(png_declaring(16, 16))
JSON = {"content-type": "application/json"}

# ---- 1. malformed JSON: 4xx with the reason on every route -----------------------------------

# (a JSON value to put where the route expects one, a word of the parser's reason)
BAD_VALUES = {
    "deep": (b"[" * 500 + b"]" * 500, "recursion limit exceeded"),
    "big_int": (b"1" * 5000, "number out of range"),
    "bad_utf8": (b'"\xff\xfe"', "invalid unicode code point"),
    "lone_surrogate": (b'"\\ud800"', "hex escape"),
}


def route_body(route: str, value: bytes) -> bytes:
    if route == "native":
        return b'{"samples": [{"prompt": "x", "image": "%s", "metadata": {"k": %s}}]}' % (IMAGE.encode(), value)
    if route == "flow_factory":
        return b'{"prompt": [%s], "image": ["%s"]}' % (value, IMAGE.encode())
    if route == "enqueue":
        meta = b'{"reward_fn": {"quality": 1}, "media_type": "image", "prompts": [%s]}' % value
        return meta + b"\n" + npy(np.zeros((1, 8, 8, 3), np.uint8))
    return b'{"uuid": %s, "type": "quality"}' % value  # pull, ping


ROUTES = {"native": "/v1/rewards", "flow_factory": "/flow-factory/t2i/compute", "enqueue": "/api/reward/enqueue",
          "pull": "/api/reward/pull", "ping": "/api/reward/ping"}


@pytest.mark.parametrize("family", list(BAD_VALUES))
@pytest.mark.parametrize("route", list(ROUTES))
async def test_malformed_json_is_4xx_with_the_reason_on_every_route(make_client, route, family):
    client = await make_client()
    value, reason = BAD_VALUES[family]
    r = await client.post(ROUTES[route], content=route_body(route, value), headers=JSON)
    if route == "ping":  # a ping only logs its fields: it answers ok whatever it is sent
        assert r.status_code == 200 and r.json()["status"] == "ok", r.text
        return
    expected = {"native": 422, "flow_factory": 200, "enqueue": 400, "pull": 400}[route]
    assert r.status_code == expected, r.text
    data = r.json()
    message = {"native": lambda d: d["error"]["message"], "flow_factory": lambda d: d["error"]}.get(
        route, lambda d: d["message"])(data)
    assert reason in message and "JSON" in message, message
    assert "uuid" not in data


# Parsed, 64 MB of `[{},...]` took 1.6 GB (25x) and of `[0.5,...]` 0.7 GB: counted in the bytes first.
AMPLIFYING = {
    "objects": (b"[" + b"{}," * 1_000_000 + b"{}]", (r"it holds 100000\d '\{' and '\[' \(at most 1000000 objects and "
                                                     r"arrays per body\); split the request")),
    "numbers": (b"[" + b"0.5," * 4_000_001 + b"1]", (r"it holds 400000\d ',' \(at most 4000000 values per body\); "
                                                     r"split the request")),
}


@pytest.mark.parametrize("family", list(AMPLIFYING))
@pytest.mark.parametrize("route", ["native", "flow_factory", "enqueue", "pull"])
async def test_json_that_would_blow_up_when_parsed_is_refused_unparsed(make_client, route, family):
    client = await make_client()
    value, reason = AMPLIFYING[family]
    r = await client.post(ROUTES[route], content=route_body(route, value), headers=JSON)
    expected = {"native": 422, "flow_factory": 200, "enqueue": 400, "pull": 400}[route]
    assert r.status_code == expected, r.text[:500]
    data = r.json()
    message = {"native": lambda d: d["error"]["message"], "flow_factory": lambda d: d["error"]}.get(
        route, lambda d: d["message"])(data)
    assert re.search(reason, message), message


async def test_form_bodies_are_bounded(make_client):
    client = await make_client()
    r = await client.post("/api/reward/pull", content=b"uuid=a&" * 100 + b"type=quality",
                          headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 400 and r.json()["message"] == ("form body refused: Max number of fields exceeded "
                                                            "(at most 64)"), r.text


async def test_flow_factory_bad_prompts_are_200_errors_not_500(make_client):
    client = await make_client(server={"max_samples_per_request": 4})
    long_prompt = {"prompt": ["x" * 100_001], "image": [IMAGE]}
    r = await client.post("/flow-factory/t2i/compute", json=long_prompt)
    assert r.status_code == 200 and "at most 100000 characters" in r.json()["error"], r.text
    too_many = {"prompt": ["x"] * 5, "image": [IMAGE] * 5}
    r = await client.post("/flow-factory/t2i/compute", json=too_many)
    assert r.status_code == 200, r.text
    assert r.json()["error"] == "5 prompts exceed server.max_samples_per_request = 4; split the request"
    four = {"prompt": ["x"] * 4, "image": [IMAGE] * 4}
    r = await client.post("/flow-factory/t2i/compute", json=four)
    assert r.status_code == 200 and len(r.json()["rewards"]) == 4, r.text


async def test_native_long_prompt_is_422_naming_the_field(make_client):
    client = await make_client()
    r = await client.post("/v1/rewards", json={"samples": [{"prompt": "x" * 100_001, "image": IMAGE}]})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["errors"][0] == {"field": "samples.0.prompt",
                                              "message": "String should have at most 100000 characters"}


async def test_an_unexpected_exception_is_a_logged_json_500(make_client, caplog):
    client = await make_client()
    app = client._transport.app  # type: ignore[attr-defined]

    async def boom() -> None:
        raise RuntimeError("a bug")

    app.add_api_route("/boom", boom, methods=["POST"])
    r = await client.post("/boom")
    assert r.status_code == 500
    assert r.json() == {"error": {"type": "internal_error", "message": "RuntimeError (a bug in the gateway; logged)"}}
    assert any("unhandled error on POST /boom" in rec.getMessage() for rec in caplog.records)


# ---- 2. decode nothing before its size is checked -------------------------------------------


@pytest.mark.parametrize("case, reason", [
    ("png_8000", "PNG image is 8000x8000 = 64000000 pixels, above the limit of 16777216 (media.max_image_pixels)"),
    ("png_8000_x8", "samples.7.image: PNG image is 8000x8000"),
    ("mp4_160x1080p", ("video is 160 frames of 1920x1080 = 331776000 decoded pixels, above the limit of "
                       "268435456 (media.max_video_pixels)")),
])
def test_small_requests_declaring_huge_media_are_refused_with_bounded_memory(case, reason):
    """A few kB that declare huge media are refused before any decode: the RSS grows < 150 MB (a
    decode of each would add about +0.86, +0.86 and +1.9 GB)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "tests.support.hostile_rss", case], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["status"] == 422, result
    assert reason in result["body"], result
    assert result["rss_delta_mb"] < 150, result


async def test_request_pixel_budget_sums_compressed_media(make_client):
    media = {"max_image_pixels": 2_000_000, "max_video_pixels": 2_000_000, "max_request_pixels": 3_000_000}
    client = await make_client(media=media)
    png = b64(png_declaring(1200, 1000))  # 1.2 M pixels: two fit, three do not
    two = {"samples": [{"prompt": "x", "image": png}] * 2, "judges": ["quality"]}
    assert (await client.post("/v1/rewards", json=two)).status_code == 200
    three = {"samples": [{"prompt": "x", "image": png}] * 3, "judges": ["quality"]}
    r = await client.post("/v1/rewards", json=three)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["errors"] == [{
        "field": "samples.2.image",
        "message": "PNG image 1200x1000 would decode to 1200000 pixels; with the 2400000 already in this "
                   "request that exceeds media.max_request_pixels = 3000000"}]
    r = await client.post("/flow-factory/t2i/compute", json={"prompt": ["x"] * 3, "image": [png] * 3})
    assert r.status_code == 200 and "image[2]" in r.json()["error"] and "max_request_pixels" in r.json()["error"]
    # the budget is per request: the next one starts from zero
    assert (await client.post("/v1/rewards", json=two)).status_code == 200


def test_media_config_is_validated_at_load():
    with pytest.raises(ConfigError, match="max_request_pixels must be >= max_image_pixels"):
        validate_config({"media": {"max_image_pixels": 100, "max_video_pixels": 1000, "max_request_pixels": 500}})
    with pytest.raises(ConfigError, match="media.max_video_frames"):
        validate_config({"media": {"max_video_frames": 10_000}})


def _npy_header(shape: tuple[int, ...]) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "|u1", "fortran_order": False, "shape": shape})
    return buf.getvalue()


def test_npy_header_is_checked_before_anything_is_allocated():
    lying = _npy_header((1024, 1024, 1024)) + b"\x00" * 16  # declares 1 GiB, carries 16 bytes
    honest = npy(np.random.default_rng(0).integers(0, 255, (8, 1024, 1024), dtype=np.uint8))  # 8 MiB
    tracemalloc.start()
    try:
        with pytest.raises(PayloadError, match=r"declares shape \[1024, 1024, 1024\] of uint8 = 1073741824 bytes, "
                                               r"but 16 bytes follow it"):
            load_npy(lying)
        arr = load_npy(honest)  # a view of the body: no copy
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert arr.shape == (8, 1024, 1024) and int(arr[3, 7, 11]) == int(np.load(io.BytesIO(honest))[3, 7, 11])
    assert peak < 1 << 20, f"peak traced allocation {peak} bytes"


LATENTS_PYTHON = installed(latents_python)  # $JG_LATENTS_VENV, else .venv-latents

_TORCH_PROBE = """
import importlib.util, io, resource, sys, torch
spec = importlib.util.spec_from_file_location("latent_worker", sys.argv[1])
worker = importlib.util.module_from_spec(spec); spec.loader.exec_module(worker)
buf = io.BytesIO(); torch.save(torch.arange(12, dtype=torch.bfloat16).reshape(3, 4), buf)
reply, out = worker.load_torch(buf.getvalue())  # a real torch.save payload still loads
assert reply == {"dtype": "torch.bfloat16"}, reply
payload = open(sys.argv[2], "rb").read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    worker.load_torch(payload)
    error = None
except Exception as err:
    error = f"{type(err).__name__}: {err}"
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(repr((error, (after - before) / 1024)))
"""


@pytest.mark.skipif(LATENTS_PYTHON is None, reason="no latents venv (scripts/setup_latents.sh)")
def test_torch_zip_that_inflates_is_refused_before_torch_reads_it(tmp_path):
    payload = tmp_path / "bomb.pt"
    payload.write_bytes(torch_zip_with_deflated_pickle(256 << 20))  # ~260 KB holding a 256 MiB data.pkl
    out = subprocess.run([str(LATENTS_PYTHON), "-c", _TORCH_PROBE, str(ROOT / "judge_gateway" / "latent_worker.py"),
                          str(payload)], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    error, rss_delta_mb = eval(out.stdout.strip().splitlines()[-1])  # a repr of (str | None, float)
    assert error == ("ValueError: torch archive member 'archive/data.pkl' is compressed (method 8); "
                     "torch.save stores members uncompressed"), error
    assert rss_delta_mb < 50, rss_delta_mb


# ---- 4. every enqueue limit before the uuid ---------------------------------------------------


@pytest.mark.parametrize("meta, arr, media, reason", [
    ({"media_type": "video", "reward_fn": {"cosmos_reason1": 1}, "video_infos": [{"video_fps": 16}], "prompts": ["a"]},
     np.zeros((1, 3, 100_000, 2, 2), np.uint8), None,
     "tensor [1, 100000, 2, 2, 3]: 100000 frames per video, above media.max_video_frames = 4096"),
    ({"media_type": "image", "reward_fn": {"quality": 1}, "prompts": ["x" * 100_001]},
     np.zeros((1, 8, 8, 3), np.uint8), None, "prompts[0] has 100001 characters, above the limit of 100000"),
    ({"media_type": "image", "reward_fn": {"quality": 1}, "prompts": ["a"]}, np.zeros((1, 100, 100, 3), np.uint8),
     {"max_image_pixels": 4096, "max_video_pixels": 16384, "max_request_pixels": 32768},
     "100x100 = 10000 pixels per frame, above media.max_image_pixels = 4096"),
    ({"media_type": "video", "reward_fn": {"cosmos_reason1": 1}, "video_infos": [{"video_fps": 16}], "prompts": ["a"]},
     np.zeros((1, 3, 8, 64, 64), np.uint8), {"max_image_pixels": 4096, "max_video_pixels": 16384,
                                               "max_request_pixels": 32768},
     "8 frames of 64x64 = 32768 pixels per video, above media.max_video_pixels = 16384"),
    ({"media_type": "image", "reward_fn": {"quality": 1}, "prompts": ["a"] * 9}, np.zeros((9, 64, 64, 3), np.uint8),
     {"max_image_pixels": 4096, "max_video_pixels": 16384, "max_request_pixels": 32768},
     "9 samples of 4096 pixels = 36864, above media.max_request_pixels = 32768"),
])
async def test_enqueue_limits_are_checked_before_a_uuid(make_client, meta, arr, media, reason):
    client = await make_client(media=media)
    body = json.dumps(meta).encode() + b"\n" + npy(arr)
    r = await client.post("/api/reward/enqueue", content=body, headers={"content-type": "application/octet-stream"})
    assert r.status_code == 400, r.text
    assert "uuid" not in r.json() and reason in r.json()["message"], r.json()


# ---- 7. slow clients ---------------------------------------------------------------------------


def _read_until_closed(sock: socket.socket, deadline: float) -> tuple[bytes, bool]:
    """Everything the server sends until it closes (True) or the deadline passes (False)."""
    data = b""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            return data, True
        if not chunk:
            return data, True
        data += chunk
    return data, False


@pytest.fixture
def slow_client_server(tmp_path):
    port = free_port()
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(f"""
[server]
port = {port}
header_timeout_s = 1.0
body_timeout_s = 2.0
keep_alive_s = 5.0
max_headers = 100
""")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "judge_gateway.cli", "serve", "--config", str(cfg),
                             "--log-level", "warning"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, 60)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_slow_and_oversized_clients_are_cut_off(slow_client_server):
    port = slow_client_server

    def connect() -> socket.socket:
        return socket.create_connection(("127.0.0.1", port), timeout=5)

    started = time.monotonic()
    silent = connect()  # sends nothing at all
    partial = [connect() for _ in range(47)]  # with the silent one and 16 trickling: the 64
    for s in partial:
        s.sendall(b"POST /v1/rewards HTTP/1.1\r\nHost: localhost\r\nContent-Type: appl")
    trickling = [connect() for _ in range(16)]
    for s in trickling:
        s.sendall(b"POST /v1/rewards HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{")
    # trickle a byte every 0.25 s for 3 s: past body_timeout_s = 2 whatever the pace
    closed_trickling = set()
    while time.monotonic() - started < 3.5:
        for i, s in enumerate(trickling):
            if i not in closed_trickling:
                try:
                    s.sendall(b" ")
                except OSError:
                    closed_trickling.add(i)
        time.sleep(0.25)
    deadline = time.monotonic() + 5
    for s in [silent, *partial]:
        data, closed = _read_until_closed(s, deadline)
        assert closed, "a connection with incomplete headers is still open"
        assert data.startswith(b"HTTP/1.1 408 "), data[:200]
        assert b"server.header_timeout_s = 1s" in data
    for s in trickling:
        data, closed = _read_until_closed(s, deadline)
        assert closed, "a trickling body still holds its connection"
        assert data.startswith(b"HTTP/1.1 408 "), data[:200]
        assert b"server.body_timeout_s = 2s" in data
    assert time.monotonic() - started < 10

    big_header = connect()  # one 100 KB header: past max_header_bytes = 16384
    big_header.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n")
    data, closed = _read_until_closed(big_header, time.monotonic() + 5)
    # 431 when the block arrives whole (measured by the app), 400 when h11's buffer bound trips first
    assert closed and data[:13] in (b"HTTP/1.1 431 ", b"HTTP/1.1 400 "), data[:200]
    if data.startswith(b"HTTP/1.1 431 "):
        assert b"above server.max_header_bytes = 16384" in data

    many = connect()  # 2,000 tiny headers (10 KB, under the byte limit): past max_headers = 100
    many.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n" + b"".join(b"h%d:1\r\n" % i for i in range(2000)) + b"\r\n")
    data, closed = _read_until_closed(many, time.monotonic() + 5)
    assert closed and data.startswith(b"HTTP/1.1 431 "), data[:200]
    assert b"2001 request headers, above server.max_headers = 100" in data

    # Content-Length with Transfer-Encoding: the body's length is ambiguous (a proxy framing by one,
    # the gateway by the other, disagree on where the next request starts: smuggling). One 400, the
    # connection closed: the bytes after the body are never read as a second request. (In this test:
    # one server start serves every raw-socket case.)
    both = connect()
    both.sendall(b"POST /v1/rewards HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                 b"GET /v1/judges HTTP/1.1\r\nHost: localhost\r\n\r\n")
    data, closed = _read_until_closed(both, time.monotonic() + 5)
    assert closed and data.startswith(b"HTTP/1.1 400 "), data[:300]
    assert b"both Content-Length and Transfer-Encoding" in data
    assert data.count(b"HTTP/1.1 ") == 1, data  # the smuggled GET got no answer

    for s in [silent, *partial, *trickling, big_header, many, both]:
        s.close()
    # a well-behaved client is served, and keeps its connection between requests
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
        assert client.get("/healthz").status_code == 200
        time.sleep(1.5)  # idle past header_timeout_s: keep-alive, not a header timeout
        assert client.get("/healthz").status_code == 200


# ---- 9. empty API keys --------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["", "   "])
def test_empty_api_key_is_refused_in_config(key):
    with pytest.raises(ConfigError, match=r"server\.api_keys: Value error, api_keys\[0\] is empty or whitespace"):
        validate_config({"server": {"host": "0.0.0.0", "api_keys": [key]}})


async def test_empty_api_key_is_refused_by_create_app(fake_backend):
    gw = Gateway(validate_config(hostile_config(fake_backend.base_url)))
    try:
        with pytest.raises(ValueError, match="empty or whitespace: it would accept requests without a key"):
            create_app(gw, api_keys=[""])
    finally:
        await gw.aclose()


@pytest.mark.parametrize("key", ["", " "])
def test_empty_api_key_is_refused_on_the_command_line(monkeypatch, capsys, key):
    served = []
    monkeypatch.setattr("uvicorn.run", lambda *a, **kw: served.append(kw))
    assert cli.main(["serve", "--host", "0.0.0.0", "--api-key", key]) == 2
    assert served == []
    assert "--api-key is empty or whitespace" in capsys.readouterr().err


def test_latent_limits_use_the_wan_vae_decoded_size():
    """Latents are checked at the size they decode to, before the uuid (the decode runs later)."""
    assert decoded_video_shape((2, 16, 21, 60, 104)) == (2, 81, 480, 832)
    assert decoded_video_shape((2, 48, 21, 30, 52)) == (2, 81, 480, 832)  # Wan2.2: spatial x16, not x8
    check_enqueue_limits(2, 81, 480, 832, None, MediaLimits(), "latents")  # a Wan 480p clip: fine
    b, t, h, w = decoded_video_shape((1, 16, 2000, 8, 8))
    with pytest.raises(PayloadError, match="latents: 7997 frames per video, above media.max_video_frames = 4096"):
        check_enqueue_limits(b, t, h, w, None, MediaLimits(), "latents")
    b, t, h, w = decoded_video_shape((64, 16, 21, 90, 160))  # 64 clips of 81 x 720x1280
    with pytest.raises(PayloadError, match=r"64 samples of 74649600 pixels = 4777574400, above "
                                           r"media.max_request_pixels = 536870912"):
        check_enqueue_limits(b, t, h, w, None, MediaLimits(max_video_pixels=2**30, max_request_pixels=2**29),
                             "latents")
