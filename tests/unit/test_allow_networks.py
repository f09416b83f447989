"""server.allow_networks: trainers on other hosts whose client sends no key (Flow-Factory's stock
remote client). Every request's TCP peer is checked (a pure-ASGI middleware, outermost); a peer
outside the list gets 403 and a log line; the list satisfies the public-bind guard as API keys do.
The end-to-end test runs `judge-gateway serve` on 0.0.0.0 and connects from 127.0.0.2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from judge_gateway.config import ConfigError, ServerConfig, validate_config
from judge_gateway.server.networks import parse_networks, peer_allowed
from tests.support.fake_openai import free_port
from tests.support.health import wait_healthy

ROOT = Path(__file__).resolve().parents[2]


def test_networks_are_validated_and_normalised():
    cfg = ServerConfig(allow_networks=["10.1.2.3/8", " 192.168.1.7 ", "fd00::/8"])
    assert cfg.allow_networks == ["10.0.0.0/8", "192.168.1.7/32", "fd00::/8"]
    with pytest.raises(ConfigError, match=r"server\.allow_networks.*'10\.0\.0\.0/33' is not a network"):
        validate_config({"server": {"allow_networks": ["10.0.0.0/33"]}})


@pytest.mark.parametrize(("peer", "allowed"), [
    ("10.2.3.4", True), ("11.0.0.1", False), ("192.168.1.7", True), ("192.168.1.8", False),
    ("::ffff:10.9.9.9", True),  # an IPv4 peer on an IPv6 socket
    ("fd12::1", True), ("fe80::1%eth0", False), ("2001:db8::1", False),
    (None, False), ("", False), ("not-an-address", False),
])
def test_peer_matching(peer, allowed):
    assert peer_allowed(peer, parse_networks(["10.0.0.0/8", "192.168.1.7/32", "fd00::/8"])) is allowed


def test_allow_networks_satisfies_the_public_bind_guard():
    with pytest.raises(ConfigError, match="allow_networks"):
        validate_config({"server": {"host": "0.0.0.0", "api_keys_env": None}})
    cfg = validate_config({"server": {"host": "0.0.0.0", "api_keys_env": None, "allow_networks": ["10.0.0.0/8"]}})
    assert cfg.server.public_bind_ok([])
    assert not ServerConfig(host="0.0.0.0").public_bind_ok([])
    assert ServerConfig(host="0.0.0.0").public_bind_ok(["a-key"])


def _serve(tmp_path: Path, *extra: str, config: str) -> tuple[subprocess.Popen, int, Path]:
    port = free_port()
    (tmp_path / "gw.toml").write_text(config)
    log = tmp_path / "serve.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JG_API_KEYS": ""}
    proc = subprocess.Popen([sys.executable, "-m", "judge_gateway.cli", "serve", "--config", str(tmp_path / "gw.toml"),
                             "--port", str(port), *extra], cwd=tmp_path, env=env,
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)
    return proc, port, log


def test_serve_on_a_public_address_refuses_peers_outside_the_list(tmp_path):
    """0.0.0.0 with allow_networks = 127.0.0.1/32 and no key: served (the guard is satisfied);
    a client socket bound to 127.0.0.2 gets 403 and a log line, one on 127.0.0.1 the answer."""
    config = '[server]\nhost = "0.0.0.0"\napi_keys_env = "JG_TEST_NO_KEYS"\nallow_networks = ["127.0.0.1/32"]\n'
    proc, port, log = _serve(tmp_path, config=config)
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_healthy(url, proc, 120)
        except RuntimeError as err:
            raise AssertionError(f"{err}\n{log.read_text()}") from None
        with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=5) as other:
            for path in ("/healthz", "/flow-factory/t2i/health", "/api/reward/ping"):
                r = other.get(f"{url}{path}") if "health" in path else other.post(f"{url}{path}")
                assert r.status_code == 403, (path, r.text)
                assert "127.0.0.2 is not in server.allow_networks (127.0.0.1/32)" in r.json()["message"]
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = log.read_text()
    assert text.count("refused 127.0.0.2") == 1, text  # one line a minute per address
    assert "peer not in server.allow_networks" in text


def test_serve_refuses_a_public_bind_without_keys_or_networks(tmp_path, capsys):
    from judge_gateway.cli.main import main

    (tmp_path / "gw.toml").write_text('[server]\napi_keys_env = "JG_TEST_NO_KEYS"\n')
    assert main(["serve", "--config", str(tmp_path / "gw.toml"), "--host", "0.0.0.0"]) == 2  # before binding
    assert "server.allow_networks" in capsys.readouterr().err
