"""What a web page may not send to a gateway without API keys (server/origin.py), as pure
functions of the request's headers, and the config keys that feed it and the proxy-header trust
(server.allowed_hosts, server.trusted_proxies). Over a real socket: tests/reliability/test_network_guard.py."""

from __future__ import annotations

import httpx
import pytest

from judge_gateway.config import ConfigError, ServerConfig, validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from judge_gateway.server.guards import uvicorn_options
from judge_gateway.server.origin import OriginPolicy, default_hosts


def policy(hosts: list[str] | None = None) -> OriginPolicy:
    return OriginPolicy(hosts, json_paths=("/v1/rewards",), json_suffix_under=("/flow-factory/", "/compute"))


def check(p: OriginPolicy, method: str, path: str, **headers: str):
    return p.check(method, path, [(k.replace("_", "-").lower().encode(), v.encode()) for k, v in headers.items()])


@pytest.mark.parametrize("host, allowed", [
    ("localhost", True), ("localhost:8080", True), ("LOCALHOST.", True), ("127.0.0.1:8080", True),
    ("[::1]:8080", True), ("10.0.0.5", True), ("[fd00::1]", True),
    ("evil.example", False), ("localhost.evil.example:8080", False), ("127.0.0.1.nip.io", False), ("t", False),
])
def test_default_hosts_are_this_machines_names_and_any_ip(host, allowed):
    refusal = check(policy(), "GET", "/healthz", host=host)
    assert (refusal is None) is allowed
    if not allowed:
        assert refusal.status == 403 and refusal.code == "host_not_allowed" and "server.allowed_hosts" in refusal.message


def test_configured_hosts_wildcards_and_any():
    p = policy(["gw.lab.example", "*.cluster.local"])
    assert check(p, "GET", "/", host="gw.lab.example:8080") is None
    assert check(p, "GET", "/", host="node-3.cluster.local") is None
    assert check(p, "GET", "/", host="localhost") is not None  # the list replaces the defaults
    assert check(p, "GET", "/", host="10.1.2.3") is None  # an IP is never a rebound name
    assert check(policy(["*"]), "GET", "/", host="anything.example") is None
    assert "localhost" in default_hosts()


@pytest.mark.parametrize("headers, status", [
    ({"origin": "http://evil.example"}, 403),
    ({"origin": "null"}, 403),
    ({"origin": "http://localhost:3000"}, 403),  # another port on this machine: another origin
    ({"sec_fetch_site": "cross-site"}, 403),
    ({"sec_fetch_site": "same-site"}, 403),
    ({"origin": "http://localhost:8080"}, None),  # the gateway's own pages (/docs)
    ({"origin": "http://localhost:8080", "sec_fetch_site": "same-origin"}, None),
    ({}, None),  # what python clients send
])
def test_state_changing_requests_from_another_site_are_refused(headers, status):
    refusal = check(policy(), "POST", "/api/reward/pull", host="localhost:8080", **headers)
    assert (refusal.status if refusal else None) == status
    if refusal:
        assert refusal.code == "cross_site_request"
    # a read is not refused for its origin
    assert check(policy(), "GET", "/v1/watch", host="localhost:8080", **headers) is None


def test_default_ports_are_the_same_origin():
    assert check(policy(), "POST", "/api/reward/pull", host="localhost", origin="http://localhost:80") is None
    assert check(policy(), "POST", "/api/reward/pull", host="localhost:443", origin="https://localhost") is None


@pytest.mark.parametrize("path, ctype, status", [
    ("/v1/rewards", "application/json", None),
    ("/v1/rewards", "application/json; charset=utf-8", None),
    ("/v1/rewards", "application/vnd.api+json", None),
    ("/v1/rewards", "text/plain", 415),
    ("/v1/rewards", "application/x-www-form-urlencoded", 415),
    ("/v1/rewards", "multipart/form-data; boundary=x", 415),
    ("/v1/rewards", None, 415),
    ("/flow-factory/t2i/compute", "text/plain;charset=UTF-8", 415),
    ("/flow-factory/t2i/compute", "application/json", None),
    ("/api/reward/enqueue", "application/octet-stream", None),  # cosmos-rl's enqueue
    ("/api/reward/pull", "application/x-www-form-urlencoded", None),  # cosmos-rl's pull: a form
])
def test_json_routes_need_a_json_content_type(path, ctype, status):
    headers = {"host": "localhost"} | ({"content_type": ctype} if ctype else {})
    refusal = check(policy(), "POST", path, **headers)
    assert (refusal.status if refusal else None) == status
    if refusal:
        assert refusal.code == "unsupported_media_type" and "application/json" in refusal.message


def test_config_keys_are_validated_and_feed_uvicorn():
    cfg = ServerConfig(trusted_proxies=["10.0.0.7", " 10.1.0.0/16 "], allowed_hosts=["GW.Example.", "[::1]", "*"])
    assert cfg.trusted_proxies == ["10.0.0.7/32", "10.1.0.0/16"]
    assert cfg.allowed_hosts == ["gw.example", "::1", "*"]
    options = uvicorn_options(cfg)
    assert options["proxy_headers"] is True and options["forwarded_allow_ips"] == ["10.0.0.7/32", "10.1.0.0/16"]
    empty = uvicorn_options(ServerConfig())  # no proxy header is trusted, from 127.0.0.1 neither
    assert empty["proxy_headers"] is False and empty["forwarded_allow_ips"] == []
    with pytest.raises(ConfigError, match=r"server\.trusted_proxies.*not an address"):
        validate_config({"server": {"trusted_proxies": ["proxy.local"]}})
    with pytest.raises(ConfigError, match=r"server\.allowed_hosts.*not a host name"):
        validate_config({"server": {"allowed_hosts": ["http://gw:8080/"]}})


async def test_with_api_keys_the_browser_checks_are_off():
    """A page cannot send the key: with keys, a request is judged by its key alone."""
    app = create_app(Gateway(validate_config({"judges": {}})), api_keys=["k"])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw.any.example") as c:
        assert (await c.get("/v1/judges", headers={"Authorization": "Bearer k"})).status_code == 200
        assert (await c.get("/v1/judges")).status_code == 401
    app = create_app(Gateway(validate_config({"judges": {}})))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw.any.example") as c:
        r = await c.get("/v1/judges")
    assert r.status_code == 403 and r.json()["error"]["type"] == "host_not_allowed" and "message" in r.json()
