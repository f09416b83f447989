"""A hand-written OpenAI-compatible server for fault injection only.

The behaviour is chosen by the requested model name, so one server can play several broken
backends at once. Real scoring is tested against the real vLLM (tests/integration).

- `fake-yes` / `fake-no`: a one-token answer whose top logprobs favour Yes / No.
- `fake-sure-no`: a judge so sure of "No" that no Yes variant is in its top logprobs.
- `fake-no-answer`: top logprobs that hold neither Yes nor No.
- `fake-no-logprobs`: an answer without logprobs.
- `fake-rubric-garbage`: a reply with no rubric in it.
- `fake-rubric-ok`: a well-formed RationalRewards-style reply (3 aspects).
- `fake-final-4`: a reply ending in `Final Score: 4`.
- `fake-stall`: answers only after `stall_s` seconds; a caller that hangs up first is counted in
  `counters["stall_disconnected"]` (and the handler stops), one that waits in `stall_answered`.
- `fake-flaky`: fails with 503 the first `flaky_failures` times per process, then answers like fake-yes.
- `fake-down`: fails with 503 for `down_s` seconds from its first request (a backend restarting behind
  a proxy), then answers like fake-yes.
- `fake-400`: a 400 error.
- `fake-critic-ok`: a conforming cosmos_reason1_critic@1 critique after `<think>` reasoning.
- `fake-critic-nonconforming`: JSON that breaks the critic schema (a word for a score, a section missing).
- `fake-p-from-image`: P(Yes) = the mean pixel value / 255 of the first image sent (a flat gray
  image of value v scores v / 255), P(No) the rest: a judge whose scores a test chooses.
- `fake-compare`: a comparative judge (unified_reward_think@1's form): of the last two images
  sent, the brighter is better (`<answer>Image 1 is better</answer>` / Image 2); a pair of two dark
  images (both means below 16) is never answered (it stalls as `fake-stall` does).
- `fake-compare-garbage`: a comparative reply with no `<answer>` in it.

Every request body is kept in `counters["bodies"]` (the last 100), for tests of what was sent.
"""

from __future__ import annotations

import asyncio
import math
import socket
import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tests.support.critiques import FAKE_CRITIC_NONCONFORMING, FAKE_CRITIC_OK

RUBRIC_OK = """# User Request Analysis
The user wants a red bicycle leaning on a wall.
# Detailed Judgement
1. Text Faithfulness:
## Justification: The bicycle is red and leans on a brick wall; a 2 out of 4 would be too harsh.
## Score: 3.5
2. Physical and Visual Quality:
## Justification: Clean shading, one spoke slightly bent.
## Score: 3.0
3. Text Rendering:
## Justification: No text was requested.
## Score: N/A
"""


def _logprob_content(pairs: list[tuple[str, float]]) -> dict[str, Any]:
    top = [{"token": t, "logprob": math.log(p), "bytes": list(t.encode())} for t, p in pairs]
    return {"content": [{"token": pairs[0][0], "logprob": math.log(pairs[0][1]),
                         "bytes": list(pairs[0][0].encode()), "top_logprobs": top}]}


def _completion(model: str, text: str, logprobs: dict[str, Any] | None = None,
                finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "logprobs": logprobs, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


SURE_NO_TOP = [("No", 0.97), ("The", 0.012), ("A", 0.008)]

MODELS = ["fake-yes", "fake-no", "fake-sure-no", "fake-no-answer", "fake-no-logprobs", "fake-rubric-garbage",
          "fake-rubric-ok", "fake-final-4", "fake-stall", "fake-flaky", "fake-down", "fake-400", "fake-critic-ok",
          "fake-critic-nonconforming", "fake-p-from-image", "fake-compare", "fake-compare-garbage"]


def _first_image_mean(body: dict[str, Any]) -> float:
    import base64
    import io

    import numpy as np
    from PIL import Image

    for message in body.get("messages", []):
        content = message.get("content")
        for part in content if isinstance(content, list) else []:
            if part.get("type") == "image_url":
                data = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
                return float(np.asarray(Image.open(io.BytesIO(data)).convert("L"), dtype=float).mean())
    raise ValueError("no image in the request")


def _image_means(body: dict[str, Any]) -> list[float]:
    import base64
    import io

    import numpy as np
    from PIL import Image

    means = []
    for message in body.get("messages", []):
        content = message.get("content")
        for part in content if isinstance(content, list) else []:
            if part.get("type") == "image_url":
                data = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
                means.append(float(np.asarray(Image.open(io.BytesIO(data)).convert("L"), dtype=float).mean()))
    return means


def make_app(stall_s: float = 30.0, flaky_failures: int = 1, down_s: float = 0.0) -> FastAPI:
    app = FastAPI()
    state: dict[str, Any] = {"flaky": 0, "requests": 0, "inflight": 0, "max_inflight": 0, "bodies": [],
                             "stall_disconnected": 0, "stall_answered": 0, "down_since": None, "down_refused": 0}
    app.state.counters = state

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "fake"} for m in MODELS]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        state["requests"] += 1
        state["bodies"] = [*state["bodies"][-99:], body]
        model = body.get("model", "")
        if model == "fake-compare":
            first, second = _image_means(body)[-2:]
            if max(first, second) >= 16:
                winner = 1 if first >= second else 2
                return _completion(model, f"<think>brightness</think>\n<answer>Image {winner} is better</answer>")
            model = "fake-stall"  # a dark pair: never answered
        if model == "fake-compare-garbage":
            return _completion(model, "Both images have their merits; I cannot decide.")
        if model == "fake-stall":
            state["inflight"] += 1
            state["max_inflight"] = max(state["max_inflight"], state["inflight"])
            try:
                deadline = time.monotonic() + stall_s
                while time.monotonic() < deadline:
                    if await request.is_disconnected():  # the caller cancelled its request
                        state["stall_disconnected"] += 1
                        return JSONResponse({"error": {"message": "client gone"}}, status_code=499)
                    await asyncio.sleep(0.02)
            finally:
                state["inflight"] -= 1
            state["stall_answered"] += 1
            return _completion(model, "Yes", _logprob_content([("Yes", 0.9), ("No", 0.1)]))
        if model == "fake-flaky":
            if state["flaky"] < flaky_failures:
                state["flaky"] += 1
                return JSONResponse({"error": {"message": "overloaded"}}, status_code=503)
            return _completion(model, "Yes", _logprob_content([("Yes", 0.7), ("No", 0.2)]))
        if model == "fake-down":
            if state["down_since"] is None:
                state["down_since"] = time.monotonic()
            if time.monotonic() - state["down_since"] < down_s:
                state["down_refused"] += 1
                return JSONResponse({"error": {"message": "restarting"}}, status_code=503)
            return _completion(model, "Yes", _logprob_content([("Yes", 0.7), ("No", 0.2)]))
        if model == "fake-400":
            return JSONResponse({"error": {"message": "bad request from fake"}}, status_code=400)
        if model == "fake-p-from-image":
            p = min(max(_first_image_mean(body) / 255, 0.001), 0.999)
            return _completion(model, "Yes", _logprob_content([("Yes", p), ("No", 1 - p)]))
        if model == "fake-yes":
            return _completion(model, "Yes", _logprob_content([("Yes", 0.7), (" yes", 0.1), ("No", 0.15)]))
        if model == "fake-no":
            return _completion(model, "No", _logprob_content([("No", 0.8), ("Yes", 0.15)]))
        if model == "fake-sure-no":
            return _completion(model, "No", _logprob_content(SURE_NO_TOP))
        if model == "fake-no-answer":
            return _completion(model, "The", _logprob_content([("The", 0.6), ("Maybe", 0.3), ("Yesterday", 0.05)]))
        if model == "fake-no-logprobs":
            return _completion(model, "Yes", None)
        if model == "fake-rubric-garbage":
            return _completion(model, "I'm sorry, I cannot evaluate this image.")
        if model == "fake-rubric-ok":
            return _completion(model, RUBRIC_OK)
        if model == "fake-final-4":
            return _completion(model, "The image matches the caption well.\nFinal Score: 4")
        if model == "fake-critic-ok":
            return _completion(model, FAKE_CRITIC_OK)
        if model == "fake-critic-nonconforming":
            return _completion(model, FAKE_CRITIC_NONCONFORMING)
        return JSONResponse({"error": {"message": f"model {model!r} not found"}}, status_code=404)

    return app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeOpenAIServer:
    """Runs the fake app with uvicorn in a thread; `base_url` ends in /v1."""

    def __init__(self, stall_s: float = 30.0, flaky_failures: int = 1, port: int | None = None,
                 down_s: float = 0.0) -> None:
        self.port = port or free_port()  # a port again: the same backend restarted
        self.app = make_app(stall_s=stall_s, flaky_failures=flaky_failures, down_s=down_s)
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def counters(self) -> dict[str, Any]:
        return self.app.state.counters

    def start(self) -> "FakeOpenAIServer":
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake OpenAI server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def kill(self) -> None:
        """Down at once: open requests are dropped, not answered (a killed vLLM server)."""
        self.server.force_exit = True
        self.stop()
