"""What the benches share, with nothing imported from the tests: the worker venvs' interpreters,
the tiny models and `[judges.*]` entries on them, bench media, and a CPU vLLM server.

The tiny models come from the repository's tiny-model builders, run as a command
(`python -m tests.support.tiny_models`, which builds what is missing into the cache once per version
of a builder), so a bench reuses the models the tests built and never imports a test module.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

ROOT = Path(__file__).resolve().parents[1]
TINY_MODELS = "tests.support.tiny_models"  # a command run in a subprocess, not an import


def venv_python(env_var: str, default: str, setup_script: str) -> Path:
    """The interpreter of a worker venv ($env_var, else <repo>/default), or why it is missing."""
    python = Path(os.environ.get(env_var, ROOT / default)) / "bin" / "python"
    if not python.exists():
        raise RuntimeError(f"{python} is missing: run scripts/{setup_script} first")
    return python


def heads_python() -> Path:
    return venv_python("JG_HEADS_VENV", ".venv-heads", "setup_heads.sh")


def python_path() -> str:
    """The checkout first, then what PYTHONPATH already holds (e.g. wheels unpacked on a GPU box)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)


def _tiny_models(*args: str) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": python_path()}
    done = subprocess.run([sys.executable, "-m", TINY_MODELS, *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=3600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"building the tiny model ({' '.join(args)}) failed:\n{done.stderr[-4000:]}")
    return done.stdout.strip().splitlines()[-1]


@functools.cache
def tiny_model(kind: str, size: str = "tiny") -> Path:
    """The folder of a tiny model (kinds: vlm, qwen3vl, heads, hpsv3, videoalign, geneval, image_reward, wan)."""
    return Path(_tiny_models("path", kind, "--size", size))


@functools.cache
def _tiny_judge(head: str, size: str) -> str:
    return _tiny_models("judge", head, "--size", size)


def tiny_judge(head: str, size: str = "tiny", **options) -> dict:
    """A `[judges.*]` entry for a head on its tiny model, with `options` added."""
    entry = json.loads(_tiny_judge(head, size))
    entry["options"].update(options)
    return entry


def moving_square_clip(fps: float, seconds: float = 2.0, h: int = 48, w: int = 64) -> np.ndarray:
    """A clip whose content is a function of time only (a square moving right)."""
    n = round(fps * seconds)
    frames = np.zeros((n, h, w, 3), dtype=np.uint8)
    yy, xx = np.mgrid[0:h, 0:w]
    for i in range(n):
        t = i / fps
        frames[i, ..., 0] = (40 + 60 * t) % 256
        frames[i, ..., 2] = (xx * 3) % 256
        x0 = int(4 + 20 * t)
        frames[i][(xx >= x0) & (xx < x0 + 12) & (yy >= 18) & (yy < 30)] = (250, 220, int(100 + 50 * t))
    return frames


class CpuVllm:
    """A CPU vLLM server on a tiny VLM (`tiny`: vlm, the Qwen2.5-VL; qwen3vl, the Qwen3-VL), through
    scripts/start_vllm.sh (start on enter, stop on exit)."""

    def __init__(self, served_names: list[str], run_dir: str | os.PathLike[str], wait_timeout: int = 240,
                 extra: str = "", tiny: str = "vlm", max_model_len: int = 4096, env: dict[str, str] | None = None):
        self.served_names, self.run_dir, self.wait_timeout = served_names, Path(run_dir), wait_timeout
        self.extra = extra  # more vLLM arguments (start_vllm.sh --extra)
        self.tiny = tiny
        self.max_model_len = max_model_len
        self.env = env or {}  # more environment for start_vllm.sh (e.g. VLLM_ENABLE_V1_MULTIPROCESSING=1)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.name = f"bench-vlm-{self.port}"
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def _script(self, *args: str, timeout: float) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **self.env}
        env.setdefault("JG_VLLM_VENV", str(ROOT / ".venv-vllm"))
        done = subprocess.run(["bash", str(ROOT / "scripts" / "start_vllm.sh"), *args, "--name", self.name,
                               "--run-dir", str(self.run_dir)], env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)
        if done.returncode != 0:
            log = self.run_dir / f"{self.name}.log"
            tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
            raise RuntimeError(f"start_vllm.sh {args[0]} failed:\n{done.stdout}\n{done.stderr}\n{tail}")

    def __enter__(self) -> CpuVllm:  # noqa: PYI034
        names = [a for n in self.served_names for a in ("--served-model-name", n)]
        started = time.monotonic()
        self._script("start", "--cpu", "--model", str(tiny_model(self.tiny)), "--host", "127.0.0.1",
                     "--port", str(self.port), "--max-model-len", str(self.max_model_len), "--limit-mm-per-prompt",
                     '{"image":4,"video":1}', "--wait-timeout", str(self.wait_timeout), *names,
                     *(("--extra", self.extra) if self.extra else ()), timeout=self.wait_timeout + 60)
        self.startup_seconds = time.monotonic() - started
        return self

    def __exit__(self, *exc) -> None:
        self._script("stop", timeout=120)

    @property
    def pid(self) -> int:
        """The API server's process (start_vllm.sh's pid file): vLLM's frontend, and its engine
        core too unless VLLM_ENABLE_V1_MULTIPROCESSING=1 runs that in a child process."""
        return int((self.run_dir / f"{self.name}.pid").read_text().strip())


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_pids(pid: int) -> list[int]:
    """The live children of a process (Linux /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def png_images(n: int, size: int, seed: int) -> list:
    """n square PNG images of `size` that look generated (frames of `natural_clip`), as the
    gateway's ImageMedia."""
    import io

    from judge_gateway.media import ImageMedia

    out = []
    for frame in natural_clip(n, size, size, seed=seed):
        buf = io.BytesIO()
        Image.fromarray(frame).save(buf, format="PNG")
        out.append(ImageMedia.validate(buf.getvalue()))
    return out


async def vllm_counters(base_url: str) -> dict[str, float]:
    """A vLLM server's counters (`vllm:*_total` of its /metrics), each summed over its labels."""
    import re

    import httpx

    root = base_url.rsplit("/v1", 1)[0]
    async with httpx.AsyncClient(timeout=30) as client:
        text = (await client.get(f"{root}/metrics")).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"^(vllm:[a-z_]+_total)(\{[^}]*\})? ([0-9.e+-]+)$", line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


def natural_clip(n: int, h: int, w: int, seed: int = 0) -> np.ndarray:
    """uint8 [n, h, w, 3] frames that look like a generated clip to a codec and a resampler: a
    smooth photo-like texture, colour gradients and rendered text, panning a few pixels a frame
    (noise would be the worst case for both, and nothing like what a generator makes)."""
    import cv2

    rng = np.random.default_rng(seed)
    pad = 4 * n
    field = rng.normal(0, 1, ((h + 15) // 16, (w + pad + 15) // 16, 3)).astype(np.float32)
    texture = cv2.resize(field, (w + pad, h), interpolation=cv2.INTER_CUBIC)
    texture = cv2.GaussianBlur(texture, (0, 0), 3)
    texture = (texture - texture.min()) / (np.ptp(texture) + 1e-6)
    yy, xx = np.mgrid[0:h, 0:w + pad].astype(np.float32)
    gradient = np.stack([xx / (w + pad), yy / h, 1 - xx / (w + pad)], axis=-1)
    base = ((0.6 * texture + 0.4 * gradient) * 255).clip(0, 255).astype(np.uint8)
    im = Image.fromarray(base)
    draw = ImageDraw.Draw(im)
    size = max(12, h // 18)
    font = ImageFont.load_default(size=size)
    for row in range(0, h - size, 3 * size):
        draw.text((20 + row % 97, row + size), f"frame text {row:04d} The quick brown fox 0123456789",
                  fill=(255, 255, 255) if row % 2 else (10, 10, 10), font=font)
    canvas = np.asarray(im)
    return np.stack([canvas[:, 4 * i: 4 * i + w] for i in range(n)])


def run_on_vllm(main_async, args, extra: str = "", wait_timeout: int = 240, tiny: str = "vlm") -> int:
    """`asyncio.run(main_async(args, base_url))` on `args.base_url`, or on a tiny CPU vLLM started
    for the run (the `tiny` model served as `args.model`, with `extra` vLLM arguments, healthy
    within `wait_timeout` seconds) when no URL was given."""
    import asyncio
    import tempfile

    if args.base_url:
        asyncio.run(main_async(args, args.base_url))
        return 0
    with tempfile.TemporaryDirectory() as run_dir, \
            CpuVllm([args.model], run_dir, extra=extra, wait_timeout=wait_timeout, tiny=tiny) as server:
        asyncio.run(main_async(args, server.base_url))
    return 0


async def score_images(gateway, judges: list[str], imgs: list, concurrency: int,
                       prompt: str = "a photo of a fox") -> tuple[float, int]:
    """Each image scored by `judges` in a request of its own through an in-process Gateway, at most
    `concurrency` at once: (wall seconds, invalid scores)."""
    import asyncio

    from judge_gateway.schema import RewardRequest, SampleInput

    sem = asyncio.Semaphore(concurrency)
    invalid = 0

    async def one(img) -> None:
        nonlocal invalid
        async with sem:
            resp = await gateway.score(RewardRequest(samples=[SampleInput(prompt=prompt, image=img)], judges=judges))
            invalid += sum(not s.valid for s in resp.results[0].scores.values())

    start = time.perf_counter()
    await asyncio.gather(*(one(img) for img in imgs))
    return time.perf_counter() - start, invalid


async def wait_healthy(http, log_path: str | os.PathLike[str], timeout_s: float = 30.0) -> None:
    """Poll a gateway's /healthz through the httpx.AsyncClient `http` until it answers 200."""
    import asyncio

    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if (await http.get("/healthz")).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError(f"the gateway did not start within {timeout_s:g} s; see {log_path}")
