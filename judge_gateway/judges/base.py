"""The one interface every judge kind shares, and the bookkeeping around a single score."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..bands import band_of
from ..config import JudgeConfig, NormalizeConfig
from ..exceptions import ScoringFailed
from ..schema import ErrorCode, JudgeInfo, JudgeScore, TemplateRef
from .queue import JudgeQueue

if TYPE_CHECKING:
    from ..media import MediaCache
    from ..residency import ResidencyUnit, SleepDriver, WakeWait
    from ..schema import SampleInput

log = logging.getLogger(__name__)


class JudgeFailure(ScoringFailed):
    """Raised inside a judge to end one (sample, judge) cell with an invalid score."""

    def __init__(self, code: ErrorCode | str, message: str, *, details: dict[str, Any] | None = None,
                 raw: float | None = None) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message
        self.details = details or {}
        self.raw = raw


@dataclass
class ScoreContext:
    """What the judges of one request share: the media encoded once, the request id, the request's
    samples, and work several of its cells share (a groupwise head scores a group once: its key is
    (judge, group id), its value what the group's cells await)."""

    media: "MediaCache"
    request_id: str
    samples: Sequence["SampleInput"] = ()
    shared: dict[Hashable, Any] = field(default_factory=dict)


class SharedTask:
    """A task several cells await (a group scored once for all its members): cancelled only
    when every one of them has given up."""

    def __init__(self, task: asyncio.Future[Any]) -> None:
        self.task = task
        self.waiting = 0

    async def wait(self) -> Any:
        self.waiting += 1
        try:
            return await asyncio.shield(self.task)
        except asyncio.CancelledError:
            if self.waiting == 1:
                self.task.cancel()
            raise
        finally:
            self.waiting -= 1


@dataclass
class Verdict:
    """What a judge kind computes for one sample before the shared bookkeeping."""

    raw: float
    details: dict[str, Any] = field(default_factory=dict)
    # Kinds with a native scale map raw onto [0, 1] themselves unless config says otherwise.
    default_normalize: NormalizeConfig | None = None


class Judge(ABC):
    """A configured judge: scores one sample at a time and never raises."""

    kind: str  # the configured kind (config.kinds)
    _nonfinite_code: ErrorCode = ErrorCode.backend_error  # a NaN / inf verdict: whose fault it is
    # The bounded queue its work waits in (heads: one worker each); None: no queue of its own.
    queue: JudgeQueue | None = None
    # A colocated judge's unit (residency/): each score waits for it to be awake; None: resident.
    residency: "ResidencyUnit | None" = None

    def use_residency(self, unit: "ResidencyUnit") -> None:
        """Score through `unit` from now on (the gateway, for a colocated judge)."""
        self.residency = unit

    def residency_driver(self) -> "SleepDriver | None":
        """What puts this judge's own model to sleep (a head's worker); None: a VLM judge, whose
        backend's servers sleep (the gateway gives the backend one driver for all its judges)."""
        return None
    # How many samples `prepare`'s probe scores at once (a comparative judge needs a group).
    probe_group_size: int = 1

    def demand(self, sample: "SampleInput") -> tuple[int, int]:
        """(items, pixels) scoring `sample` adds to this judge's queue (judges with a queue)."""
        return 0, 0

    def refusal(self, samples: Sequence["SampleInput"]) -> str | None:
        """Why this judge can never score these samples as one request (a group over its budget),
        checked before anything is scored; None when it can."""
        return None

    def __init__(self, name: str, cfg: JudgeConfig) -> None:
        self.name = name
        self.kind = cfg.kind
        self.cfg = cfg
        self.weight = cfg.weight
        self.deadline_s = cfg.deadline_s

    def bands_for(self, details: dict[str, Any]) -> dict[str, float]:
        """The configured score bands, else none. (VLM judges, whose rewards are in [0, 1], add
        default ones for video; a head's score has its own scale, so it gets bands only when
        configured.)"""
        return self.cfg.bands if self.cfg.bands is not None else {}

    # Facts for the score and for GET /v1/judges.
    @property
    def model(self) -> str | None:
        return None

    @property
    def template_ref(self) -> TemplateRef | None:
        return None

    @property
    def media(self) -> tuple[str, ...]:
        return ()

    @property
    def backend_name(self) -> str | None:
        return None

    @abstractmethod
    async def evaluate(self, sample: "SampleInput", ctx: ScoreContext) -> Verdict:
        """Compute the raw number; raise JudgeFailure (or a known fault) for an invalid cell."""

    async def probe(self) -> tuple[bool, str | None]:
        return True, None

    async def check(self) -> tuple[bool, str | None]:
        """Readiness once whatever is loading has loaded (a head's model); else as `probe`."""
        return await self.probe()

    async def aclose(self) -> None:
        return None

    async def _evaluate_awake(self, sample: "SampleInput", ctx: ScoreContext, wake: "WakeWait | None") -> Verdict:
        """`evaluate`, once a colocated judge is awake (a wake that fails raises WakeFailed, a
        backend_unavailable cell with the reason); the unit counts it in flight meanwhile, so a
        sleep waits for it."""
        if self.residency is None:
            return await self.evaluate(sample, ctx)
        async with self.residency.use(wake):
            return await self.evaluate(sample, ctx)

    def info(self, ready: bool | None = None, reason: str | None = None) -> JudgeInfo:
        return JudgeInfo(
            name=self.name,
            kind=self.kind,
            weight=self.weight,
            backend=self.backend_name,
            model=self.model,
            template=self.template_ref,
            media=list(self.media),
            ready=ready,
            ready_reason=reason,
        )

    def _failure(self, code: ErrorCode | str, message: str, started: float, *,
                 details: dict[str, Any] | None = None, raw: float | None = None) -> JudgeScore:
        return JudgeScore.failure(
            self.name, ErrorCode(code), message, details=details, template=self.template_ref,
            model=self.model, latency_ms=(time.perf_counter() - started) * 1000.0, raw=raw,
        )

    async def score(self, sample: "SampleInput", ctx: ScoreContext) -> JudgeScore:
        """Score one sample; every failure becomes an invalid JudgeScore with its code."""
        from ..backends import BackendFault, deadline_at
        from ..media import MediaError
        from ..parsers import ParseError
        from ..residency import WakeWait

        started = time.perf_counter()
        wake = WakeWait(self.residency) if self.residency is not None else None
        try:
            if self.deadline_s is not None:
                # the backend's retries stop in time for it too (backends.deadline_at)
                with deadline_at(time.monotonic() + self.deadline_s):
                    async with asyncio.timeout(self.deadline_s):
                        verdict = await self._evaluate_awake(sample, ctx, wake)
            else:
                verdict = await self._evaluate_awake(sample, ctx, wake)
        except JudgeFailure as exc:
            return self._failure(exc.code, exc.message, started, details=exc.details, raw=exc.raw)
        except ParseError as exc:
            return self._failure(exc.code, str(exc), started, details=getattr(exc, "details", None))
        except BackendFault as exc:
            return self._failure(exc.code, str(exc), started)
        except MediaError as exc:
            return self._failure(ErrorCode.bad_input, str(exc), started)
        except TimeoutError:
            if wake is not None and wake.waiting:  # its time ran out waiting for the judge to wake
                return self._failure(ErrorCode.backend_unavailable, wake.why(), started)
            return self._failure(
                ErrorCode.timeout, f"no verdict within the judge's deadline of {self.deadline_s}s", started
            )
        except Exception as exc:  # a bug or an unforeseen fault stays inside this cell
            log.exception("judge %s failed on a sample", self.name)
            return self._failure(ErrorCode.backend_error, f"{type(exc).__name__}: {exc}", started)

        normalize = self.cfg.normalize or verdict.default_normalize
        reward = normalize.apply(verdict.raw) if normalize is not None else verdict.raw
        if not (math.isfinite(verdict.raw) and math.isfinite(reward)):
            # e.g. an fp16 head that overflowed: never a "valid" NaN / inf (JSON null)
            return self._failure(self._nonfinite_code, f"the judge produced a non-finite score "
                                 f"(raw={verdict.raw}, reward={reward})", started, details=verdict.details)
        bands = self.bands_for(verdict.details)
        if bands:
            verdict.details["band"] = band_of(reward, bands)
        return JudgeScore(
            judge=self.name,
            reward=reward,
            raw=verdict.raw,
            valid=True,
            details=verdict.details,
            template=self.template_ref,
            model=self.model,
            latency_ms=(time.perf_counter() - started) * 1000.0,
        )
