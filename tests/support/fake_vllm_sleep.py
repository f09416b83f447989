"""A stand-in for one vLLM server in sleep mode, for fault injection only (the real CPU vLLM cannot
sleep: its build refuses --enable-sleep-mode). Run as a process, so a test can have it die:
`python -m tests.support.fake_vllm_sleep --port N [--served-name NAME]`.

It answers as vLLM 0.32.0's dev-mode endpoints do (vllm/entrypoints/serve/dev/sleep/api_router.py,
vllm/entrypoints/serve/dev/rpc/api_router.py, vllm/v1/engine/core.py):
- `POST /sleep?level=N&mode=abort|wait|keep` -> {"status": "sleeping", "level": N}; `abort` (vLLM's
  default) drops the requests in flight (counted in `aborted`), `wait` lets them finish first;
- `POST /wake_up` -> {"status": "awake", "tags": null}; `GET /is_sleeping` -> {"is_sleeping": bool};
- `POST /collective_rpc {"method": "reload_weights"}` -> 200 (counted);
- `GET /server_info?config_format=json` -> {"vllm_config": {"device_config": {"device_type": ...},
  "model_config": {"enable_sleep_mode": ...}}};
- a chat completion sent while it sleeps is accepted and not scheduled until a wake, as vLLM's
  paused scheduler does (counted in `calls_while_asleep`: the gateway must never send one).

Faults, set at start or by `POST /_faults {...}` (`GET /_stats` reads the counters):
- `wake_delay_s`: a wake takes this long (a slow wake);
- `die_on_wake`: the process exits in the middle of a wake (the server died during the wake);
- `refuse_sleep_while_busy`: a sleep asked while a completion runs answers 409;
- `device`: what /server_info says (`cpu` plays a CPU vLLM); `no_dev_mode`: the dev endpoints 404;
- `chat_delay_s`: each completion takes this long (work in flight).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tests.support.health import wait_healthy

ROOT = Path(__file__).resolve().parents[2]


def _completion(model: str) -> dict[str, Any]:
    top = [{"token": t, "logprob": math.log(p), "bytes": list(t.encode())} for t, p in (("Yes", 0.7), ("No", 0.3))]
    return {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Yes"},
                         "logprobs": {"content": [{**top[0], "top_logprobs": top}]}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}


def make_app(served_name: str, faults: dict[str, Any]) -> FastAPI:
    app = FastAPI()
    stats: dict[str, Any] = {"sleeping": False, "level": None, "sleeps": 0, "wakes": 0, "reloads": 0,
                             "completions": 0, "calls_while_asleep": 0, "aborted": 0, "in_flight": 0,
                             "sleep_modes": []}
    awake = asyncio.Event()
    awake.set()
    running: set[asyncio.Task[Any]] = set()

    def dev(handler: Any) -> Any:
        async def guarded(request: Request) -> Any:
            if faults.get("no_dev_mode"):
                return JSONResponse({"detail": "Not Found"}, status_code=404)
            return await handler(request)
        return guarded

    @app.get("/health")
    async def health() -> Any:
        return JSONResponse({})

    @app.get("/v1/models")
    async def models() -> Any:
        return {"object": "list", "data": [{"id": served_name, "object": "model", "owned_by": "vllm"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        if stats["sleeping"]:
            stats["calls_while_asleep"] += 1
        await awake.wait()  # vLLM's paused scheduler: accepted, not scheduled
        stats["in_flight"] += 1
        task = asyncio.current_task()
        assert task is not None
        running.add(task)
        try:
            await asyncio.sleep(float(faults.get("chat_delay_s", 0.0)))
        except asyncio.CancelledError:
            stats["aborted"] += 1
            return JSONResponse({"error": {"message": "aborted by a sleep"}}, status_code=500)
        finally:
            stats["in_flight"] -= 1
            running.discard(task)
        stats["completions"] += 1
        return _completion(body.get("model", served_name))

    async def sleep(request: Request) -> Any:
        level = int(request.query_params.get("level", 1))
        mode = request.query_params.get("mode", "abort")
        stats["sleep_modes"].append(mode)
        if faults.get("refuse_sleep_while_busy") and stats["in_flight"]:
            return JSONResponse({"error": "busy"}, status_code=409)
        if mode == "abort":
            for task in list(running):
                task.cancel()
        else:
            while stats["in_flight"]:
                await asyncio.sleep(0.005)
        awake.clear()
        stats.update(sleeping=True, level=level, sleeps=stats["sleeps"] + 1)
        return {"status": "sleeping", "level": level}

    async def wake_up(request: Request) -> Any:
        if faults.get("die_on_wake"):
            await asyncio.sleep(0.05)
            os._exit(1)  # the server died during the wake
        await asyncio.sleep(float(faults.get("wake_delay_s", 0.0)))
        stats.update(sleeping=False, wakes=stats["wakes"] + 1)
        awake.set()
        return {"status": "awake", "tags": None}

    async def is_sleeping(request: Request) -> Any:
        return {"is_sleeping": stats["sleeping"]}

    async def collective_rpc(request: Request) -> Any:
        if (await request.json()).get("method") == "reload_weights":
            stats["reloads"] += 1
        return JSONResponse(None)

    async def server_info(request: Request) -> Any:
        # vLLM 0.32.0's /server_info?config_format=json: its CPU build says {"device": "cpu"}
        return {"vllm_config": {"device_config": {"device": faults.get("device", "cuda")},
                                "model_config": {"enable_sleep_mode": faults.get("enable_sleep_mode", True)}}}

    app.add_api_route("/sleep", dev(sleep), methods=["POST"])
    app.add_api_route("/wake_up", dev(wake_up), methods=["POST"])
    app.add_api_route("/is_sleeping", dev(is_sleeping), methods=["GET"])
    app.add_api_route("/collective_rpc", dev(collective_rpc), methods=["POST"])
    app.add_api_route("/server_info", dev(server_info), methods=["GET"])

    @app.post("/_faults")
    async def set_faults(request: Request) -> Any:
        faults.update(await request.json())
        return faults

    @app.get("/_stats")
    async def read_stats() -> Any:
        return stats

    @app.post("/_reset")
    async def reset() -> Any:
        """No faults, awake, counters from zero (one process serves a module's tests)."""
        faults.clear()
        stats.update(sleeping=False, level=None, sleeps=0, wakes=0, reloads=0, completions=0, calls_while_asleep=0,
                     aborted=0, sleep_modes=[])
        awake.set()
        return stats

    return app


class FakeSleepingVllm:
    """The fake server as a child process; `base_url` ends in /v1."""

    def __init__(self, port: int, served_name: str = "fake-judge", **faults: Any) -> None:
        self.port, self.served_name = port, served_name
        args = [sys.executable, "-m", "tests.support.fake_vllm_sleep", "--port", str(port), "--served-name", served_name]
        for key, value in faults.items():
            args += ["--fault", f"{key}={value}"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
        # its output to a file (a pipe nobody reads could fill and block it)
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(args, env=env, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_healthy(f"http://127.0.0.1:{port}", self.proc, timeout_s=60, poll_s=0.05, path="/health")
        except RuntimeError as err:
            self.log.seek(0)
            raise RuntimeError(f"{err}\n{self.log.read().decode(errors='replace')[-2000:]}") from None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def faults(self, **faults: Any) -> None:
        httpx.post(f"http://127.0.0.1:{self.port}/_faults", json=faults, timeout=5).raise_for_status()

    def reset(self) -> None:
        httpx.post(f"http://127.0.0.1:{self.port}/_reset", timeout=5).raise_for_status()

    def stats(self) -> dict[str, Any]:
        return httpx.get(f"http://127.0.0.1:{self.port}/_stats", timeout=5).json()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _value(text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    try:
        return float(text)
    except ValueError:
        return text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-name", default="fake-judge")
    parser.add_argument("--fault", action="append", default=[], help="KEY=VALUE")
    args = parser.parse_args()
    faults = {k: _value(v) for k, _, v in (f.partition("=") for f in args.fault)}
    uvicorn.run(make_app(args.served_name, faults), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
