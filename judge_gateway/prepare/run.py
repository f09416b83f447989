"""`judge-gateway prepare --config X`: for every judge (and backend) the config uses, its
environment, its weights, and a check that it loads and scores a probe; one table at the end,
and a non-zero exit when anything the config needs is not ready. A judge that fails any step is
reported with the reason while every other judge is still checked.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from ..config import GatewayConfig
from ..envs import EnvBuilder, EnvBuildError, Specs, TorchChoice, inspect_env, reusable
from ..gateway import Gateway
from ..launch import LaunchError, plan_up, start_servers, stop_all
from ..launch.processes import Child, StartFailed
from .probe import check_judges
from .weights import WeightRef, WeightStatus, backend_weights, check_weight, judge_weights, latent_weights


# The cosmos-rl latent decoder is no judge, but it has an environment and weights of its own: a row.
LATENTS = "cosmos_rl.latents"
MEDIA_DEVICE = "media.device"  # the torch worker that decodes judges' videos on the device
WORKER_ROWS = (LATENTS, MEDIA_DEVICE)  # rows of workers that are not judges


@dataclass
class EnvNeed:
    """A venv some judges run in: which spec it must satisfy, and who needs it."""

    spec: str
    venv: Path
    users: list[str] = field(default_factory=list)
    ok: bool = False
    text: str = "-"  # for the table: "heads .venv-heads (reused)"
    reason: str = ""


@dataclass
class Row:
    judge: str
    kind: str
    env: EnvNeed | None = None
    env_text: str = "gateway's interpreter"
    weights: list[WeightStatus] = field(default_factory=list)
    load: str = "-"
    probe: str = "-"
    seconds: float | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def weights_text(self) -> str:
        if not self.weights:
            return "none named"
        bad = [w for w in self.weights if not w.ok]
        if bad:
            return f"MISSING {len(bad)} of {len(self.weights)}"
        return ", ".join(sorted({w.state for w in self.weights}))

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class Options:
    offline: bool = False
    download_dir: Path | None = None
    start: bool = True  # start a launched backend's servers for its probe (then stop them)
    build: bool = True
    force: bool = False
    judges: list[str] | None = None
    run_dir: Path = Path("run/prepare")


def _venv_of(python: str) -> Path:
    return Path(python).expanduser().absolute().parent.parent


def environment_needs(cfg: GatewayConfig, names: list[str], specs: Specs, rows: dict[str, Row]) -> list[EnvNeed]:
    """One need per venv; a venv two specs would share is a problem of each judge using it."""
    needs: dict[Path, EnvNeed] = {}

    def need(spec: str, python: str | None, default_venv: str, user: str) -> None:
        venv = _venv_of(python) if python else Path(default_venv).absolute()
        found = needs.get(venv)
        if found is None:
            needs[venv] = found = EnvNeed(spec, venv)
        elif found.spec != spec:
            rows[user].problems.append(f"env: {venv} is the {found.spec!r} environment of {found.users[0]}, but "
                                       f"{rows[user].kind} needs {spec!r}: give it a python of its own")
            return
        found.users.append(user)
        rows[user].env = found

    for name in names:
        jc = cfg.judges[name]
        if jc.kind_spec.runs_on == "head":
            spec = specs.env_of_kind(jc.kind)
            python = getattr(jc.options, "python", None)
            if spec is not None and python:
                need(spec.name, python, spec.venv, name)
            elif spec is None and python:  # a class you bring: your venv, never built here
                rows[name].env_text = f"yours: {_short(_venv_of(python))}"
        else:
            backend = cfg.backends.get(jc.backend or "")
            if backend is not None and backend.launch is not None:
                need("vllm", backend.launch.python, specs.env("vllm").venv, name)
    if LATENTS in rows and cfg.cosmos_rl.latents is not None and cfg.cosmos_rl.latents.python:
        need("latents", cfg.cosmos_rl.latents.python, specs.env("latents").venv, LATENTS)
    if MEDIA_DEVICE in rows and cfg.media.device is not None:
        need("latents", cfg.media.device.python, specs.env("latents").venv, MEDIA_DEVICE)
    return list(needs.values())


def build_environments(needs: list[EnvNeed], builder: EnvBuilder, opts: Options) -> None:
    for need in needs:
        spec = builder.specs.env(need.spec)
        short = _short(need.venv)
        if not opts.build:
            state = inspect_env(spec, need.venv)
            need.ok, need.reason = reusable(spec, state, builder.choice)
            need.text = f"{need.spec} {short} ({'ok' if need.ok else 'NOT READY'})"
            continue
        try:
            result = builder.ensure(need.spec, need.venv, force=opts.force)
        except EnvBuildError as exc:
            need.ok, need.reason = False, str(exc)
            need.text = f"{need.spec} {short} (FAILED)"
            continue
        need.ok = True
        need.text = f"{need.spec} {short} ({result.action}{'' if result.action == 'reused' else f' {result.seconds:.0f} s'})"


def _short(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def preset_model(backend_name: str, cfg: GatewayConfig) -> str | None:
    """The model a launch table's preset serves, as start_vllm.sh says (its --model argument)."""
    from ..launch.plan import vllm_command

    backend = cfg.backends[backend_name]
    port = urlsplit(backend.base_urls[0]).port or 8000
    try:
        with tempfile.TemporaryDirectory(prefix="jg-prepare-") as scratch:  # start_vllm.sh makes its run dir
            argv, _ = vllm_command(f"vllm-{backend_name}", backend, "127.0.0.1", port, Path(scratch))
    except LaunchError:
        return None
    return argv[argv.index("--model") + 1] if "--model" in argv else None


def check_all_weights(cfg: GatewayConfig, names: list[str], rows: dict[str, Row], opts: Options) -> None:
    seen: dict[WeightRef, WeightStatus] = {}

    def check(ref: WeightRef) -> WeightStatus:
        if ref not in seen:
            print(f"[prepare] weights: {ref.ref} ({ref.option})", file=sys.stderr, flush=True)
            seen[ref] = check_weight(ref, offline=opts.offline, download_dir=opts.download_dir)
        return seen[ref]

    for name in [*names, *(n for n in WORKER_ROWS if n in rows)]:
        rows[name].weights = [check(r) for r in _weight_refs(cfg, name)]
    for row in rows.values():
        row.problems += [f"weights: {w.detail}" for w in row.weights if not w.ok]


async def _check(cfg: GatewayConfig, rows: dict[str, Row], opts: Options) -> None:
    """Load and probe every judge that got this far. A launched backend that already answers is
    probed as it is; one that does not is started for the probe (as `up` would start it) and
    stopped after, unless --no-start: then its judges stop at "weights present"."""
    ready = [n for n, r in rows.items() if r.ok and n in cfg.judges]
    vlm = [n for n in ready if cfg.judges[n].kind_spec.runs_on == "vlm"]
    to_check = [n for n in ready if n not in vlm]
    gw = Gateway(cfg)
    servers: list[Child] = []
    stop = asyncio.Event()
    results = {}
    try:
        launched = {cfg.judges[n].backend or "" for n in vlm if cfg.backends[cfg.judges[n].backend or ""].launch}
        down = {b for b in launched if not (await gw.pools[b].probe())[0]}
        if opts.start and down:
            sub = cfg.model_copy(update={"backends": {k: v for k, v in cfg.backends.items() if k in down}})
            try:
                plan = plan_up(sub, None, run_dir=opts.run_dir.absolute(), gateway=False)
                servers = [Child(p, plan.run_dir, lambda m: print(f"[prepare] {m}", file=sys.stderr, flush=True))
                           for p in plan.servers]
                print(f"[prepare] starting {len(servers)} vLLM server(s) for the probes: "
                      f"{', '.join(c.plan.name for c in servers)} (logs: {plan.run_dir})", file=sys.stderr, flush=True)
                await start_servers(servers, stop)
                down = set()
            except (LaunchError, StartFailed) as exc:
                for n in vlm:
                    if cfg.judges[n].backend in down:
                        rows[n].load = "cannot start here" if isinstance(exc, LaunchError) else "failed to start"
                        rows[n].problems.append(f"load: {exc}")
        for n in vlm:
            if cfg.judges[n].backend in down:
                if not rows[n].problems:
                    rows[n].load = "not started (--no-start)"
            else:
                to_check.append(n)
        results = await check_judges(gw, to_check)
    finally:
        await gw.aclose()
        await stop_all(servers, 30.0)
    for name, result in results.items():
        row = rows[name]
        row.load, row.probe, row.seconds = result.load, result.probe, result.seconds
        if not result.ok:
            row.problems.append(f"load: {result.load}" if result.probe == "-" else f"probe: {result.probe}")


def format_table(rows: list[Row]) -> str:
    header = ("judge", "env", "weights", "load", "probe", "time")
    body = [(r.judge, r.env.text if r.env else r.env_text, r.weights_text, _cut(r.load), _cut(r.probe),
             "-" if r.seconds is None else f"{r.seconds:.1f} s") for r in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in [header, *body]]
    return "\n".join(lines)


def _cut(text: str, width: int = 40) -> str:
    text = text.splitlines()[0] if text else text
    return text if len(text) <= width else text[:width - 1] + "…"


def _rows(cfg: GatewayConfig, opts: Options) -> dict[str, Row]:
    """A row per judge asked for, and the latent decoder's when the whole config is."""
    names = opts.judges or list(cfg.judges)
    unknown = [n for n in names if n not in cfg.judges]
    if unknown:
        raise ValueError(f"unknown judge(s) {', '.join(unknown)}; configured: {', '.join(cfg.judges)}")
    rows = {n: Row(n, cfg.judges[n].kind) for n in names}
    if opts.judges is None and cfg.cosmos_rl.latents is not None and cfg.cosmos_rl.latents.python:
        rows[LATENTS] = Row(LATENTS, "latents")
    if opts.judges is None and cfg.media.device is not None:
        rows[MEDIA_DEVICE] = Row(MEDIA_DEVICE, "latents")
    return rows


def _weight_refs(cfg: GatewayConfig, name: str) -> list[WeightRef]:
    if name == LATENTS:
        return latent_weights(cfg)
    if name == MEDIA_DEVICE:
        return []  # torch only: the decode worker has no weights
    jc = cfg.judges[name]
    if jc.kind_spec.runs_on == "head":
        return judge_weights(jc)
    backend = cfg.backends.get(jc.backend or "")
    if backend is None:
        return []
    launch = backend.launch
    preset = preset_model(jc.backend or "", cfg) if launch and launch.preset and not launch.model else None
    return backend_weights(backend, preset)


def plan_prepare(cfg: GatewayConfig, choice: TorchChoice, builder: EnvBuilder, opts: Options) -> list[str]:
    """Every step `prepare` would take, in order, without taking any (--dry-run): the torch build,
    each environment's pip steps, each judge's (and the latent decoder's) weights, and the checks,
    a launched backend's vLLM servers among them."""
    rows = _rows(cfg, opts)
    lines = [choice.describe()]
    for need in environment_needs(cfg, [n for n in rows if n not in WORKER_ROWS], builder.specs, rows):
        lines.append(f"environment {need.spec} for {', '.join(need.users)}:")
        lines += [f"  {line}" for line in builder.plan(builder.specs.env(need.spec), need.venv)]
    fetch = "check the local paths and caches, fetch nothing (--offline)" if opts.offline else "fetch what is missing"
    for name, row in rows.items():
        refs = _weight_refs(cfg, name)
        weights = (", ".join(f"{r.option}={r.ref} ({r.form})" for r in refs) + f": {fetch}") if refs else \
            "none to fetch"
        if name == LATENTS:
            lines.append(f"latent decoder {LATENTS}: weights {weights}; its worker loads them when the gateway serves")
            continue
        if name == MEDIA_DEVICE:
            lines.append(f"video decoder {MEDIA_DEVICE}: its environment only; its worker starts when the gateway serves")
            continue
        jc = cfg.judges[name]
        if jc.kind_spec.runs_on == "head":
            check = "then its worker loads the model and scores a probe"
        else:
            backend = cfg.backends.get(jc.backend or "")
            if backend is not None and backend.launch is not None:
                starts = ("start its vLLM server(s) as `up` would (unless one already answers), "
                          if opts.start else "(--no-start: no server started) ")
                check = f"then {starts}probe backend {jc.backend!r} and score a probe"
            else:
                check = f"then probe backend {jc.backend!r} (a server you run: no launch table) and score a probe"
        lines.append(f"judge {name} ({row.kind}): weights {weights}; {check}")
    return lines


def run_prepare(cfg: GatewayConfig, choice: TorchChoice, builder: EnvBuilder, opts: Options) -> tuple[int, list[Row]]:
    started = time.monotonic()
    rows = _rows(cfg, opts)
    names = [n for n in rows if n not in WORKER_ROWS]
    print(f"[prepare] {choice.describe()}", file=sys.stderr, flush=True)
    needs = environment_needs(cfg, names, builder.specs, rows)
    build_environments(needs, builder, opts)
    for need in needs:
        if not need.ok:
            for user in need.users:
                rows[user].problems.append(f"env: {need.reason}")
    check_all_weights(cfg, names, rows, opts)
    asyncio.run(_check(cfg, rows, opts))
    table = list(rows.values())
    print(format_table(table))
    problems = [(r.judge, p) for r in table for p in r.problems]
    if problems:
        print("\nnot ready:")
        for judge, problem in problems:
            print(f"  {judge}: {problem}")
    ready = sum(r.ok for r in table)
    print(f"\n{ready} of {len(table)} judges ready ({time.monotonic() - started:.0f} s)")
    return (0 if not problems else 1), table
