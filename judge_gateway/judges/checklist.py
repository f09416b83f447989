"""Checklist judges: N yes/no probes on one medium (VisionReward's 29 weighted questions per video),
one one-token request each, read as the yes/no kind reads its answer (parsers/yes_no.py).

The medium comes first in every probe's prompt and the probes share everything up to their
question, so vLLM computes the medium's tokens once for the N requests (prefix cache), and the
backend sends them to one replica (media affinity). A probe with weight 0 is not asked.

Each probe's P(good answer), P(yes), P(no) and answer mass are in `details.probes`; the reward is
the weighted mean of P(good) over the probes that answered: the weighted sum, divided by the
weights' sum, so a probe that failed never pulls the reward towards 0. A probe fails alone (its
error code in details, `missing` lists it) unless `missing_policy = "invalid"`; fewer answered
probes than `min_answered`, or none, makes the score invalid. `details.signed_score` is
VisionReward's score (THUDM/VisionReward inference-video.py `score`: mean of weight x (+1 yes /
-1 no)) with P(yes) in place of the hard answer, over the answered probes.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..backends import BackendFault
from ..config import ChecklistOptions, JudgeConfig
from ..parsers import ParseError, parse_yes_no
from ..schema import ErrorCode
from .aspects import AspectWeights
from .base import JudgeFailure, ScoreContext, Verdict
from .vlm import VLMJudge, media_body
from .yes_no import ask_one_token

if TYPE_CHECKING:
    from ..backends import BackendPool
    from ..prompts import Aspect
    from ..schema import SampleInput


class ChecklistJudge(VLMJudge):
    def __init__(self, name: str, cfg: JudgeConfig, pool: BackendPool) -> None:
        super().__init__(name, cfg, pool)
        assert isinstance(cfg.options, ChecklistOptions)  # typed at config load (config.kinds)
        self.options = cfg.options
        t = self.template
        self.weighting = AspectWeights(t, self.options, missing_default="skip")
        # Asked: the probes with a weight (a probe weighted 0 costs a request and changes nothing).
        self.probes = [p for p in t.aspects if self.weighting.weights.get(p.name, 0.0) > 0]
        self.yes_words = t.yes_words or ("yes",)
        self.no_words = t.no_words or ("no",)

    async def _probe(self, probe: Aspect, prompt: str, parts: dict, affinity: int | None,
                     body: dict[str, Any]) -> dict[str, Any]:
        assert probe.question is not None and probe.positive is not None
        question = probe.question.replace("{prompt}", prompt)  # template data: the sample's prompt in it
        messages = self.template.render(prompt, parts, question=question)
        try:
            answer, top = await ask_one_token(self.pool, messages, affinity, self.options.top_logprobs, body=body)
            result = parse_yes_no(top, positive=probe.positive, yes_words=self.yes_words, no_words=self.no_words,
                                  min_answer_mass=self.options.min_answer_mass, counting=self.options.counting)
        except JudgeFailure as exc:
            return {"valid": False, "error": {"code": exc.code.value, "message": exc.message}}
        except ParseError as exc:
            return {"valid": False, "error": {"code": exc.code, "message": str(exc)}, **exc.details}
        except BackendFault as exc:
            return {"valid": False, "error": {"code": ErrorCode(exc.code).value, "message": str(exc)}}
        return {"valid": True, "p_positive": result.p_positive, "p_yes": result.p_yes, "p_no": result.p_no,
                "answer_mass": result.answer_mass, "positive": result.positive, "answer_token": answer,
                "bounded_answer": result.bounded_answer}

    async def evaluate(self, sample: SampleInput, ctx: ScoreContext) -> Verdict:
        parts, facts = await self.media_parts(sample, ctx)
        affinity = self.media_affinity(sample, ctx)
        body = media_body(facts)
        results = await asyncio.gather(*(self._probe(p, sample.prompt, parts, affinity, body) for p in self.probes))
        probes = {p.name: {"question": p.question, "weight": self.weighting.weights[p.name], **r}
                  for p, r in zip(self.probes, results)}
        scores = {name: r["p_positive"] for name, r in probes.items() if r["valid"]}
        missing = [name for name, r in probes.items() if not r["valid"]]
        base = {**facts, "probes": probes, "probe_scores": scores, "missing": missing,
                "answered": len(scores), "asked": len(probes)}
        if not scores:
            codes = {r["error"]["code"] for r in probes.values()}
            # Every probe failed the same way (the backend is down, say): that is the sample's error.
            code = ErrorCode(codes.pop()) if len(codes) == 1 else ErrorCode.answer_missing
            raise JudgeFailure(code, f"no probe of {len(probes)} was answered", details=base)
        if len(scores) < self.options.min_answered:
            raise JudgeFailure(ErrorCode.answer_missing, f"{len(scores)} of {len(probes)} probes answered, fewer "
                               f"than min_answered = {self.options.min_answered}", details=base)
        if missing and self.weighting.missing_policy == "invalid":
            first = probes[missing[0]]["error"]
            raise JudgeFailure(ErrorCode(first["code"]), f"probe(s) {', '.join(missing)} not answered (missing_policy "
                               f"= invalid); {missing[0]}: {first['message']}", details=base)
        try:
            raw, used = self.weighting.aggregate(scores, missing)
        except JudgeFailure as exc:
            exc.details.update(base)
            raise
        signed = sum(used[n] * (2 * scores[n] - 1) for n in used) / len(used)
        details = {**base, **self.weighting.details(used), "signed_score": signed}
        return Verdict(raw=raw, details=details)  # a mean of probabilities: the reward as it is
