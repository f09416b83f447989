"""What a web page in the user's browser may not do to a gateway that has no API keys.

With no keys (the default, on loopback) every request that reaches the port is served, and a
browser on this machine reaches the port: a page on any site can send it requests. It cannot read
the answers (no CORS headers are ever sent), but a request that changes something needs no answer.
`OriginPolicy.check` refuses, before any route runs:

- a `Host` header that is not one of this gateway's names (server.allowed_hosts; by default
  localhost, this machine's host name and fully qualified name, and any IP address): a page whose
  DNS name the attacker rebinds to 127.0.0.1 sends its own name as Host, so it reaches nothing,
  not even a GET (403 `host_not_allowed`);
- a state-changing request (any method but GET, HEAD, OPTIONS) that a browser marks as coming
  from another site: `Sec-Fetch-Site: cross-site` or `same-site` (another port on localhost is the
  same site), or an `Origin` other than the request's own (`null` included) (403
  `cross_site_request`);
- a body sent to a JSON route (native `POST /v1/rewards`, Flow-Factory `/compute`) without a JSON
  content type (415 `unsupported_media_type`): `text/plain`, form and multipart bodies are what a
  page can send across sites without the browser asking first (a CORS preflight), so a JSON route
  that parsed them could be driven by any page.

The trainers' stock clients send none of `Origin` / `Sec-Fetch-Site`, name the host they connect
to, and send JSON as `application/json` (Flow-Factory's `requests` `json=`, the Python client),
cosmos-rl's enqueue as `application/octet-stream` and its pulls as forms (which the route
reads as before): none of them is refused. With API keys this policy is off: a page cannot send
the key. Pure functions of the request's headers; the request guard (guards.py) calls `check`
once per request, with no extra middleware layer.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CROSS_SITE = frozenset({b"cross-site", b"same-site"})
LOCAL_NAMES = ("localhost",)
_DEFAULT_PORTS = {"http": "80", "https": "443"}
_CACHE_LIMIT = 256  # Host values whose verdict is remembered (a request's Host is one of a few)


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    message: str


@functools.lru_cache(maxsize=1)
def _machine_names() -> tuple[str, ...]:
    # once per process: getfqdn may ask a DNS server
    return tuple(name.lower().rstrip(".") for name in (socket.gethostname(), socket.getfqdn()))


def default_hosts() -> list[str]:
    """localhost, and this machine's host name and fully qualified name (what a trainer on
    another host types), lowercased."""
    names = list(LOCAL_NAMES)
    for name in _machine_names():
        if name and name not in names:
            names.append(name)
    return names


def _split_host(value: str) -> tuple[str, str]:
    """(host, port) of a Host header or an origin's netloc; the host lowercased, without brackets
    or a trailing dot; port "" when absent."""
    value = value.strip().lower()
    if value.startswith("["):  # [v6]:port
        end = value.find("]")
        if end < 0:
            return value, ""
        host, rest = value[1:end], value[end + 1:]
        return host, rest[1:] if rest.startswith(":") else ""
    host, _, port = value.partition(":") if value.count(":") == 1 else (value, "", "")
    return host.rstrip("."), port


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class OriginPolicy:
    def __init__(self, allowed_hosts: Sequence[str] | None, *, json_paths: Iterable[str] = (),
                 json_suffix_under: tuple[str, str] | None = None) -> None:
        hosts = list(allowed_hosts) if allowed_hosts is not None else default_hosts()
        self.any_host = "*" in hosts
        self.names = frozenset(h for h in hosts if not h.startswith("*."))
        self.suffixes = tuple(h[1:] for h in hosts if h.startswith("*."))  # ".example.org"
        self.described = ", ".join(hosts) + ", or an IP address"
        self.json_paths = frozenset(json_paths)
        self.json_suffix_under = json_suffix_under  # (prefix, suffix): Flow-Factory's {prefix}/NAME/compute
        self._verdicts: dict[bytes, bool] = {}

    def host_allowed(self, raw: bytes) -> bool:
        verdict = self._verdicts.get(raw)
        if verdict is None:
            host, _ = _split_host(raw.decode("latin-1"))
            verdict = (self.any_host or host in self.names or _is_ip(host)
                       or any(host.endswith(s) for s in self.suffixes))
            if len(self._verdicts) >= _CACHE_LIMIT:
                self._verdicts.clear()
            self._verdicts[raw] = verdict
        return verdict

    def is_json_route(self, path: str) -> bool:
        if path in self.json_paths:
            return True
        if self.json_suffix_under is not None:
            prefix, suffix = self.json_suffix_under
            return path.startswith(prefix) and path.endswith(suffix)
        return False

    def check(self, method: str, path: str, headers: Iterable[tuple[bytes, bytes]]) -> Refusal | None:
        """None when the request may go on, else why not."""
        named = dict(headers)  # ASGI header names are lowercase bytes; one C-level pass
        host = named.get(b"host")
        if host is not None and not self.host_allowed(host):
            shown = host[:80].decode("latin-1")
            return Refusal(403, "host_not_allowed", (
                f"Host {shown!r} is not one of this gateway's names ({self.described}): refused so that a web "
                "page whose DNS name points here cannot reach it; connect by one of those names, or list yours "
                "in server.allowed_hosts"))
        if method in SAFE_METHODS:
            return None
        origin, fetch_site, ctype = named.get(b"origin"), named.get(b"sec-fetch-site"), named.get(b"content-type")
        if fetch_site is not None and fetch_site.strip().lower() in CROSS_SITE:
            return Refusal(403, "cross_site_request", (
                f"a browser sent this {method} from another site (Sec-Fetch-Site: {fetch_site.decode('latin-1')}); "
                "a gateway without API keys takes no state-changing request from a web page"))
        if origin is not None and not self._same_origin(origin, host):
            return Refusal(403, "cross_site_request", (
                f"a browser sent this {method} from the page {origin[:80].decode('latin-1')!r}, not from this "
                "gateway; a gateway without API keys takes no state-changing request from another origin"))
        if self.is_json_route(path) and not _is_json(ctype):
            sent = ctype[:80].decode("latin-1") if ctype is not None else "none"
            return Refusal(415, "unsupported_media_type", (
                f"{path} takes a JSON body: send Content-Type: application/json (got {sent}); other types are "
                "what a web page can post across sites"))
        return None

    @staticmethod
    def _same_origin(origin: bytes, host: bytes | None) -> bool:
        text = origin.decode("latin-1").strip().lower()
        scheme, sep, netloc = text.partition("://")
        if not sep or host is None or "/" in netloc:
            return False  # "null", or anything else that is not scheme://host[:port]
        o_host, o_port = _split_host(netloc)
        h_host, h_port = _split_host(host.decode("latin-1"))
        default = _DEFAULT_PORTS.get(scheme, "")
        return o_host == h_host and (o_port or default) == (h_port or default)


def _is_json(ctype: bytes | None) -> bool:
    if ctype is None:
        return False
    mime = ctype.split(b";", 1)[0].strip().lower()
    return mime == b"application/json" or (mime.startswith(b"application/") and mime.endswith(b"+json"))
