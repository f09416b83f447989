"""A gateway app served over real HTTP (uvicorn in a thread), for clients in other processes; or
to a client in the test's own event loop (asgi_client), for an app whose gateway lives there."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import uvicorn
from fastapi import FastAPI

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.support.fake_openai import free_port


class ServedGateway:
    """stop() runs the app's shutdown (lifespan), as a real stop does."""

    def __init__(self, data: dict, source: str = "<config>") -> None:
        """`source`: the config file `data` stands for (its folder is where relative paths start)."""
        self.gateway = Gateway(validate_config(copy.deepcopy(data), source=source))
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(create_app(self.gateway), host="127.0.0.1", port=self.port,
                                                    log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("gateway did not start")
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@asynccontextmanager
async def asgi_client(app: FastAPI, timeout: float = 600) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of create_app(gateway)'s app, in this event loop (no lifespan runs: the
    app's owner closes its cosmos-rl service, `app.state.cosmos_rl.aclose()`)."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost",
                                 timeout=timeout) as client:
        yield client
