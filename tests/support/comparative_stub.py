"""Comparative judges on a scripted judge, in process: flat gray images whose value is their true
quality, and a stub of the backend's `chat` that reads the two images of each call (the last two
of the user turn) and answers as a policy says, in the template's form (an `<answer>` reply, or
one token's logprobs). Used by the parity, position-bias and schedule tests; the HTTP fault
tests use the fake OpenAI server (tests/support/fake_openai.py) instead.
"""

from __future__ import annotations

import base64
import io
import math
import random
from collections.abc import Callable
from typing import Any

from PIL import Image

from judge_gateway.combine import group_transform
from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway

BACKEND = {"vlm": {"model": "stub", "base_urls": ["http://127.0.0.1:9/v1"]}}


def gray_png(value: int, size: int = 16) -> bytes:
    buf = io.BytesIO()
    Image.new("L", (size, size), value).convert("RGB").save(buf, format="PNG")
    return buf.getvalue()


def comparative_gateway(template: str = "unified_reward_think@1", **options: Any) -> Gateway:
    """A gateway with one comparative judge, `cmp`, on a backend that is never called (stub its
    pool's chat with `StubJudge.install`)."""
    options.setdefault("budget", 10_000)
    options.setdefault("max_group_size", 64)
    return Gateway(validate_config({"backends": BACKEND, "judges": {
        "cmp": {"kind": "comparative", "backend": "vlm", "template": template, "options": options}}}))


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


class StubJudge:
    """`policy(first_value, second_value) -> P(first shown is better)`; `mode`: "answer" draws a
    verdict from it (seeded) and replies `<think>...</think><answer>Image k is better</answer>`,
    "logprobs" replies one token whose P(yes) is P(second is better) (the templates' yes_means).
    `reply(first, second, text) -> str | None` (text: the user turn's text) overrides the answer
    (None: the policy's)."""

    def __init__(self, policy: Callable[[int, int], float], *, mode: str = "answer", seed: int = 0,
                 reply: Callable[[int, int, str], str | None] | None = None) -> None:
        self.policy = policy
        self.mode = mode
        self.rng = random.Random(seed)
        self.reply = reply
        self.calls: list[tuple[int, int]] = []  # (first value, second value) of each call
        self.shown: list[list[int]] = []  # every image of each call, in order (a source first)
        self.params: list[dict[str, Any]] = []
        self._values: dict[str, int] = {}

    def install(self, gateway: Gateway, judge: str = "cmp") -> "StubJudge":
        gateway.judges[judge].pool.chat = self.chat  # type: ignore[attr-defined, method-assign]
        return self

    def value(self, url: str) -> int:
        if url not in self._values:
            data = base64.b64decode(url.split(",", 1)[1])
            self._values[url] = Image.open(io.BytesIO(data)).convert("L").getpixel((0, 0))
        return self._values[url]

    async def chat(self, *, messages: list[dict], affinity: int | None = None, **params: Any) -> dict[str, Any]:
        images = [p["image_url"]["url"] for p in messages[-1]["content"] if p.get("type") == "image_url"]
        prompt_text = "".join(p["text"] for p in messages[-1]["content"] if p.get("type") == "text")
        self.shown.append([self.value(u) for u in images])
        first, second = self.shown[-1][-2:]
        self.calls.append((first, second))
        self.params.append({**params, "affinity": affinity})
        p_first = self.policy(first, second)
        if self.mode == "logprobs":
            p_yes = min(max(1.0 - p_first, 1e-6), 1 - 1e-6)
            top = [{"token": "Yes", "logprob": math.log(p_yes)}, {"token": "No", "logprob": math.log(1 - p_yes)}]
            return {"choices": [{"message": {"content": "Yes"}, "finish_reason": "length",
                                 "logprobs": {"content": [{"token": "Yes", "top_logprobs": top}]}}]}
        text = self.reply(first, second, prompt_text) if self.reply is not None else None
        if text is None:
            winner = 1 if self.rng.random() < p_first else 2
            text = f"<think>\n1. Semantic consistency: ...\n</think>\n<answer>Image {winner} is better</answer>"
        return {"choices": [{"message": {"content": text}, "finish_reason": "stop"}]}


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation: Pearson's of the average ranks (combine's `rank` transform);
    0 when either side has no spread."""
    rx = group_transform(xs, ["all"] * len(xs), "rank")
    ry = group_transform(ys, ["all"] * len(ys), "rank")
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return num / den if den else 0.0
