"""`server.allow_networks`: only peers inside the listed networks are served.

A pure-ASGI middleware, outermost, so no route, body read or authentication runs for a refused
peer: it reads the TCP peer address the server puts in the scope (`client`), never a header
(X-Forwarded-For is the client's to write). An IPv4 peer reached over an IPv6 socket
(`::ffff:a.b.c.d`) is matched as the IPv4 address. A refused request gets 403 with a JSON body
(`message` for cosmos-rl clients, `error` for Flow-Factory's) and a log line, at most one a minute
per address with the count refused since.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Sequence

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import error_body

log = logging.getLogger(__name__)
LOG_EVERY_S = 60.0
MAX_TRACKED_PEERS = 4096  # refused addresses whose last log time is kept

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(texts: Sequence[str]) -> list[Network]:
    return [ipaddress.ip_network(t, strict=False) for t in texts]


def peer_allowed(address: str | None, networks: Sequence[Network]) -> bool:
    if not address:
        return False  # no TCP peer to check (e.g. a unix socket): not known to be inside
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone id is not part of the address
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip.version == net.version and ip in net for net in networks)


class PeerNetworksMiddleware:
    def __init__(self, app: ASGIApp, networks: Sequence[str]) -> None:
        self.app = app
        self.texts = list(networks)
        self.networks = parse_networks(networks)
        self._logged: dict[str, tuple[float, int]] = {}  # peer -> (last log time, refused since)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        address = client[0] if client else None
        if peer_allowed(address, self.networks):
            await self.app(scope, receive, send)
            return
        self._note(address or "(no peer address)", scope.get("path", ""))
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        message = (f"peer {address} is not in server.allow_networks ({', '.join(self.texts)}); "
                   "ask the gateway's operator to add its network")
        # `message` and `status` at the top too: cosmos-rl's clients read them
        response = JSONResponse({**error_body("forbidden", message), "message": message, "status": "forbidden"},
                                status_code=403)
        await response(scope, receive, send)

    def _note(self, peer: str, path: str) -> None:
        now = time.monotonic()
        last, count = self._logged.get(peer, (-LOG_EVERY_S, 0))
        if now - last < LOG_EVERY_S:
            self._logged[peer] = (last, count + 1)
            return
        more = f" ({count} more refused since the last line)" if count else ""
        log.warning("refused %s %s: peer not in server.allow_networks %s%s", peer, path, self.texts, more)
        if len(self._logged) >= MAX_TRACKED_PEERS and peer not in self._logged:
            self._logged.pop(next(iter(self._logged)))
        self._logged[peer] = (now, 0)
