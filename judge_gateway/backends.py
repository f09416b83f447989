"""Backend pool: one served model on one or more vLLM replicas behind the OpenAI API.

One long-lived `AsyncOpenAI` client per replica (created on the event loop that uses it), a
concurrency limit per replica, least-outstanding-requests balancing (or, for a call that names
its medium, the replica that medium hashes to, so the k judges of one image share vLLM's
encoder and prefix caches there), ejection of a replica that keeps failing, and tenacity
retries for transient faults only.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any

import openai
from openai import AsyncOpenAI
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from .chat_http import ChatSession
from .config import BackendConfig
from .media.body import dumps as dumps_body

log = logging.getLogger(__name__)


class BackendFault(Exception):
    """A backend call failed; `code` is the score schema's error code."""

    code = "backend_error"


class BackendUnavailable(BackendFault):
    code = "backend_unavailable"


class BackendTimeout(BackendFault):
    code = "timeout"


class BackendError(BackendFault):
    code = "backend_error"


def is_transient(exc: BaseException) -> bool:
    """Worth another try: the replica may answer next time (or another replica will)."""
    if isinstance(exc, (openai.APIConnectionError, openai.APITimeoutError)):
        return True
    if isinstance(exc, openai.RateLimitError):
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code >= 500
    return False


def _failed_to_connect(exc: BaseException) -> bool:
    """A failure in the connect phase (refused, unreachable, connect timeout): the backend is
    not there, whatever the transport calls it (aiohttp's reports a refusal as ConnectTimeout)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionError) or "Connect" in type(seen).__name__:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _as_fault(exc: BaseException, replica: str) -> BackendFault:
    if isinstance(exc, openai.APIConnectionError) and _failed_to_connect(exc):
        return BackendUnavailable(f"{replica}: cannot connect ({exc.__cause__ or exc})")
    if isinstance(exc, openai.APITimeoutError):
        return BackendTimeout(f"{replica}: request timed out")
    if isinstance(exc, openai.APIConnectionError):
        return BackendUnavailable(f"{replica}: cannot connect ({exc.__cause__ or exc})")
    if isinstance(exc, openai.APIStatusError):
        body = exc.response.text[:500] if exc.response is not None else ""
        return BackendError(f"{replica}: HTTP {exc.status_code}: {body}")
    return BackendError(f"{replica}: {type(exc).__name__}: {exc}")


def _mix64(x: int) -> int:
    """splitmix64's finaliser: every input bit moves every output bit (a rendezvous score)."""
    x &= 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


@dataclass
class Replica:
    base_url: str
    max_concurrency: int
    outstanding: int = 0
    consecutive_failures: int = 0
    ejected_until: float = 0.0
    _client: AsyncOpenAI | None = None
    _chat: ChatSession | None = None  # chat completions, without the SDK's per-call cost (chat_http.py)
    _loop: asyncio.AbstractEventLoop | None = None
    _sem: asyncio.Semaphore | None = None
    served: int = field(default=0)
    salt: int = field(init=False)  # a number of the URL, the same in every process (rendezvous hashing)

    def __post_init__(self) -> None:
        self.salt = int.from_bytes(hashlib.blake2b(self.base_url.encode(), digest_size=8).digest(), "little")

    def bind(self, cfg: BackendConfig) -> tuple[AsyncOpenAI, asyncio.Semaphore]:
        """The client and semaphore of the running loop (made once per loop)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            timeout = openai.Timeout(cfg.timeout_s, connect=cfg.connect_timeout_s)
            self._client = AsyncOpenAI(
                base_url=self.base_url,
                api_key=cfg.api_key(),
                max_retries=0,  # retries are ours: transient faults only, across replicas
                timeout=timeout,
                http_client=_http_client(timeout),
            )
            self._chat = ChatSession(self.base_url, cfg.api_key(), cfg.timeout_s, cfg.connect_timeout_s)
            self._sem = asyncio.Semaphore(cfg.max_concurrency)
            self._loop = loop
        assert self._sem is not None
        return self._client, self._sem

    @property
    def chat(self) -> ChatSession:
        assert self._chat is not None, "bind() first"
        return self._chat


def _http_client(timeout: Any) -> Any:
    """openai's aiohttp transport when installed: httpx's pool scans every idle connection on
    each request, which costs more CPU than the rest of a yes/no call at 64+ in flight."""
    factory = getattr(openai, "DefaultAioHttpClient", None)
    if factory is None:
        return None
    try:
        return factory(timeout=timeout)
    except RuntimeError:  # the aiohttp extra is not installed
        return None


class BackendPool:
    """All replicas of one served model."""

    def __init__(self, name: str, cfg: BackendConfig) -> None:
        self.name = name
        self.cfg = cfg
        self.model = cfg.model
        self.replicas = [Replica(url, cfg.max_concurrency) for url in cfg.base_urls]

    def _pick(self, affinity: int | None = None) -> Replica:
        now = time.monotonic()
        healthy = [r for r in self.replicas if r.ejected_until <= now]
        if not healthy:
            # Everyone is cooling down: try the one that comes back first rather than fail.
            return min(self.replicas, key=lambda r: r.ejected_until)
        if affinity is not None and len(healthy) > 1:
            # Rendezvous hashing: a medium keeps its replica while others come and go; a replica
            # with no free slot is passed over for the least loaded (its caches are not worth
            # a wait in its queue).
            preferred = max(healthy, key=lambda r: _mix64(affinity ^ r.salt))
            if preferred.outstanding < preferred.max_concurrency:
                return preferred
        least = min(r.outstanding for r in healthy)
        return random.choice([r for r in healthy if r.outstanding == least])

    def _record(self, replica: Replica, ok: bool) -> None:
        if ok:
            replica.consecutive_failures = 0
            replica.served += 1
            return
        replica.consecutive_failures += 1
        if replica.consecutive_failures >= self.cfg.eject_after_failures:
            replica.ejected_until = time.monotonic() + self.cfg.eject_cooldown_s
            log.warning("backend %s: ejecting %s for %.0fs", self.name, replica.base_url, self.cfg.eject_cooldown_s)

    async def _attempt(self, body: bytes, affinity: int | None) -> dict[str, Any]:
        replica = self._pick(affinity)
        _, sem = replica.bind(self.cfg)
        replica.outstanding += 1
        try:
            async with sem:
                # The JSON as is, through aiohttp: the SDK's request and response layers cost more
                # CPU than the judge itself (chat_http.py).
                result = await replica.chat.post(body)
        except Exception as exc:
            self._record(replica, ok=not is_transient(exc))
            raise
        finally:
            replica.outstanding -= 1
        self._record(replica, ok=True)
        if not isinstance(result, dict):
            raise BackendError(f"{replica.base_url}: expected a JSON object, got {type(result).__name__}")
        return result

    async def chat(self, *, affinity: int | None = None, **params: Any) -> dict[str, Any]:
        """A chat completion as the server's JSON; raises a BackendFault subclass on failure.

        `params` are the OpenAI chat parameters; `extra_body` entries are merged into the body.
        `affinity` (a medium's key, MediaCache.affinity) routes the first attempt to that
        medium's replica; retries go to the least loaded. The caller owns the overall deadline
        (asyncio.timeout around this call)."""
        extra = params.pop("extra_body", None) or {}
        # Serialised once for every attempt, data URLs spliced in (media/body.py).
        body = dumps_body({"model": self.model, **params, **extra})
        retrying = AsyncRetrying(
            retry=retry_if_exception(is_transient),
            stop=stop_after_attempt(self.cfg.max_retries + 1),
            wait=wait_random_exponential(multiplier=0.1, max=2.0),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    first = attempt.retry_state.attempt_number == 1
                    return await self._attempt(body, affinity if first else None)
        except BackendFault:
            raise
        except openai.OpenAIError as exc:
            raise _as_fault(exc, f"backend {self.name}") from exc
        raise BackendError(f"backend {self.name}: no attempt was made")  # pragma: no cover

    async def probe(self, timeout_s: float = 2.0) -> tuple[bool, str | None]:
        """Ready when at least one replica lists the served model."""
        reasons = []
        for replica in self.replicas:
            client, _ = replica.bind(self.cfg)
            try:
                models = await asyncio.wait_for(client.models.list(), timeout_s)
            except asyncio.TimeoutError:
                reasons.append(f"{replica.base_url}: no answer within {timeout_s:.0f}s")
                continue
            except Exception as exc:  # any failure means "not ready", with the reason
                reasons.append(f"{replica.base_url}: {_as_fault(exc, 'replica')}")
                continue
            ids = [m.id for m in models.data]
            if self.model in ids:
                return True, None
            reasons.append(f"{replica.base_url}: serves {ids}, not {self.model!r}")
        return False, "; ".join(reasons)

    def stats(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [
            {
                "base_url": r.base_url,
                "outstanding": r.outstanding,
                "served": r.served,
                "ejected": r.ejected_until > now,
            }
            for r in self.replicas
        ]

    async def aclose(self) -> None:
        for replica in self.replicas:
            for closable in (replica._client, replica._chat):
                if closable is None:
                    continue
                try:
                    await closable.close()
                except RuntimeError:  # its loop is gone; nothing left to close
                    pass
            replica._client = replica._chat = None
