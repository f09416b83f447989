"""Python clients in the style of `AsyncOpenAI`: `await client.rewards.create(...)`.

Both work against a server URL or in-process (a Gateway in this process, no HTTP):

    client = AsyncRewardClient("http://127.0.0.1:8080", api_key="...")
    client = AsyncRewardClient(config="judges.toml")   # in-process: a config file, or a shipped config
    client = AsyncRewardClient(config="default")       # by name (`judge-gateway configs` lists them)
    result = await client.rewards.create(samples=[{"prompt": "a cat", "image": png_bytes}])
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from .config import GatewayConfig, load_config
from .env_vars import getenv
from .exceptions import JudgeGatewayError, Unavailable
from .gateway import Gateway
from .schema import JudgeInfo, RewardRequest, RewardResponse, SampleInput

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 600.0
DEFAULT_MAX_RETRIES = 2
# As AsyncOpenAI: scoring is idempotent, so a request the service could not take (429, 503
# admission), or lost to a replica that died (a proxy's 500/502/504), or whose connection broke,
# is sent again; a 4xx that names a fault of the request is not.
RETRY_STATUSES = frozenset({408, 409, 429}) | frozenset(range(500, 600))
MAX_RETRY_WAIT_S = 30.0


class RewardAPIError(JudgeGatewayError):
    """The service refused a request or failed; `status` and `body` say how."""

    def __init__(self, status: int, message: str, body: Any = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.body = body


def request_to_json(request: RewardRequest) -> dict[str, Any]:
    """A validated request as the JSON the native API takes (media serialise themselves)."""
    return request.model_dump(mode="json", exclude_unset=True)


def build_request(samples: Iterable[SampleInput | Mapping[str, Any]], judges: list[str] | None,
                  group_transform: str, request_id: str | None, run: str | None = None,
                  step: int | None = None) -> RewardRequest:
    return RewardRequest(
        samples=[s if isinstance(s, SampleInput) else SampleInput(**s) for s in samples],
        judges=judges,
        group_transform=group_transform,  # type: ignore[arg-type]
        request_id=request_id,
        run=run,
        step=step,
    )


class RewardConnectionError(Unavailable, httpx.TransportError):
    """No answer from the service at `url`: the connection was refused or broke on every attempt
    (a stopped gateway, a wrong URL), or the call timed out. The message names the URL; the
    transport's own error (httpx's) is the cause, and since this is an `httpx.TransportError`
    too, code that caught httpx's errors still catches it."""

    def __init__(self, url: str, err: httpx.TransportError, attempts: int) -> None:
        detail = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        if isinstance(err, httpx.TimeoutException):
            message = f"no answer from the judge-gateway service at {url} in time ({detail})"
        else:
            tries = f" ({attempts} attempts)" if attempts > 1 else ""
            message = (f"cannot reach the judge-gateway service at {url}{tries}: {detail}; is `judge-gateway "
                       "serve` running there, and is the URL right?")
        httpx.TransportError.__init__(self, message, request=getattr(err, "_request", None))
        self.url = url


def _raise_for(resp: httpx.Response) -> None:
    if resp.status_code < 400:
        return
    try:
        body = resp.json()
        message = body.get("error", {}).get("message") or resp.text
    except ValueError:
        body, message = None, resp.text
    raise RewardAPIError(resp.status_code, message, body)


# A connection refused or broken under the call: sent again. Not a timeout: the service may still be
# scoring it (a Read/Write/PoolTimeout retried would hold the caller max_retries times the timeout).
BROKEN_CONNECTION = (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


def _retry_wait(attempt: int, resp: httpx.Response | None) -> float:
    """Seconds before retry `attempt` (0-based): the service's Retry-After when it gives one,
    else 0.5 s doubling, capped."""
    if resp is not None:
        try:
            return min(MAX_RETRY_WAIT_S, max(0.0, float(resp.headers.get("retry-after", ""))))
        except ValueError:
            pass
    return min(MAX_RETRY_WAIT_S, 0.5 * 2 ** attempt)


async def _send(c: "AsyncRewardClient", method: str, path: str, **kwargs: Any) -> httpx.Response:
    """One call with up to `c.max_retries` retries of what `RETRY_STATUSES` and broken
    connections say may succeed again; the last answer is what the caller sees, and a call that
    got none raises RewardConnectionError naming the URL."""
    url = f"{c._http.base_url}".rstrip("/") + path
    for attempt in range(c.max_retries + 1):
        last = attempt == c.max_retries
        try:
            resp = await c._http.request(method, path, **kwargs)
        except BROKEN_CONNECTION as err:
            if last:
                raise RewardConnectionError(url, err, attempt + 1) from err
            await asyncio.sleep(_retry_wait(attempt, None))
            continue
        except httpx.TransportError as err:  # a timeout: the service may still be scoring, not sent again
            raise RewardConnectionError(url, err, attempt + 1) from err
        if resp.status_code not in RETRY_STATUSES or last:
            return resp
        await asyncio.sleep(_retry_wait(attempt, resp))
    raise AssertionError("unreachable")


def _resolve_gateway(gateway: Gateway | None, config: GatewayConfig | str | Path | None) -> Gateway | None:
    if gateway is not None:
        return gateway
    if config is None:
        return None
    return Gateway(config if isinstance(config, GatewayConfig) else load_config(config))


class _AsyncRewards:
    def __init__(self, client: "AsyncRewardClient") -> None:
        self._client = client

    async def create(self, *, samples: Iterable[SampleInput | Mapping[str, Any]], judges: list[str] | None = None,
                     group_transform: str = "none", request_id: str | None = None, run: str | None = None,
                     step: int | None = None) -> RewardResponse:
        """Score samples. Samples are dicts (or SampleInput) with prompt, image, video, ...;
        media may be bytes, base64, numpy arrays, PIL images (see SampleInput). `run` and `step`
        tell the service's watch which training run and step they come from (an in-process
        client has no watch: they are ignored there)."""
        request = build_request(samples, judges, group_transform, request_id, run, step)
        c = self._client
        if c._gateway is not None:
            return await c._gateway.score(request)
        resp = await _send(c, "POST", "/v1/rewards", json=request_to_json(request))
        _raise_for(resp)
        return RewardResponse.model_validate_json(resp.content)


class _AsyncJudges:
    def __init__(self, client: "AsyncRewardClient") -> None:
        self._client = client

    async def list(self, names: list[str] | None = None, *, wait: bool = False) -> list[JudgeInfo]:
        """The configured judges with their readiness; `names`: only those, in that order.
        In-process, only the named judges are probed (no other head worker starts) and `wait`
        waits for a head's model to load; a server probes its judges itself (a head it is still
        loading says `starting`). A name the service does not have raises ValueError."""
        c = self._client
        if c._gateway is not None:
            return await c._gateway.judge_infos(names, wait=wait)
        resp = await _send(c, "GET", "/v1/judges")
        _raise_for(resp)
        infos = [JudgeInfo.model_validate(j) for j in resp.json()["judges"]]
        if names is None:
            return infos
        by_name = {i.name: i for i in infos}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise ValueError(f"unknown judge(s) {', '.join(map(repr, unknown))}; the service has: "
                             f"{', '.join(by_name)}")
        return [by_name[n] for n in names]


class _AsyncResidency:
    def __init__(self, client: "AsyncRewardClient") -> None:
        self._client = client

    async def sleep(self, judges: list[str] | None = None) -> dict[str, dict[str, Any]]:
        """Put colocated judges to sleep (all of them for None) before the trainer's update; per judge,
        `state` and `outcome` (done, already, refused: work was in flight, nothing dropped; failed)."""
        return await self._change("sleep", judges)

    async def wake(self, judges: list[str] | None = None) -> dict[str, dict[str, Any]]:
        """Wake colocated judges now (as a rollout starts: the wake overlaps the generation)."""
        return await self._change("wake", judges)

    async def _change(self, action: str, judges: list[str] | None) -> dict[str, dict[str, Any]]:
        c = self._client
        if c._gateway is not None:
            residency = c._gateway.residency
            return await (residency.sleep(judges) if action == "sleep" else residency.wake(judges))
        resp = await _send(c, "POST", "/v1/residency", json={"action": action, "judges": judges})
        if resp.status_code in (409, 503):  # refused or failed for some judge: the body says which
            return resp.json()["judges"]
        _raise_for(resp)
        return resp.json()["judges"]


class AsyncRewardClient:
    """Async client. Give a `base_url` for HTTP, or `config`/`gateway` to run in-process.
    `max_retries`: how often a call the service could not take or lost (429, 408, 409, 5xx, a
    broken connection) is sent again, after its Retry-After or 0.5 s doubling (0: never)."""

    def __init__(self, base_url: str | None = None, *, api_key: str | None = None,
                 config: GatewayConfig | str | Path | None = None, gateway: Gateway | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S, max_retries: int = DEFAULT_MAX_RETRIES) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.max_retries = max_retries
        self._gateway = _resolve_gateway(gateway, config)
        self._owns_gateway = gateway is None and self._gateway is not None
        if self._gateway is None:
            base_url = base_url or getenv("JG_URL")
            if not base_url:
                raise ValueError("give base_url (or JG_URL) for HTTP, or config/gateway for in-process")
            if urlsplit(base_url).scheme not in ("http", "https"):
                # A config path given where the URL goes (the first argument) would fail at the
                # first call with a transport error: say how to run in-process instead.
                raise ValueError(f"base_url {base_url!r} is not an http:// or https:// URL; to score in-process "
                                 f"with a config file or a shipped config, pass config={base_url!r}")
            api_key = api_key or getenv("JG_API_KEY")
            headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
            self._http = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers,
                                           timeout=httpx.Timeout(timeout, connect=10.0))
        self.rewards = _AsyncRewards(self)
        self.judges = _AsyncJudges(self)
        self.residency = _AsyncResidency(self)

    async def close(self) -> None:
        if self._gateway is None:
            await self._http.aclose()
        elif self._owns_gateway:
            await self._gateway.aclose()

    async def __aenter__(self) -> "AsyncRewardClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _LoopThread:
    """A private event loop in a daemon thread, so the sync client can drive async code."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="judge-gateway-client", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


class _SyncRewards:
    def __init__(self, client: "RewardClient") -> None:
        self._client = client

    def create(self, *, samples: Iterable[SampleInput | Mapping[str, Any]], judges: list[str] | None = None,
               group_transform: str = "none", request_id: str | None = None, run: str | None = None,
               step: int | None = None) -> RewardResponse:
        return self._client._runner.run(self._client._async.rewards.create(
            samples=list(samples), judges=judges, group_transform=group_transform, request_id=request_id,
            run=run, step=step))


class _SyncJudges:
    def __init__(self, client: "RewardClient") -> None:
        self._client = client

    def list(self, names: list[str] | None = None, *, wait: bool = False) -> list[JudgeInfo]:
        return self._client._runner.run(self._client._async.judges.list(names, wait=wait))


class _SyncResidency:
    def __init__(self, client: "RewardClient") -> None:
        self._client = client

    def sleep(self, judges: list[str] | None = None) -> dict[str, dict[str, Any]]:
        return self._client._runner.run(self._client._async.residency.sleep(judges))

    def wake(self, judges: list[str] | None = None) -> dict[str, dict[str, Any]]:
        return self._client._runner.run(self._client._async.residency.wake(judges))


class RewardClient:
    """Blocking client with the same surface: `client.rewards.create(...)`."""

    def __init__(self, base_url: str | None = None, *, api_key: str | None = None,
                 config: GatewayConfig | str | Path | None = None, gateway: Gateway | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S, max_retries: int = DEFAULT_MAX_RETRIES) -> None:
        self._runner = _LoopThread()

        async def make() -> AsyncRewardClient:
            return AsyncRewardClient(base_url, api_key=api_key, config=config, gateway=gateway, timeout=timeout,
                                     max_retries=max_retries)

        try:
            self._async = self._runner.run(make())
        except BaseException:
            self._runner.stop()
            raise
        self.rewards = _SyncRewards(self)
        self.judges = _SyncJudges(self)
        self.residency = _SyncResidency(self)

    def close(self) -> None:
        try:
            self._runner.run(self._async.close())
        finally:
            self._runner.stop()

    def __enter__(self) -> "RewardClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
