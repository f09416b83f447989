"""Yes/no judges: the reward is read from the first answer token's top logprobs.

An answer absent from the top-K is bounded, not zero (parsers/yes_no.py): `details` then carry
`bounded_answer` and `bound`, and `logprob_yes` / `logprob_no` hold the bound's log, so every
consumer of the details (cosmos-rl's yes_logit / no_logit) gets a number.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import JudgeConfig, YesNoOptions
from ..parsers import ParseError, parse_yes_no
from ..schema import ErrorCode
from .base import JudgeFailure, ScoreContext, Verdict
from .vlm import VLMJudge, media_body

if TYPE_CHECKING:
    from ..backends import BackendPool
    from ..schema import SampleInput


class YesNoJudge(VLMJudge):
    def __init__(self, name: str, cfg: JudgeConfig, pool: "BackendPool") -> None:
        super().__init__(name, cfg, pool)
        assert isinstance(cfg.options, YesNoOptions)  # typed at config load (config.kinds)
        self.options = cfg.options
        t = self.template
        assert t.positive in ("yes", "no")
        self.positive = t.positive
        self.yes_words = t.yes_words or ("yes",)
        self.no_words = t.no_words or ("no",)

    async def evaluate(self, sample: "SampleInput", ctx: ScoreContext) -> Verdict:
        messages, media_facts = await self.build_messages(sample, ctx)
        answer, top = await ask_one_token(self.pool, messages, self.media_affinity(sample, ctx),
                                          self.options.top_logprobs, media_facts, body=media_body(media_facts))
        try:
            result = parse_yes_no(
                top,
                positive=self.positive,
                yes_words=self.yes_words,
                no_words=self.no_words,
                min_answer_mass=self.options.min_answer_mass,
                counting=self.options.counting,
            )
        except ParseError as exc:
            details = {**exc.details, **media_facts, "answer_token": answer}
            raise JudgeFailure(exc.code, str(exc), details=details) from None
        details = {**result.details(), **media_facts, "answer_token": answer,
                   "top_logprobs": self.options.top_logprobs}
        return Verdict(raw=result.p_positive, details=details)


async def ask_one_token(pool: "BackendPool", messages: list[dict], affinity: int | None, top_logprobs: int,
                        facts: dict | None = None, *, body: dict | None = None) -> tuple[str | None, list]:
    """One greedy token with its top-K logprobs: (the token, its candidates). JudgeFailure
    (parse_error) when the backend returns no logprobs; `facts` go into its details; `body`: the
    request's other fields (vlm.media_body: a JPEG frame list's media_io_kwargs)."""
    completion = await pool.chat(
        messages=messages,
        affinity=affinity,
        max_completion_tokens=1,  # what vLLM reads as max_tokens; Flow-Factory sends this name
        temperature=0.0,
        logprobs=True,
        top_logprobs=top_logprobs,
        **({"extra_body": body} if body else {}),
    )
    content = _first_token_logprobs(completion)
    if not content:
        raise JudgeFailure(ErrorCode.parse_error, "the backend returned no logprobs for the answer token",
                           details=dict(facts or {}))
    first = content[0]
    return first.get("token"), first.get("top_logprobs")


def _first_token_logprobs(completion: dict) -> list[dict] | None:
    """`choices[0].logprobs.content` of a chat completion, or None when absent."""
    choices = completion.get("choices") or []
    if not choices:
        return None
    logprobs = choices[0].get("logprobs") or {}
    return logprobs.get("content") or None
