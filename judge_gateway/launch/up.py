"""`judge-gateway up`: start the planned vLLM servers, wait for their health, start the gateway,
supervise them all (a dead one restarts with back-off; its judges read not ready meanwhile,
through the gateway's own readiness probe), and on SIGINT / SIGTERM stop the gateway first, then
the servers, leaving no process behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import Sequence

import httpx

from .plan import ProcessPlan, UpPlan
from .processes import Child, Say, StartFailed


def _say(msg: str) -> None:
    print(f"[up {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


async def start_servers(children: Sequence[Child], stop: asyncio.Event) -> None:
    """Start every child at once and wait until each answers its health URL (StartFailed if one cannot)."""
    for child in children:
        await child.start()
    await asyncio.gather(*(child.wait_healthy(stop) for child in children))


async def already_answering(plans: Sequence[ProcessPlan], timeout_s: float = 2.0) -> list[str]:
    """The planned processes whose health URL already answers: something else holds their port
    (a server started by hand, another `up`), and a second server there could only fail to bind."""
    async def answers(plan: ProcessPlan) -> bool:
        try:
            async with httpx.AsyncClient(timeout=timeout_s, trust_env=False) as client:
                return (await client.get(plan.health_url)).status_code == 200
        except httpx.HTTPError:
            return False

    found = await asyncio.gather(*(answers(p) for p in plans))
    return [f"{p.name}: something already answers {p.health_url}" for p, yes in zip(plans, found) if yes]


async def stop_all(children: Sequence[Child], grace_s: float) -> None:
    await asyncio.gather(*(child.stop(grace_s) for child in children), return_exceptions=True)


def write_state(plan: UpPlan, children: Sequence[Child]) -> None:
    """<run_dir>/up.json: each process's pid, state, restarts and log (for people and tests)."""
    state = {c.plan.name: {"pid": c.pid, "state": c.state, "restarts": c.restarts, "log": str(c.log_path),
                           "gpus": c.plan.gpus, "backend": c.plan.backend} for c in children}
    tmp = plan.run_dir / ".up.json.tmp"
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(plan.run_dir / "up.json")


async def run_up(plan: UpPlan, *, grace_s: float = 30.0, say: Say = _say) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    servers = [Child(p, plan.run_dir, say) for p in plan.servers]
    gateway = [Child(plan.gateway, plan.run_dir, say)] if plan.gateway is not None else []
    everyone = [*servers, *gateway]
    supervisors: list[asyncio.Task[None]] = []
    status = 0
    try:
        busy = await already_answering([c.plan for c in everyone])
        if busy:
            raise StartFailed("; ".join(busy) + ": stop what runs there (or run `judge-gateway serve` against "
                              "servers you started yourself: a backend without a launch table is never started)")
        if servers:
            say(f"starting {len(servers)} vLLM server(s): {', '.join(c.plan.name for c in servers)}")
            await start_servers(servers, stop)
        if gateway and not stop.is_set():
            say(f"starting the gateway: http://{plan.gateway.address}")
            await start_servers(gateway, stop)
        if not stop.is_set():
            write_state(plan, everyone)
            say("everything is up; Ctrl-C or SIGTERM stops it all (logs: " + str(plan.run_dir) + ")")
            supervisors = [asyncio.create_task(c.supervise(stop), name=f"supervise-{c.plan.name}") for c in everyone]
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 2.0)
                write_state(plan, everyone)
    except StartFailed as exc:
        say(f"error: {exc}")
        status = 1
    finally:
        say("stopping: the gateway first, then the vLLM servers")
        stop.set()
        for task in supervisors:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await stop_all(gateway, grace_s)
        await stop_all(servers, grace_s)
        write_state(plan, everyone)
        for sig in signals:
            loop.remove_signal_handler(sig)
        say("stopped")
    return status
