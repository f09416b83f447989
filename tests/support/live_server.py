"""Serve an ASGI app (the gateway's) over real HTTP on a free port, in a thread: for tests that
need a real socket, e.g. a client that disconnects mid-request."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn

from .fake_openai import free_port


class LiveServer:
    """`options`: more uvicorn.Config keywords, e.g. `judge_gateway.server.guards.uvicorn_options(cfg.server)`
    (what `judge-gateway serve` runs with)."""

    def __init__(self, app: Any, **options: Any) -> None:
        self.port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on", **options)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True, name="live-server")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "LiveServer":
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the gateway did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
