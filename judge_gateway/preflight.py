"""Before a command scores: which of its judges can score here, said once, and how to start the
others; `score` (and `judges`) print it instead of a stream of per-request warnings and a run
that is invalid from the first sample to the last.

In-process, only the command's own judges are probed (no other head worker starts) and a head
is waited for until its model has loaded or failed to; through `--server` the service reports
its judges itself, and a head it is still loading counts as loading, not as unavailable.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from .config import GatewayConfig, is_loopback
from .envs import load_specs
from .extras import install_command
from .schema import JudgeInfo

# The supervisor's states while a head loads (workers/supervisor.py readiness reasons).
_LOADING_STATES = ("starting:", "restarting:")


@dataclass(frozen=True)
class JudgeReadiness:
    info: JudgeInfo
    state: Literal["ready", "loading", "unavailable"]
    hint: str | None = None  # how to make an unavailable judge ready

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def can_score(self) -> bool:
        return self.state != "unavailable"


def start_hint(info: JudgeInfo, cfg: GatewayConfig | None, config_ref: str | None = None) -> str | None:
    """How to make a judge that cannot score ready: a VLM judge's backend brought up, a head's
    environment built and its weights fetched. `config_ref` (the command's --config) goes into the
    commands it names."""
    if not info.backend:
        return head_hint(info, cfg, config_ref)
    backend = cfg.backends.get(info.backend) if cfg is not None else None
    model = backend.model if backend is not None else (info.model or "its model")
    urls = backend.base_urls if backend is not None else []
    local = [u for u in urls if is_loopback(urlsplit(u).hostname or "")]
    if urls and not local:
        return (f"the vLLM server(s) at {', '.join(urls)} must be up and serve {model!r} "
                f"([backends.{info.backend}] base_urls)")
    port = urlsplit(local[0]).port if local else None
    port_arg = f" --port {port}" if port else ""
    # A hub id is served under its own name; any other name must be given as the served name.
    serve = (f"vllm serve {model}{port_arg}" if "/" in model
             else f"vllm serve <weights of {model}> --served-model-name {model}{port_arg}")
    if backend is not None and backend.launch is not None:  # the config says how: `up` starts it
        return (f"`judge-gateway up` with this config starts it (its launch table, [backends.{info.backend}.launch]); "
                f"or start vLLM yourself: `{serve}`")
    return (f"start vLLM for it: `{serve}` (guides: vLLM backends), or point "
            f"[backends.{info.backend}] base_urls at a running server")


def head_hint(info: JudgeInfo, cfg: GatewayConfig | None, config_ref: str | None = None) -> str:
    """How to make a head ready: `prepare` builds the environment its `python` names, fetches its
    weights and probes it; a head with no `python` of its own runs under the gateway's interpreter,
    so it gets the environment of its kind first (envs/specs.toml)."""
    prepare = f"judge-gateway prepare{f' --config {config_ref}' if config_ref else ''} --judges {info.name}"
    if cfg is None:  # a service's judge: its config and machine are the service's
        return (f"on the service's machine, `judge-gateway prepare --config <its config> --judges {info.name}` "
                "builds the head's environment, fetches its weights and says what is missing")
    judge = cfg.judges.get(info.name)
    python = getattr(judge.options, "python", None) if judge is not None else None
    env = load_specs().env_of_kind(info.kind)
    if python or env is None:  # its own interpreter (or a class you bring, in your venv)
        return f"`{prepare}` builds its environment ({python or 'yours'}), fetches its weights and probes it"
    extra = judge.kind_spec.extra if judge is not None else None
    here = f"install its libraries here (`{install_command(extra, sys.executable)}`), or " if extra else ""
    return (f"{here}give it the environment of its kind: `judge-gateway env build {env.name}` (makes {env.venv}), "
            f"set [judges.{info.name}.options] python = \"{env.venv}/bin/python\"; then `{prepare}` fetches "
            "its weights and probes it")


def classify(info: JudgeInfo, cfg: GatewayConfig | None, config_ref: str | None = None) -> JudgeReadiness:
    if info.ready:
        return JudgeReadiness(info, "ready")
    if info.ready is None or (info.ready_reason or "").startswith(_LOADING_STATES):
        return JudgeReadiness(info, "loading")
    return JudgeReadiness(info, "unavailable", start_hint(info, cfg, config_ref))


async def check_judges(client: Any, names: Sequence[str], cfg: GatewayConfig | None, *,
                       load_timeout_s: float = 600.0, poll_s: float = 1.0,
                       say: Callable[[str], None] | None = None,
                       config_ref: str | None = None) -> list[JudgeReadiness]:
    """Readiness of the named judges through an AsyncRewardClient. In-process they are probed
    now and their heads loaded; a server reports them itself, and while it is still loading one
    of their heads (its model names it once loaded, and the run records that name) this asks
    again, up to `load_timeout_s`, saying once what it waits for."""
    deadline = time.monotonic() + load_timeout_s
    waited = False
    while True:
        checks = [classify(info, cfg, config_ref) for info in await client.judges.list(list(names), wait=True)]
        loading = [c.name for c in checks if c.state == "loading"]
        if not loading or time.monotonic() > deadline:
            return checks
        if not waited and say is not None:
            say(f"waiting for the service to load {', '.join(loading)} (up to {load_timeout_s:.0f} s)")
        waited = True
        await asyncio.sleep(poll_s)


def report(checks: Sequence[JudgeReadiness], *, other_heads: Sequence[str] = ()) -> str | None:
    """One block naming the judges that cannot score here, why, and how to start them, and the
    judges that can; None when every judge can score."""
    down = [c for c in checks if not c.can_score]
    if not down:
        return None
    lines = [f"{len(down)} of {len(checks)} judges cannot score here; each of their scores would be invalid:"]
    # Judges on one backend share its reason and its remedy: one entry for them all.
    groups: dict[tuple[str, str | None], list[str]] = {}
    for c in down:
        groups.setdefault((c.info.ready_reason or "not ready", c.hint), []).append(c.name)
    for (reason, hint), names in groups.items():
        lines.append(f"  {', '.join(names)}: {reason}")
        if hint:
            lines.append(f"    -> {hint}")
    able = [c.name for c in checks if c.can_score]
    if able:
        lines.append(f"  can score here: {', '.join(able)}")
    if other_heads:
        lines.append(f"  local heads that need no server (name them with --judges): {', '.join(other_heads)}")
    return "\n".join(lines)


def local_heads(cfg: GatewayConfig, exclude: Sequence[str]) -> list[str]:
    """The config's head judges not among `exclude`: judges that need no VLM server."""
    return [n for n, j in cfg.judges.items() if j.kind_spec.runs_on == "head" and n not in exclude]
