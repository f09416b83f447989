"""Start and stop a real vLLM CPU server for tests (runs under the project venv, no torch).

The model is the tiny Qwen2.5-VL built by ``tests/support/build_tiny_vlm.py`` in the vLLM CPU
venv (``$JG_VLLM_VENV`` or ``<repo>/.venv-vllm``, set up by ``scripts/setup_vllm_cpu.sh``).
The server is launched through ``scripts/start_vllm.sh start --cpu`` so that the launcher
itself is exercised by the tests.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
START_SCRIPT = REPO_ROOT / "scripts" / "start_vllm.sh"
DEFAULT_RUN_DIR = REPO_ROOT / "run" / "vllm-tests"


def vllm_venv() -> Path:
    """The vLLM CPU venv: ``$JG_VLLM_VENV`` or ``<repo>/.venv-vllm``."""
    return Path(os.environ.get("JG_VLLM_VENV") or REPO_ROOT / ".venv-vllm")


def vllm_python() -> Path:
    python = vllm_venv() / "bin" / "python"
    if not python.exists():
        raise RuntimeError(
            f"vLLM CPU venv not found ({python}); run scripts/setup_vllm_cpu.sh "
            "or set JG_VLLM_VENV"
        )
    return python


def _offline_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    return env


def build_tiny_model(timeout: float = 600) -> Path:
    """The tiny VLM, built in the vLLM venv once per version of its builder (tests/support/tiny_cache.py)."""
    from tests.support.tiny_cache import cached_build

    return cached_build("tiny-qwen25vl", python=vllm_python(), module="tests.support.build_tiny_vlm",
                        marker=".tiny_vlm_builder.json", timeout=timeout)


def build_tiny_qwen3vl_model(timeout: float = 600) -> Path:
    """The tiny Qwen3-VL (tests/support/build_tiny_qwen3vl.py), built in the vLLM venv once per version of its builder."""
    from tests.support.tiny_cache import cached_build

    return cached_build("tiny-qwen3vl", python=vllm_python(), module="tests.support.build_tiny_qwen3vl",
                        marker=".tiny_qwen3vl_builder.json", timeout=timeout)


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


@dataclass
class VllmServer:
    """A vLLM server started by :func:`start_cpu_vllm`."""

    base_url: str  # "http://127.0.0.1:PORT/v1"
    port: int
    pid: int
    log_path: Path
    name: str
    run_dir: Path
    served_names: list[str] = field(default_factory=list)
    startup_seconds: float = 0.0  # start_vllm.sh start until /health answered 200
    stopped: bool = False

    @property
    def model(self) -> str:
        """The first served name (what clients pass as ``model``)."""
        return self.served_names[0]

    def is_alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        # a zombie still answers kill(0); treat it as gone
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
            return stat.rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return True

    def stop(self, timeout: float = 60) -> None:
        """Stop the server through ``start_vllm.sh stop`` (SIGTERM, then SIGKILL)."""
        if self.stopped:
            return
        proc = subprocess.run(
            [
                "bash",
                str(START_SCRIPT),
                "stop",
                "--name",
                self.name,
                "--run-dir",
                str(self.run_dir),
                "--stop-timeout",
                "20",
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        self.stopped = True
        if proc.returncode != 0:
            raise RuntimeError(
                f"start_vllm.sh stop failed:\n{proc.stdout}\n{proc.stderr}"
            )

    def __enter__(self) -> VllmServer:  # noqa: PYI034
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_cpu_vllm(
    model_dir: str | os.PathLike[str],
    served_names: list[str],
    port: int | None = None,
    run_dir: str | os.PathLike[str] = DEFAULT_RUN_DIR,
    limit_mm: str = '{"image":4,"video":1}',
    max_model_len: int = 4096,
    wait_timeout: int = 240,
    name: str | None = None,
    extra_args: list[str] | None = None,
    extra_env: dict[str, str] | None = None,
) -> VllmServer:
    """Start a CPU vLLM server on ``model_dir`` and wait until GET /health is 200 (``extra_env``:
    set for the server, e.g. VLLM_SERVER_DEV_MODE=1).

    Raises RuntimeError (with the log tail) when the server does not come up.
    """
    if not served_names:
        raise ValueError("served_names must name at least one model")
    port = port or free_port()
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    name = name or f"tiny-vlm-{port}"
    cmd = [
        "bash",
        str(START_SCRIPT),
        "start",
        "--cpu",
        "--model",
        str(Path(model_dir).resolve()),
        "--name",
        name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(max_model_len),
        "--limit-mm-per-prompt",
        limit_mm,
        "--run-dir",
        str(run_dir),
        "--wait-timeout",
        str(wait_timeout),
    ]
    for served in served_names:
        cmd += ["--served-model-name", served]
    env = _offline_env()
    env["JG_VLLM_VENV"] = str(vllm_venv())
    env.update(extra_env or {})
    if extra_args:
        cmd += ["--", *extra_args]

    log_path = run_dir / f"{name}.log"
    pid_path = run_dir / f"{name}.pid"
    started = time.monotonic()
    try:
        proc = subprocess.run(
            cmd,
            check=False,
            capture_output=True,
            text=True,
            timeout=wait_timeout + 60,
            env=env,
        )
    except subprocess.TimeoutExpired as exc:
        _kill_from_pid_file(pid_path)
        raise RuntimeError(
            f"start_vllm.sh start did not return in {wait_timeout + 60} s\n{_tail(log_path)}"
        ) from exc
    if proc.returncode != 0:
        raise RuntimeError(
            f"vLLM CPU server failed to start (exit {proc.returncode}):\n"
            f"{proc.stdout}\n{proc.stderr}\n--- log tail ({log_path}) ---\n{_tail(log_path)}"
        )
    try:
        pid = int(pid_path.read_text().strip())
    except (OSError, ValueError) as exc:
        raise RuntimeError(
            f"no PID file at {pid_path} after start:\n{proc.stdout}"
        ) from exc
    server = VllmServer(
        base_url=f"http://127.0.0.1:{port}/v1",
        port=port,
        pid=pid,
        log_path=log_path,
        name=name,
        run_dir=run_dir,
        served_names=list(served_names),
        startup_seconds=time.monotonic() - started,
    )
    return server


def _kill_from_pid_file(pid_path: Path) -> None:
    """Last-resort cleanup of a server whose start did not return."""
    try:
        pid = int(pid_path.read_text().strip())
    except (OSError, ValueError):
        return
    for sig in (15, 9):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(5)
