"""Backend pool: one served model on one or more vLLM replicas behind the OpenAI API.

One long-lived `AsyncOpenAI` client per replica (created on the event loop that uses it), a
concurrency limit per replica, least-outstanding-requests balancing (or, for a call that names
its medium, the replica that medium hashes to, so the k judges of one image share vLLM's
encoder and prefix caches there), ejection of a replica that keeps failing, and tenacity
retries for transient faults only: with jittered exponential back-off until the call's deadline
(`call_deadline`: the judge's deadline_s, a cosmos-rl request's own deadline), or `retry_for_s`
when it has none. A fault shorter than the deadline is waited out, not turned into an invalid
score.

A backend that is down fails fast instead (the circuit, `BackendPool.down`): a replica that
cannot be connected to (refused, unreachable, connect timeout), by a call or by its readiness
probe, and has not answered for `down_after_s` is down; while every replica is, calls raise
BackendUnavailable at once with the reason, each waiting at most for one shared readiness check
(at most one a second, bounded at RECHECK_TIMEOUT_S), and the first answer, to a call or to a
check, closes the circuit. A connect failure sooner after an answer (a blip, a server
restarting) is still retried until the deadline; a probe that is only slow marks nothing.

Fault messages reach clients in scores: they name the backend and the replica's index, never its
URL, and never echo the backend's error body (both go to the log).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import openai
from openai import AsyncOpenAI
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_random_exponential

from .chat_http import ChatSession
from .config import BackendConfig
from .exceptions import Unavailable
from .media.body import dumps as dumps_body

log = logging.getLogger(__name__)
LOG_EVERY_S = 10.0  # a backend's failures are logged at most this often per kind
BUSY_COUNTS_AS_READY_S = 30.0  # a replica that answered a call this recently is busy when its probe is slow
RECHECK_DOWN_EVERY_S = 1.0  # while a backend is down, one readiness check at most this often looks for its return
RECHECK_TIMEOUT_S = 1.0  # that check's bound: what a call to a down backend waits at most


class BackendFault(Unavailable):
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


def _root_cause(exc: BaseException) -> str:
    """The innermost exception's type: what went wrong, without the host or path its text names."""
    seen = exc
    while (seen.__cause__ or seen.__context__) is not None:
        seen = seen.__cause__ or seen.__context__  # type: ignore[assignment]
    return type(seen).__name__


def _as_fault(exc: BaseException, where: str) -> BackendFault:
    """The fault a score reports: `where` names the backend and replica, never their URL, and the
    backend's own error text stays out (the caller logs it)."""
    if isinstance(exc, openai.APIConnectionError) and _failed_to_connect(exc):
        return BackendUnavailable(f"{where}: cannot connect ({_root_cause(exc)})")
    if isinstance(exc, openai.APITimeoutError):
        return BackendTimeout(f"{where}: request timed out")
    if isinstance(exc, openai.APIConnectionError):
        return BackendUnavailable(f"{where}: connection failed ({_root_cause(exc)})")
    if isinstance(exc, openai.APIStatusError):
        return BackendError(f"{where}: HTTP {exc.status_code} (the backend's reply is in the gateway's log)")
    return BackendError(f"{where}: {type(exc).__name__}")


async def _list_models(client: AsyncOpenAI, attempts: int = 3) -> Any:
    """The replica's model list, asked again after a connection that failed other than by a
    refusal: a probe every readiness_interval_s (5 s) meets connections that the server's
    keep-alive timeout (uvicorn's, vLLM's included: 5 s) closes as it writes, which read as a
    reset (the SDK reports some as timeouts); a server that is down refuses every connection and
    is reported at once. The caller bounds the whole with its probe timeout."""
    for attempt in range(1, attempts + 1):
        try:
            return await client.models.list()
        except openai.APIConnectionError as exc:
            if attempt == attempts or _root_cause(exc) == "ConnectionRefusedError":
                raise
            await asyncio.sleep(0.05 * attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def _backend_text(exc: BaseException) -> str:
    """What the log keeps of a failed call: the backend's reply or the connection error."""
    if isinstance(exc, openai.APIStatusError) and exc.response is not None:
        return f"HTTP {exc.status_code}: {exc.response.text[:500]}"
    return f"{type(exc).__name__}: {exc.__cause__ or exc}"


# ---- the call's deadline ------------------------------------------------------------------------

_DEADLINE: ContextVar[float | None] = ContextVar("backend_call_deadline", default=None)


def call_deadline() -> float | None:
    """When (time.monotonic()) the current call must be answered by, or None."""
    return _DEADLINE.get()


@contextmanager
def deadline_at(when: float | None) -> Iterator[None]:
    """Calls made inside (and in tasks started inside) retry transient faults only while a retry
    can start before `when`. Nested deadlines keep the earlier one; None adds none."""
    outer = _DEADLINE.get()
    token = _DEADLINE.set(when if outer is None else outer if when is None else min(outer, when))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


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
    answered_at: float = field(default=-math.inf)  # time.monotonic() of the last call it answered
    alive_at: float = field(default=-math.inf)  # of its last answer: a call, or a probe that listed models
    down_at: float = field(default=-math.inf)  # of its last connect failure or failed probe
    down_reason: str = ""  # why, as a score may say it (no URL)
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

    def mark_alive(self) -> None:
        self.alive_at = time.monotonic()

    def mark_down(self, reason: str) -> None:
        self.down_at = time.monotonic()
        self.down_reason = reason

    def is_down(self, now: float, after_s: float) -> bool:
        """It failed since it last answered, and that answer is older than `after_s`."""
        return self.down_at > self.alive_at and now - self.alive_at > after_s


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
        self._logged: dict[str, float] = {}  # fault kind -> when it was last logged
        self._recheck: asyncio.Future[tuple[bool, str | None]] | None = None  # the readiness check while down
        self._recheck_at = -math.inf

    # ---- the circuit: a backend whose every replica is down fails fast ------------------------

    def down(self) -> bool:
        """Every replica is down (see Replica.is_down): calls fail at once."""
        now = time.monotonic()
        return all(r.is_down(now, self.cfg.down_after_s) for r in self.replicas)

    def down_message(self) -> str:
        """Why calls fail at once: each replica's last failure; never a URL."""
        now = time.monotonic()
        n = len(self.replicas)
        why = "; ".join(f"replica {i + 1} of {n}: {r.down_reason} ({now - r.down_at:.0f} s ago)"
                        for i, r in enumerate(self.replicas))
        last = max(r.alive_at for r in self.replicas)
        since = "it never answered" if last == -math.inf else f"no answer for {now - last:.0f} s"
        return (f"backend {self.name!r} is down ({since}): {why}; calls fail at once until it answers "
                f"(checked at most every {RECHECK_DOWN_EVERY_S:g} s)")

    async def _back_up(self) -> bool:
        """While down: has it come back? One readiness check at a time, at most one a second,
        shared by every call that arrives meanwhile (each waits for it, RECHECK_TIMEOUT_S at most)."""
        loop = asyncio.get_running_loop()
        check = self._recheck
        now = time.monotonic()
        if check is None or check.get_loop() is not loop or (check.done() and now - self._recheck_at
                                                              >= RECHECK_DOWN_EVERY_S):
            self._recheck_at = now
            check = self._recheck = asyncio.ensure_future(self.probe(timeout_s=RECHECK_TIMEOUT_S))
        with contextlib.suppress(Exception):
            await asyncio.shield(check)  # a caller cancelled does not cancel the others' check
        return not self.down()

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
            replica.answered_at = time.monotonic()
            replica.mark_alive()
            return
        replica.consecutive_failures += 1
        if replica.consecutive_failures >= self.cfg.eject_after_failures:
            now = time.monotonic()
            if replica.ejected_until <= now:  # said once per ejection, not once per failed call
                log.warning("backend %s: ejecting %s for %.0fs", self.name, replica.base_url,
                            self.cfg.eject_cooldown_s)
            replica.ejected_until = now + self.cfg.eject_cooldown_s

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
            if isinstance(exc, openai.APIConnectionError) and _failed_to_connect(exc):
                replica.mark_down(f"cannot connect ({_root_cause(exc)})")
            self._record(replica, ok=not is_transient(exc))
            raise
        finally:
            replica.outstanding -= 1
        self._record(replica, ok=True)
        if not isinstance(result, dict):
            raise BackendError(f"backend {self.name!r}: expected a JSON object, got {type(result).__name__}")
        return result

    async def chat(self, *, affinity: int | None = None, **params: Any) -> dict[str, Any]:
        """A chat completion as the server's JSON; raises a BackendFault subclass on failure.

        `params` are the OpenAI chat parameters; `extra_body` entries are merged into the body.
        Transient faults are retried with back-off until the call's deadline (`call_deadline`),
        else for `retry_for_s`: no attempt starts after it; `max_retries`, when set, caps the
        attempts too. An attempt in flight is the caller's to end (asyncio.timeout around this
        call: the judge's deadline_s, a cosmos-rl request's timeout, which fails it as a whole).
        `affinity` (a medium's key, MediaCache.affinity) routes the first attempt to that
        medium's replica; retries go to the least loaded. While the backend is down (every
        replica could not be connected to, none answered for down_after_s) it raises
        BackendUnavailable with the reason at once: no retries, no wait beyond one shared check."""
        if self.down() and not await self._back_up():
            raise BackendUnavailable(self.down_message())
        extra = params.pop("extra_body", None) or {}
        # Serialised once for every attempt, data URLs spliced in (media/body.py).
        body = dumps_body({"model": self.model, **params, **extra})
        deadline = call_deadline()
        if deadline is None:
            deadline = time.monotonic() + self.cfg.retry_for_s
        cap = self.cfg.max_retries

        def give_up(state: RetryCallState) -> bool:
            if cap is not None and state.attempt_number > cap:
                return True
            if self.down():  # not a transient fault any more: fail now, with the reason
                return True
            return time.monotonic() + state.upcoming_sleep >= deadline  # no attempt left in time

        retrying = AsyncRetrying(
            retry=retry_if_exception(is_transient),
            stop=give_up,
            wait=wait_random_exponential(multiplier=0.1, max=self.cfg.retry_backoff_max_s),
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
            self._log_failure(exc)
            if self.down():
                raise BackendUnavailable(self.down_message()) from exc
            raise _as_fault(exc, f"backend {self.name!r}") from exc
        raise BackendError(f"backend {self.name!r}: no attempt was made")  # pragma: no cover

    def _log_failure(self, exc: BaseException) -> None:
        """The backend's own words, for the operator (rate-limited: an outage fails every call)."""
        now = time.monotonic()
        key = type(exc).__name__
        if now - self._logged.get(key, 0.0) >= LOG_EVERY_S:
            self._logged[key] = now
            log.warning("backend %s (%s): %s", self.name, ", ".join(r.base_url for r in self.replicas),
                        _backend_text(exc))

    async def probe(self, timeout_s: float = 2.0) -> tuple[bool, str | None]:
        """Ready when at least one replica lists the served model, or is busy: a replica whose
        model list is slower than `timeout_s` but that answered a scoring call within the last
        BUSY_COUNTS_AS_READY_S is loaded, not down (a refused enqueue would cost the trainer a
        step for a server that is only busy). The reason names replicas by index (it reaches
        /readyz); their URLs and errors go to the log."""
        reasons = []
        n = len(self.replicas)
        for i, replica in enumerate(self.replicas):
            where = f"replica {i + 1} of {n}"
            client, _ = replica.bind(self.cfg)
            try:
                models = await asyncio.wait_for(_list_models(client), timeout_s)
            except asyncio.TimeoutError:
                if time.monotonic() - replica.answered_at <= BUSY_COUNTS_AS_READY_S:
                    return True, None
                # Slow, not known to be gone: a loaded server may list its models late (its calls
                # are still tried; a replica already down stays down until it answers).
                reasons.append(f"{where}: no answer within {timeout_s:g}s")
                continue
            except Exception as exc:  # any failure means "not ready", with the reason
                log.info("backend %s: probe of %s failed: %s", self.name, replica.base_url, _backend_text(exc))
                fault = _as_fault(exc, where)
                if isinstance(fault, BackendUnavailable):  # not there (refused, unreachable): down
                    replica.mark_down(str(fault).removeprefix(f"{where}: "))
                reasons.append(str(fault))
                continue
            replica.mark_alive()  # it answered: whatever it serves, it is there
            ids = [m.id for m in models.data]
            if self.model in ids:
                return True, None
            reasons.append(f"{where}: serves {ids}, not {self.model!r}")
        return False, "; ".join(reasons)

    def stats(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [
            {
                "base_url": r.base_url,
                "outstanding": r.outstanding,
                "served": r.served,
                "ejected": r.ejected_until > now,
                "down": r.is_down(now, self.cfg.down_after_s),
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
