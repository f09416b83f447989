"""A stand-in for a backend pool's `chat` that answers by the question asked: the unit tests of the
judges that send several questions per sample (checklist, answer_probability) and of the reply
parsers' judges script what each question gets. Real scoring runs against the real vLLM
(tests/integration).

An answer is either text (a generated reply), a list of (token, probability) pairs: the first
token's top logprobs, listed in that order, the first pair being the token generated, or a whole
chat completion (a dict, returned as it is: a reply with logprobs at every token). A question
with no script is answered with an HTTP-like fault so a test sees it was not expected.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from judge_gateway.backends import BackendFault, BackendUnavailable

Answer = str | list[tuple[str, float]] | dict[str, Any]


def logprob_completion(pairs: list[tuple[str, float]]) -> dict[str, Any]:
    top = [{"token": t, "logprob": math.log(p) if p > 0 else -9999.0} for t, p in pairs]
    return {"choices": [{"message": {"role": "assistant", "content": pairs[0][0]}, "finish_reason": "length",
                         "logprobs": {"content": [{**top[0], "top_logprobs": top}]}}]}


def text_completion(text: str, finish: str = "stop") -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            "usage": {"completion_tokens": max(1, len(text) // 4)}}


def question_of(messages: list[dict]) -> str:
    """The text of the user turn (its text parts joined)."""
    user = messages[-1]["content"]
    return "".join(p["text"] for p in user if p.get("type") == "text") if isinstance(user, list) else user


class ScriptedChat:
    """`chat(**request)` answering by the user text: `script(question_text)` -> Answer, or a
    BackendFault to raise."""

    def __init__(self, script: Callable[[str], Answer | BackendFault]) -> None:
        self.script = script
        self.calls: list[dict[str, Any]] = []

    async def chat(self, **request: Any) -> dict[str, Any]:
        self.calls.append(request)
        answer = self.script(question_of(request["messages"]))
        if isinstance(answer, BackendFault):
            raise answer
        if isinstance(answer, dict):
            return answer
        return text_completion(answer) if isinstance(answer, str) else logprob_completion(answer)


def score_scripted(cfg: dict, judge: str, sample: Any, script: Callable[[str], Answer | BackendFault]):
    """The configured judge `judge` of a gateway built from `cfg` scores `sample`, its backend
    answering by `script`: (the JudgeScore, the requests sent)."""
    import asyncio

    from judge_gateway.config import validate_config
    from judge_gateway.gateway import Gateway
    from judge_gateway.judges import ScoreContext
    from judge_gateway.media import MediaCache

    gw = Gateway(validate_config(cfg))
    scorer = gw.judges[judge]
    chat = ScriptedChat(script)
    scorer.pool.chat = chat.chat

    async def go():
        try:
            return await scorer.score(sample, ScoreContext(media=MediaCache(), request_id="scripted"))
        finally:
            await gw.aclose()
    return asyncio.run(go()), chat.calls


def down(message: str = "503 from the backend") -> BackendFault:
    return BackendUnavailable(message)
