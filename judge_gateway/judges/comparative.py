"""Comparative judges: a group of samples judged by comparing them, pair by pair, on a VLM.

A group is the samples of a request that share a group_id (the samples without one are one
group). The first of a group's cells to run starts the group's comparisons (comparative_group.py)
and every member's cell awaits them; each member's reward comes from its comparisons, through the
configured aggregation. Each call shows two images (the template's two `<image>` markers, in the
order asked) and reads the verdict as the template says: the answer tag of a generated reply, or
P(yes) from one token's logprobs. A call that fails (unparsable, timed out, backend down) is
masked out of the aggregation, never counted as a tie; a member left with no valid comparison is
invalid with the commonest error code of its calls.

Refused before anything is scored (`refusal`): a group larger than `max_group_size`, whose
schedule would cost more calls than the budget the config was checked against. Invalid, with a
reason: a sibling schedule's group of one sample (`not_applicable`: nothing to compare it with),
a group whose samples have different prompts or different shown condition images (`bad_input`:
one comparison shows one caption and one source), a sample without the image or reference image
it needs (`bad_input`: the others are compared without it).

Cost: each image is encoded once per request (the media cache) and sent as the same bytes in
every comparison, so vLLM's multimodal cache processes it once; all calls of a group carry one
affinity, so they go to one replica and share its prefix cache (consecutive pairs of a schedule
share their first image, the prefix of the prompt).
"""

from __future__ import annotations

import asyncio
import random
import time
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..backends import BackendFault, call_deadline, deadline_at
from ..comparisons import REFERENCE, Call, orders_of, planned_calls
from ..config import ComparativeOptions, JudgeConfig
from ..media import MediaError
from ..parsers import ParseError, parse_answer_verdict, parse_yes_no
from ..schema import ErrorCode
from .base import JudgeFailure, ScoreContext, SharedTask, Verdict
from .comparative_group import GroupOutcome, GroupPlan, run_group
from .generative import MAX_REPLY_CHARS, generation_params
from .vlm import VLMJudge

if TYPE_CHECKING:
    from ..backends import BackendPool
    from ..media import EncodedImage
    from ..schema import SampleInput


class _GroupMedia:
    """A group's encoded images: each member's (None where it has none), the condition images the
    template shows, the reference image; a member that cannot be shown, with the reason."""

    def __init__(self) -> None:
        self.images: list[EncodedImage | None] = []
        self.conditions: list[EncodedImage] = []
        self.reference: EncodedImage | None = None
        self.unusable: dict[int, str] = {}


class ComparativeJudge(VLMJudge):
    probe_group_size = 2  # a sibling schedule compares two samples at least

    def __init__(self, name: str, cfg: JudgeConfig, pool: "BackendPool") -> None:
        super().__init__(name, cfg, pool)
        assert isinstance(cfg.options, ComparativeOptions)  # typed at config load (config.kinds)
        self.options: ComparativeOptions = cfg.options
        assert self.template.verdict is not None  # a comparative template (config load checks the kind)
        self.verdict = self.template.verdict
        self.schedule = self.options.schedule_spec()
        # deadline_s bounds each call; a cell waits for its group, which ends by group_deadline_s.
        self.call_deadline_s = cfg.deadline_s
        self.deadline_s = None
        self.shown_conditions = self.template.media_slots.count("condition_image")

    @property
    def media(self) -> tuple[str, ...]:
        takes_conditions = self.shown_conditions > 0 or self.schedule.name == "reference"
        return ("image", "condition_image") if takes_conditions else ("image",)

    # -- before scoring ------------------------------------------------------------------------------
    def refusal(self, samples: Sequence["SampleInput"]) -> str | None:
        sizes = Counter(s.group_id for s in samples)
        limit = self.options.max_group_size
        over = [(g, n) for g, n in sizes.items() if n > limit]
        if not over:
            return None
        group, n = over[0]
        which = "the samples without a group_id" if group is None else f"group {group!r}"
        calls = planned_calls(self.schedule, n, self.options.swap)
        return (f"judge {self.name!r}: {which} has {n} samples; it compares groups of at most max_group_size = "
                f"{limit} (budget = {self.options.budget} calls; {self.schedule.name} with swap = "
                f"{self.options.swap!r} would make {calls} calls for {n}): split the group or raise the limits")

    def backend_calls(self, samples: Sequence["SampleInput"]) -> int:
        """Each group's planned comparisons (its schedule, both orders with swap), at most budget."""
        sizes = Counter(s.group_id for s in samples)
        return sum(min(planned_calls(self.schedule, n, self.options.swap), self.options.budget)
                   for n in sizes.values())

    # -- a member's cell -------------------------------------------------------------------------------
    async def evaluate(self, sample: "SampleInput", ctx: ScoreContext) -> Verdict:
        groups = ctx.shared.get(("comparative groups", id(self)))
        if groups is None:  # once per request: each group's members, and each sample's place in its group
            groups = ctx.shared[("comparative groups", id(self))] = _groups_of(ctx.samples)
        members, index = groups.get(id(sample), ([sample], 0))  # a sample outside the request: its own group
        key = ("comparative", id(self), sample.group_id)
        shared = ctx.shared.get(key)
        if shared is None:
            shared = ctx.shared[key] = SharedTask(asyncio.ensure_future(self._score_group(members, ctx)))
        result: _GroupResult = await shared.wait()
        return result.verdict_of(index, sample.group_id)

    # -- the group ---------------------------------------------------------------------------------------
    async def _score_group(self, members: list["SampleInput"], ctx: ScoreContext) -> "_GroupResult":
        # The group ends by its deadline, or the request's (a cosmos-rl request's own), if earlier.
        deadline = time.monotonic() + self.options.group_deadline_s
        if (request_deadline := call_deadline()) is not None:
            deadline = min(deadline, request_deadline)
        n = len(members)
        opts = self.options
        plan = GroupPlan(n=n, schedule=self.schedule, swap=opts.swap, swap_disagreement=opts.swap_disagreement,
                         one_order_failed=opts.one_order_failed, aggregation=opts.aggregation, budget=opts.budget,
                         min_coverage=opts.min_coverage, deadline_s=opts.group_deadline_s)
        if self.schedule.needs_siblings and n < 2:
            return _GroupResult.all_invalid(n, ErrorCode.not_applicable, f"a group of {n} sample has no sibling "
                                            f"to compare with (schedule {self.schedule.name!r})", plan)
        if self.schedule.needs_siblings and len({m.prompt for m in members}) > 1:
            return _GroupResult.all_invalid(n, ErrorCode.bad_input, "the group's samples have different prompts: "
                                            "a comparison judges two samples of one prompt", plan)
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                media = await self._group_media(members, ctx)
        except JudgeFailure as exc:
            return _GroupResult.all_invalid(n, exc.code, exc.message, plan)
        except TimeoutError:
            return _GroupResult.all_invalid(n, ErrorCode.timeout, "the group's images were not ready before its "
                                            f"deadline (group_deadline_s = {opts.group_deadline_s:g})", plan)
        usable = [i for i in range(n) if i not in media.unusable]
        if self.schedule.needs_siblings and len(usable) < 2:
            result = _GroupResult.all_invalid(n, ErrorCode.not_applicable, f"{len(usable)} of the group's {n} samples "
                                              "can be shown: nothing to compare them with", plan)
            for i, why in media.unusable.items():
                result.failures[i] = (ErrorCode.bad_input, why, {})
            return result
        # every call of the group goes to one replica (its prefix and multimodal caches)
        affinity = next((ctx.media.affinity(members[i].image) for i in usable if members[i].image is not None), None)

        async def ask(first: int, second: int) -> Call:
            # the schedule numbers the usable members 0..m-1; the media are the group's
            call = await self._ask(members, media, _to(usable, first), _to(usable, second), affinity)
            return Call(first, second, call.p_first, call.error, call.message)

        seed = self.options.seed ^ zlib.crc32("\0".join(m.prompt for m in members).encode())
        outcome = await run_group(replace(plan, n=len(usable)), ask, random.Random(seed), deadline)
        return _GroupResult.of(n, usable, media.unusable, outcome, self)

    async def _image(self, member: "SampleInput", ctx: ScoreContext) -> "EncodedImage":
        if member.image is not None:
            return await ctx.media.image(member.image, self.image_encoding)
        if self.video_first_frame and member.video is not None:
            return await ctx.media.first_frame(member.video, self.image_encoding)
        alternative = " (or a video, compared by its first frame)" if self.video_first_frame else ""
        raise JudgeFailure(ErrorCode.bad_input, f"judge {self.name!r} compares images: the sample has none{alternative}")

    async def _group_media(self, members: list["SampleInput"], ctx: ScoreContext) -> _GroupMedia:
        """Encode what the comparisons show; a member without its image or reference is set aside."""
        media = _GroupMedia()
        ref_index = self.options.reference_index
        shown: list[tuple[int, ...]] = []
        encoded = await asyncio.gather(*(self._image(m, ctx) for m in members), return_exceptions=True)
        for i, (member, image) in enumerate(zip(members, encoded)):
            if isinstance(image, BaseException):
                if not isinstance(image, (JudgeFailure, MediaError)):
                    raise image
                media.images.append(None)
                media.unusable[i] = image.message if isinstance(image, JudgeFailure) else \
                    f"its image cannot be read: {image}"
                continue
            media.images.append(image)
            needed = max(self.shown_conditions, ref_index + 1 if self.schedule.name == "reference" else 0)
            if len(member.condition_images) < needed:
                what = (f"its reference image, condition_images[{ref_index}]" if self.schedule.name == "reference"
                        else f"{self.shown_conditions} condition image(s) the template shows")
                media.unusable[i] = f"judge {self.name!r} needs {what}; the sample has {len(member.condition_images)}"
                continue
            keys = [await ctx.media.content_id(c) for c in member.condition_images[:needed]]
            shown.append(tuple(keys))
        if len(set(shown)) > 1:
            raise JudgeFailure(ErrorCode.bad_input, "the group's samples have different condition images: its "
                               "comparisons show one source (and one reference) for the whole group")
        first = next((i for i in range(len(members)) if i not in media.unusable), None)
        if first is not None:
            conditions = members[first].condition_images
            media.conditions = [await ctx.media.image(c, self.image_encoding) for c in conditions[:self.shown_conditions]]
            if self.schedule.name == "reference":
                media.reference = await ctx.media.image(conditions[ref_index], self.image_encoding)
        return media

    def _request(self) -> dict[str, Any]:
        opts = self.options
        if self.verdict.read == "logprobs":
            return {"max_completion_tokens": 1, "temperature": 0.0, "logprobs": True, "top_logprobs": opts.top_logprobs}
        return generation_params(opts, self.template)

    async def _ask(self, members: list["SampleInput"], media: _GroupMedia, first: int, second: int,
                   affinity: int | None) -> Call:
        """One call: the two images in this order; every fault answered as a failed Call."""
        def image(i: int) -> "EncodedImage":
            enc = media.reference if i == REFERENCE else media.images[i]
            assert enc is not None
            return enc

        sample = members[second if first == REFERENCE else first]  # siblings share their prompt
        parts = {"image": [{"type": "image_url", "image_url": {"url": image(first).data_url}},
                           {"type": "image_url", "image_url": {"url": image(second).data_url}}]}
        if self.shown_conditions:
            parts["condition_image"] = [{"type": "image_url", "image_url": {"url": c.data_url}}
                                        for c in media.conditions]
        try:
            messages = self.template.render(sample.prompt, parts)
            if self.call_deadline_s is None:
                p_first = await self._verdict(messages, affinity)
            else:
                with deadline_at(time.monotonic() + self.call_deadline_s):
                    async with asyncio.timeout(self.call_deadline_s):
                        p_first = await self._verdict(messages, affinity)
        except JudgeFailure as exc:
            return Call(first, second, None, exc.code.value, exc.message)
        except ParseError as exc:
            return Call(first, second, None, exc.code, str(exc))
        except BackendFault as exc:
            return Call(first, second, None, exc.code, str(exc))
        except TimeoutError:
            return Call(first, second, None, ErrorCode.timeout.value,
                        f"no verdict within the judge's deadline of {self.call_deadline_s}s")
        return Call(first, second, p_first)

    async def _verdict(self, messages: list[dict], affinity: int | None) -> float:
        """P(first shown is better) of one call."""
        completion = await self.pool.chat(messages=messages, affinity=affinity, **self._request())
        choices = completion.get("choices") or []
        if self.verdict.read == "logprobs":
            content = ((choices[0].get("logprobs") or {}).get("content") or []) if choices else []
            if not content:
                raise JudgeFailure(ErrorCode.parse_error, "the backend returned no logprobs for the answer token")
            result = parse_yes_no(content[0].get("top_logprobs"), positive="yes", yes_words=self.template.yes_words,
                                  no_words=self.template.no_words, min_answer_mass=self.options.min_answer_mass,
                                  counting=self.options.counting)
            return result.p_positive if self.verdict.yes_means == "first" else 1.0 - result.p_positive
        message = (choices[0].get("message") or {}) if choices else {}
        text = message.get("content")
        if not isinstance(text, str) or not text:
            raise JudgeFailure(ErrorCode.parse_error, "the backend returned an empty reply")
        try:
            verdict = parse_answer_verdict(text, first=self.verdict.first, second=self.verdict.second,
                                           tie=self.verdict.tie, tag=self.verdict.tag)
        except ParseError as exc:
            cut = " (the reply was cut by max_tokens)" if choices[0].get("finish_reason") == "length" else ""
            raise JudgeFailure(exc.code, f"{exc}{cut}; reply starts {text[:MAX_REPLY_CHARS][:80]!r}") from None
        return verdict.p_first


def _groups_of(samples: Sequence["SampleInput"]) -> dict[int, tuple[list["SampleInput"], int]]:
    """id(sample) -> (its group's members in request order, its index among them)."""
    members: dict[str | None, list["SampleInput"]] = {}
    for sample in samples:
        members.setdefault(sample.group_id, []).append(sample)
    return {id(s): (group, i) for group in members.values() for i, s in enumerate(group)}


def _to(usable: list[int], i: int) -> int:
    return i if i == REFERENCE else usable[i]


class _GroupResult:
    """What each member's cell reads: its verdict, or the reason it has none."""

    def __init__(self, n: int, report: dict[str, Any]) -> None:
        self.report = report
        self.verdicts: list[Verdict | None] = [None] * n
        self.failures: list[tuple[ErrorCode, str, dict[str, Any]] | None] = [None] * n

    @classmethod
    def all_invalid(cls, n: int, code: ErrorCode | str, message: str, plan: GroupPlan) -> "_GroupResult":
        report = {"size": n, "schedule": plan.schedule.describe(), "swap": plan.swap, "aggregation": plan.aggregation,
                  "budget": plan.budget, "calls_planned": planned_calls(plan.schedule, n, plan.swap),
                  "calls": {"asked": 0, "made": 0, "valid": 0, "failed": {}},
                  "comparisons": {"done": 0, "masked": 0, "failed": 0}, "error": message}
        result = cls(n, report)
        result.failures = [(ErrorCode(code), message, {}) for _ in range(n)]
        return result

    @classmethod
    def of(cls, n: int, usable: list[int], unusable: dict[int, str], outcome: GroupOutcome,
           judge: ComparativeJudge) -> "_GroupResult":
        report = {**outcome.report, "size": n, "compared": len(usable)}
        if unusable:
            report["set_aside"] = {str(i): why for i, why in unusable.items()}
        result = cls(n, report)
        for i, why in unusable.items():
            result.failures[i] = (ErrorCode.bad_input, why, {})
        group_code = ErrorCode(outcome.main_code())
        for k, i in enumerate(usable):
            member = outcome.members[k]
            pairs = [[_to(usable, o.b if o.a == k else o.a), o.status, None if o.score_a is None else o.score_of(k)]
                     for o in outcome.outcomes if k in (o.a, o.b)]
            facts = {"compared": member.compared, "wins": member.decisive_wins, "ties": member.ties,
                     "losses": member.losses, "win_share": member.wins, "pairs": pairs, **member.extra}
            if outcome.below_coverage:
                result.failures[i] = (group_code, f"the group's coverage {outcome.report['coverage']:.2f} is below "
                                      f"min_coverage = {outcome.report['min_coverage']:g}: its rewards would rest on "
                                      f"too few comparisons", facts)
            elif member.reward is None:
                code = ErrorCode(outcome.main_code(k))
                why = ("every comparison of this sample was masked (its two orders disagreed, or one failed)"
                       if not outcome.codes_by_member[k] else "no comparison of this sample gave a valid verdict")
                result.failures[i] = (code, why, facts)
            else:
                result.verdicts[i] = Verdict(raw=member.reward, details=facts)
        judge_facts = {"orders_per_pair": orders_of(judge.options.swap), "read": judge.verdict.read}
        result.report.update(judge_facts)
        return result

    def verdict_of(self, index: int, group_id: str | None) -> Verdict:
        where = {"group": {**self.report, "group_id": group_id}, "group_index": index}
        failure = self.failures[index]
        if failure is not None:
            code, message, facts = failure
            raise JudgeFailure(code, message, details={**facts, **where})
        verdict = self.verdicts[index]
        assert verdict is not None
        return Verdict(raw=verdict.raw, details={**verdict.details, **where})
