"""The `X-Judge-Gateway-Residency: sleep` header of a scoring request (native /v1/rewards,
Flow-Factory /compute): once its response is sent, the colocated judges it scored go to sleep, so
the last reward call of a step needs no extra call to give the trainer its device back.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from fastapi import Request
from starlette.background import BackgroundTask

from ..exceptions import InvalidInput

log = logging.getLogger(__name__)
RESIDENCY_HEADER = "x-judge-gateway-residency"
HEADER_VALUES = ("sleep",)


class BadResidencyHeader(InvalidInput):
    """An X-Judge-Gateway-Residency value the gateway does not know."""


def sleep_after(request: Request) -> bool:
    """Whether the request asks its colocated judges to sleep once it is answered (raises
    BadResidencyHeader for a value other than `sleep`)."""
    value = request.headers.get(RESIDENCY_HEADER)
    if value is None:
        return False
    if value.strip().lower() not in HEADER_VALUES:
        raise BadResidencyHeader(f"X-Judge-Gateway-Residency: {value[:40]!r} is not one of {', '.join(HEADER_VALUES)}")
    return True


def sleep_task(request: Request, judges: Sequence[str], trigger: str = "header") -> BackgroundTask | None:
    """The background task that puts the request's colocated judges to sleep after its response."""
    residency = request.app.state.gateway.residency
    chosen = [j for j in judges if j in residency.by_judge]
    if not chosen:
        return None

    async def put_to_sleep() -> None:
        results = await residency.sleep(chosen, trigger)  # type: ignore[arg-type]
        for judge, result in results.items():
            if result["outcome"] in ("refused", "failed"):
                log.warning("judge %s: the sleep a request asked for %s: %s", judge, result["outcome"],
                            result.get("reason"))

    return BackgroundTask(put_to_sleep)


def chained(*tasks: BackgroundTask | None) -> BackgroundTask | None:
    """One background task running the given ones in order (a response takes one)."""
    present = [t for t in tasks if t is not None]
    if len(present) <= 1:
        return present[0] if present else None

    async def run_all() -> None:
        for task in present:
            await task()

    return BackgroundTask(run_all)
