"""The [server] section: the bind, API keys, body and header limits, slow-client deadlines, the
network guards (allow_networks, trusted_proxies, allowed_hosts) and [server.admission]."""

from __future__ import annotations

import ipaddress
import re

from pydantic import Field, field_validator

from ..env_vars import getenv
from .base import Strict


class AdmissionConfig(Strict):
    """Admission control of the synchronous APIs (native /v1/rewards and Flow-Factory /compute):
    at most `max_active` requests score at once; up to `max_waiting` more wait for a slot, each at
    most `max_wait_s`; the rest are refused at once, with Retry-After: 429 on the native API, 503 on
    Flow-Factory (the status of its protocol for a transient fault). cosmos-rl has its own bound (max_pending).
    Unset bounds are derived from what the configured judges can work on at once (/readyz says)."""

    max_active: int | None = Field(
        None, gt=0, description="Synchronous requests scored at once (native + Flow-Factory). Default: the "
        "judges' capacity, i.e. each used backend's replicas x max_concurrency plus each head's max_batch_size "
        "(at most 256)."
    )
    max_waiting: int | None = Field(
        None, ge=0, description="Requests that may wait for a slot; beyond: refused at once. Default: max_active "
        "(at most 512)."
    )
    max_wait_s: float = Field(10.0, gt=0, description="Longest wait for a slot (or for room in the decoded-media "
                              "budget); then refused.")
    retry_after_s: int = Field(2, ge=1, description="The Retry-After (seconds) sent with a refusal.")
    waiting_per_slot: float = Field(
        1.0, ge=0, description="Each VLM backend takes an admitted request's calls into its slots (replicas x "
        "max_concurrency) and lets calls of this many times its slots wait for them (first come, first served, "
        "at most max_wait_s); a request that finds no room is refused at once with Retry-After. 0: none wait.")

    def bounds(self, capacity: int) -> tuple[int, int]:
        """(max_active, max_waiting): as set, else derived from the judges' capacity."""
        active = self.max_active if self.max_active is not None else max(1, min(capacity, DEFAULT_MAX_ACTIVE))
        waiting = self.max_waiting if self.max_waiting is not None else min(active, DEFAULT_MAX_WAITING)
        return active, waiting


DEFAULT_MAX_ACTIVE = 256  # ceilings of the derived bounds
DEFAULT_MAX_WAITING = 512


class ServerConfig(Strict):
    host: str = Field("127.0.0.1", description="Bind address; loopback unless you mean to expose it.")
    port: int = Field(8080, ge=0, le=65535, description="TCP port (0: any free port).")
    api_keys: list[str] = Field(default_factory=list, description="Accepted Bearer tokens.")
    api_keys_env: str | None = Field(
        "JG_API_KEYS",
        description="Environment variable holding more accepted tokens, comma-separated (a JG_ name "
        "also reads its deprecated JUDGE_GATEWAY_ spelling, with a warning, when unset).",
    )
    max_body_bytes: int = Field(256 * 1024 * 1024, gt=0, description="Largest accepted request body.")
    max_samples_per_request: int = Field(
        4096, gt=0, description="Most samples (Flow-Factory: prompts) in one request; more is refused (native API: 413)."
    )
    readiness_interval_s: float = Field(
        5.0, gt=0, description="How long a backend readiness probe result is reused."
    )
    allow_unauthenticated_public: bool = Field(
        False,
        description="Permit a non-loopback host without API keys (refused by default).",
    )
    allow_networks: list[str] = Field(
        default_factory=list,
        description="CIDR networks (e.g. 10.0.0.0/8, 192.168.1.7/32, fd00::/8) whose peers may connect; every "
        "other peer address gets 403. Checked on the TCP peer of every request (X-Forwarded-For is not "
        "trusted). Satisfies the guard on a non-loopback host as API keys do: for trainers whose client "
        "sends no key (Flow-Factory's). Empty: every peer.",
    )
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Addresses or CIDR networks of the reverse proxies in front of the gateway: only a request "
        "whose TCP peer is one of them has its X-Forwarded-For (and X-Forwarded-Proto) read for the client's "
        "address (allow_networks then checks that address). Empty (the default): no proxy header is trusted "
        "from anyone (Forwarded and X-Real-IP never are). Applied by the HTTP server `serve` runs "
        "(uvicorn's forwarded_allow_ips).",
    )
    allowed_hosts: list[str] | None = Field(
        None,
        description="Without API keys: the Host header values the gateway answers (names, compared without the "
        "port; `*` answers any). Any other Host gets 403, so a web page whose DNS name is rebound to this "
        "machine reaches nothing. Unset: localhost, this machine's host name and fully qualified name, and any "
        "IP address (a browser sends an IP as Host only to a page served from that IP, never after a rebinding). "
        "With API keys the check is off: a web page cannot send the key.",
    )
    # Slow or oversized clients (docs/guides/limits.md): enforced by the HTTP protocol the CLI runs.
    header_timeout_s: float = Field(
        10.0, gt=0, description="A request's headers must arrive within this time of its first byte "
        "(or of the connection opening); else 408 and the connection is closed."
    )
    body_timeout_s: float = Field(
        60.0, gt=0, description="A request's body must arrive within this time of its headers; else "
        "408 and the connection is closed."
    )
    keep_alive_s: float = Field(30.0, gt=0, description="An idle keep-alive connection is closed after this.")
    max_header_bytes: int = Field(
        16384, ge=1024, description="Largest request line + headers (bytes); larger is refused with 431 (400 when h11's own buffer bound trips first, on headers still arriving)."
    )
    max_headers: int = Field(100, gt=0, description="Most request headers; more is refused with 431.")
    admission: AdmissionConfig = Field(
        default_factory=AdmissionConfig, description="Bounds on the synchronous requests scoring at once."
    )

    @field_validator("allow_networks")
    @classmethod
    def _networks(cls, networks: list[str]) -> list[str]:
        return _cidr_list(networks, "allow_networks", "a network in CIDR form (e.g. 10.0.0.0/8 or 192.168.1.7/32)")

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies(cls, proxies: list[str]) -> list[str]:
        return _cidr_list(proxies, "trusted_proxies", "an address or CIDR network (e.g. 10.0.0.7 or 10.0.0.0/24)")

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, hosts: list[str] | None) -> list[str] | None:
        if hosts is None:
            return None
        out = []
        for i, text in enumerate(hosts):
            name = text.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")
            try:
                name = str(ipaddress.ip_address(name))
            except ValueError:
                if name != "*" and not re.fullmatch(r"(\*\.)?[a-z0-9_-]+(\.[a-z0-9_-]+)*", name):
                    raise ValueError(f"allowed_hosts[{i}] = {text!r} is not a host name or address (no scheme, "
                                     "port or path; `*.example.org` for its subdomains, `*` for any)") from None
            out.append(name)
        return out

    def public_bind_ok(self, api_keys: list[str]) -> bool:
        """A non-loopback bind needs API keys, an allow-list of peer networks, or an explicit opt-out."""
        return is_loopback(self.host) or bool(api_keys) or bool(self.allow_networks) \
            or self.allow_unauthenticated_public

    @field_validator("api_keys")
    @classmethod
    def _keys(cls, keys: list[str]) -> list[str]:
        for i, key in enumerate(keys):
            check_api_key(key, f"api_keys[{i}]")
        return keys

    def resolved_api_keys(self) -> list[str]:
        keys = list(self.api_keys)
        if self.api_keys_env:
            extra = getenv(self.api_keys_env) or ""
            keys += [k.strip() for k in extra.split(",") if k.strip()]
        return keys


def _cidr_list(texts: list[str], key: str, what: str) -> list[str]:
    """Each entry as a normalised network (an address is its /32 or /128); ValueError naming the entry."""
    out = []
    for i, text in enumerate(texts):
        try:
            out.append(str(ipaddress.ip_network(text.strip(), strict=False)))
        except ValueError as err:
            raise ValueError(f"{key}[{i}] = {text!r} is not {what}: {err}") from None
    return out


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def is_loopback(host: str) -> bool:
    """A bind address only this machine reaches (serving elsewhere without API keys is refused)."""
    return host in LOOPBACK_HOSTS


def check_api_key(key: str, where: str = "API key") -> str:
    """An empty key would match a request that sends none: refuse it (and keys no header can carry)."""
    if not key.strip():
        raise ValueError(f"{where} is empty or whitespace: it would accept requests without a key")
    if key != key.strip():
        raise ValueError(f"{where} has leading/trailing whitespace, which no Authorization header keeps")
    return key
