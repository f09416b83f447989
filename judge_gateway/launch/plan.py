"""What `judge-gateway up` runs: one vLLM server per base URL of each backend with a `launch`
table, GPUs handed out in order from CUDA_VISIBLE_DEVICES, then the gateway on the GPUs left.

A server's command line is scripts/start_vllm.sh's own (`start --dry-run`): its presets, flags
and CPU-mode environment are the one definition; `up` runs that command itself so that it can
supervise the process (restart, ordered stop).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from ..config import BackendConfig, GatewayConfig
from ..envs.torch_build import nvidia_gpus
from ..exceptions import ConfigurationError


class LaunchError(ConfigurationError):
    """The plan cannot be made (too few GPUs, no launcher script, a launcher that refuses)."""


@dataclass
class ProcessPlan:
    """One process `up` starts and supervises."""

    name: str  # log / pid file stem, e.g. "vllm-cosmos_reason1-8001" or "gateway"
    argv: list[str]
    env: dict[str, str]  # set on top of the environment `up` runs in
    health_url: str
    gpus: list[str] = field(default_factory=list)  # CUDA_VISIBLE_DEVICES entries given to it
    backend: str | None = None
    startup_timeout_s: float = 1800.0
    restart_backoff_s: float = 2.0
    restart_backoff_max_s: float = 120.0
    address: str = ""  # where it listens, as configured (e.g. "0.0.0.0:8080")


@dataclass
class UpPlan:
    servers: list[ProcessPlan]
    gateway: ProcessPlan | None
    visible_gpus: list[str]
    run_dir: Path
    external: list[str] = field(default_factory=list)  # backends without a launch table
    notes: list[str] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)  # what the gateway runs: its head workers, the latent decoder

    def describe(self) -> str:
        lines = [f"GPUs visible: {', '.join(self.visible_gpus) or 'none'}; logs and pid files under {self.run_dir}"]
        for p in self.servers:
            where = f"GPUs {','.join(p.gpus)}" if p.gpus else "CPU"
            lines.append(f"vLLM {p.name}: backend {p.backend}, {where}, health {p.health_url}")
            if p.env:
                lines.append("  env: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in p.env.items()))
            lines.append("  cmd: " + shlex.join(p.argv))
        for name in self.external:
            lines.append(f"backend {name}: not started: it has no launch table ([backends.{name}.launch]: the preset or "
                         "model, GPUs and context `up` starts its vLLM server with), so it is a server you run "
                         "yourself at its base_urls")
        if self.gateway is not None:
            g = self.gateway
            lines.append(f"gateway: http://{g.address}, GPUs "
                         f"{','.join(g.gpus) if g.gpus else 'none'} (its head workers' cuda devices)")
            lines.append("  cmd: " + shlex.join(g.argv))
            lines += [f"  {w}" for w in self.workers]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def visible_gpus(environ: dict[str, str] | None = None) -> list[str]:
    """CUDA_VISIBLE_DEVICES's entries when it is set (empty: none), else nvidia-smi's GPU indices."""
    environ = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" in environ:
        return [d.strip() for d in environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
    listed, _ = nvidia_gpus()
    return [str(i) for i in range(len(listed))]


def start_script() -> Path:
    """scripts/start_vllm.sh, shipped inside the package (launch/start_vllm.sh: a link to it in a
    source checkout, resolved so the script finds the checkout; a copy in an installed wheel)."""
    script = (Path(__file__).resolve().parent / "start_vllm.sh").resolve()
    if not script.is_file():
        raise LaunchError(f"this installation lacks {script.name} (a broken package?): reinstall judge-gateway, "
                          "or start the servers yourself and drop `launch`")
    return script


def default_vllm_python() -> str | None:
    """`.venv-vllm/bin/python` (what `prepare` builds) when it exists, else start_vllm.sh's own choice."""
    venv = Path(os.environ.get("JG_VLLM_VENV") or ".venv-vllm")
    python = venv / "bin" / "python"
    return str(python.absolute()) if python.exists() else None


# Flow-Factory's launcher variables, which scripts/start_vllm.sh honours below its own.
FLOW_FACTORY_LAUNCHER_VARS = frozenset({"MODEL_PATH", "PORT", "HOST", "SERVED_MODEL_NAME", "TENSOR_PARALLEL_SIZE",
                                        "DATA_PARALLEL_SIZE", "GPU_MEMORY_UTILIZATION", "VLLM_BIN"})


# A colocated backend's servers (judges.NAME.residency = "colocated"): vLLM's sleep mode, and the
# dev-mode endpoints the gateway calls (/sleep, /wake_up, /is_sleeping; residency/vllm.py).
SLEEP_MODE_ARGS = ["--enable-sleep-mode"]
SLEEP_MODE_ENV = {"VLLM_SERVER_DEV_MODE": "1"}


def vllm_command(name: str, backend: BackendConfig, host: str, port: int, run_dir: Path,
                 colocated: bool = False) -> tuple[list[str], dict[str, str]]:
    """The server's (argv, environment additions), as start_vllm.sh builds them; `colocated`: with
    vLLM's sleep mode and its dev endpoints."""
    launch = backend.launch
    assert launch is not None
    args = ["bash", str(start_script()), "start", "--dry-run", "--name", name, "--host", host, "--port", str(port),
            "--run-dir", str(run_dir), "--served-model-name", backend.model]
    if launch.preset:
        args += ["--preset", launch.preset]
    if launch.model:
        args += ["--model", launch.model]
    if launch.max_model_len:
        args += ["--max-model-len", str(launch.max_model_len)]
    if launch.limit_mm_per_prompt is not None:
        args += ["--limit-mm-per-prompt", _json(launch.limit_mm_per_prompt)]
    if launch.api_server_count > 1:
        args += ["--api-server-count", str(launch.api_server_count)]
    if backend.takes_jpeg_frames():  # the judges send sampled videos as JPEG frame lists (config: video_input)
        args.append("--trust-request-mm-kwargs")
    if launch.gpus == 0:
        args.append("--cpu")
    else:
        # One server per base URL, its GPUs one tensor-parallel group: never start_vllm.sh's
        # default of one data-parallel replica per GPU in the caller's CUDA_VISIBLE_DEVICES.
        args += ["--data-parallel", "1"]
        if launch.gpus > 1:
            args += ["--tensor-parallel-size", str(launch.gpus)]
        if launch.gpu_memory_utilization is not None:
            args += ["--gpu-memory-utilization", str(launch.gpu_memory_utilization)]
    python = launch.python and str(Path(launch.python).absolute()) or default_vllm_python()
    if python:
        args += ["--python", python]
    extra = list(launch.extra_args)
    if colocated:
        if launch.gpus == 0:  # config load refuses it too (config/residency.py); never a silent start
            raise LaunchError(f"backend {name!r} is colocated but launched on vLLM's CPU build (gpus = 0), which "
                              "refuses --enable-sleep-mode: vLLM's sleep mode works on GPUs only")
        extra += [a for a in SLEEP_MODE_ARGS if a not in extra]
    if extra:
        args += ["--", *extra]
    # The launcher's own defaults only: variables of the calling shell (its JG_VLLM_* and the
    # Flow-Factory launcher variables it also reads) do not leak into the plan.
    env = {k: v for k, v in os.environ.items() if not k.startswith("JG_VLLM_") and k not in FLOW_FACTORY_LAUNCHER_VARS}
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=False, timeout=60)
    if done.returncode != 0:
        raise LaunchError(f"start_vllm.sh refused backend {name!r}: {(done.stderr or done.stdout).strip()}")
    found: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        key, sep, rest = line.partition(":")
        if sep and key in ("env", "cmd"):
            found[key] = shlex.split(rest)
    if "cmd" not in found:
        raise LaunchError(f"start_vllm.sh --dry-run printed no command for {name!r}: {done.stdout.strip()}")
    extra_env = dict(item.split("=", 1) for item in found.get("env", []))
    return found["cmd"], {**extra_env, **(SLEEP_MODE_ENV if colocated else {}), **launch.env}


def _json(value: dict[str, int]) -> str:
    import json

    return json.dumps(value, separators=(",", ":"))


def plan_up(cfg: GatewayConfig, config_path: str | None, *, run_dir: Path, visible: list[str] | None = None,
            host: str | None = None, port: int | None = None, serve_args: list[str] | None = None,
            gateway: bool = True) -> UpPlan:
    """The servers the config's launch tables ask for, their GPUs, and the gateway after them."""
    gpus = list(visible_gpus() if visible is None else visible)
    pool = list(gpus)
    servers: list[ProcessPlan] = []
    external: list[str] = []
    colocated = {j.backend for j in cfg.judges.values() if j.residency.colocated and j.backend}
    for bname, backend in cfg.backends.items():
        launch = backend.launch
        if launch is None:
            external.append(bname)
            continue
        for url in backend.base_urls:
            parsed = urlsplit(url)
            assert parsed.hostname and parsed.port  # checked at config load
            name = f"vllm-{bname}-{parsed.port}"
            if launch.gpus > len(pool):
                raise LaunchError(f"backend {bname!r} ({url}) needs {launch.gpus} GPU(s), {len(pool)} left of "
                                  f"CUDA_VISIBLE_DEVICES={','.join(gpus) or '(none)'}")
            mine, pool = pool[:launch.gpus], pool[launch.gpus:]
            bind = "127.0.0.1" if parsed.hostname in ("localhost", "0.0.0.0") else parsed.hostname
            argv, env = vllm_command(name, backend, bind, parsed.port, run_dir, colocated=bname in colocated)
            env = {**env, "CUDA_VISIBLE_DEVICES": ",".join(mine)} if mine else env
            health = f"http://{_url_host(bind)}:{parsed.port}/health"
            servers.append(ProcessPlan(name, argv, env, health, mine, bname, launch.startup_timeout_s,
                                       launch.restart_backoff_s, launch.restart_backoff_max_s))
    notes = []
    gateway_plan = None
    if gateway:
        ghost = host or cfg.server.host
        gport = port if port is not None else cfg.server.port
        gateway_gpus = pool if pool else gpus
        if gpus and not pool and servers and any(s.gpus for s in servers):
            notes.append("no GPU is left for the gateway's head workers: they share the vLLM servers' GPUs "
                         "(set launch.gpu_memory_utilization to leave them room)")
        argv = [sys.executable, "-m", "judge_gateway.cli", "serve", "--host", ghost, "--port", str(gport),
                *(["--config", str(Path(config_path).absolute())] if config_path else []), *(serve_args or [])]
        env = {"CUDA_VISIBLE_DEVICES": ",".join(gateway_gpus)} if gpus else {}
        gateway_plan = ProcessPlan("gateway", argv, env, f"http://{_url_host(_connect_host(ghost))}:{gport}/healthz",
                                   gateway_gpus if gpus else [], None, 600.0, address=f"{_url_host(ghost)}:{gport}")
        workers = gateway_workers(cfg, gateway_gpus if gpus else [])
    else:
        workers = []
    return UpPlan(servers, gateway_plan, gpus, run_dir, external, notes, workers)


def _device(device: str, gpus: list[str]) -> str:
    """A worker's device, with the GPU it is of the gateway's CUDA_VISIBLE_DEVICES."""
    if not device.startswith("cuda"):
        return device
    index = int(device.partition(":")[2] or 0)
    if index < len(gpus):
        return f"{device} (GPU {gpus[index]})"
    return f"{device} (GPU {index} of the gateway's {len(gpus)}: none such)" if gpus else device


def gateway_workers(cfg: GatewayConfig, gpus: list[str]) -> list[str]:
    """The processes the gateway starts for its judges (started on first use or by /readyz): one
    worker per head judge, under its interpreter on its device, and the cosmos-rl latent decoder."""
    lines = []
    for name, judge in cfg.judges.items():
        if judge.kind_spec.runs_on != "head":
            continue
        python = getattr(judge.options, "python", None) or "the gateway's interpreter"
        device = str(getattr(judge.options, "device", None) or "cpu")
        lines.append(f"head {name} ({judge.kind}): worker under {python}, on {_device(device, gpus)}")
    latents = cfg.cosmos_rl.latents
    if cfg.cosmos_rl.enabled and latents is not None and latents.python:
        decoders = ", ".join(f"{n} {getattr(latents, n).checkpoint}" for n in ("wan2_1", "wan2_2")
                             if getattr(latents, n, None) is not None)
        lines.append(f"latent decoder (cosmos-rl): worker under {latents.python}, on {_device(str(latents.device), gpus)}"
                     f" ({decoders or 'no VAE configured'})")
    return lines


def _connect_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
