"""Scoring an accepted cosmos-rl request until its deadline: cosmos-rl's trainer trains on whatever
the pull returns (a fill included), so a cell that failed transiently is scored again, with
backoff, while the request's deadline allows."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time

from ...config import CosmosRLConfig
from ...gateway import Gateway
from ...schema import TRANSIENT_ERRORS, ErrorCode, JudgeScore, RewardRequest, SampleInput

log = logging.getLogger(__name__)


async def score_until_deadline(gateway: Gateway, cfg: CosmosRLConfig, uid: str, samples: list[SampleInput],
                               judges: list[str], deadline: float) -> dict[str, list[JudgeScore]]:
    """Every judge's cell per sample; cells that failed transiently are scored again (backoff,
    cosmos_rl.retry_*) until the request's deadline, since whatever is left invalid gets filled
    and the trainer trains on the fill. Backend calls retry until the same deadline, and a
    head whose queue is full is waited for: accepted work is never refused."""
    reserve = min(1.0, 0.05 * cfg.request_timeout_s)  # finish (and fill) before the request times out
    response = await gateway.score(RewardRequest(samples=samples, judges=judges, request_id=uid),
                                   deadline=deadline - reserve, when_busy="wait")
    cells = {j: [r.scores[j] for r in response.results] for j in judges}
    delay = cfg.retry_backoff_s
    cap = cfg.retry_attempts
    for attempt in itertools.count(2):
        if cap is not None and attempt > cap + 1:
            break
        todo = {j: [i for i, c in enumerate(cs) if _transient(c)] for j, cs in cells.items()}
        todo = {j: idx for j, idx in todo.items() if idx}
        if not todo:
            break
        budget = deadline - time.monotonic() - delay - reserve
        if budget <= 0:
            log.info("cosmos-rl %s: no time left to re-score %d transient failures", uid,
                     sum(map(len, todo.values())))
            break
        await asyncio.sleep(delay)
        delay = min(delay * 2, cfg.retry_backoff_max_s)

        async def again(judge: str, idx: list[int], attempt: int = attempt, budget: float = budget) -> None:
            request = RewardRequest(samples=[samples[i] for i in idx], judges=[judge],
                                    request_id=f"{uid}:attempt{attempt}")
            try:
                async with asyncio.timeout(budget):
                    retried = await gateway.score(request, deadline=deadline - reserve, when_busy="wait")
            except TimeoutError:
                return
            for i, result in zip(idx, retried.results):
                cell = result.scores[judge]
                cell.details["attempts"] = attempt
                cells[judge][i] = cell

        await asyncio.gather(*(again(j, idx) for j, idx in todo.items()))
    return cells


def _transient(cell: JudgeScore) -> bool:
    """Worth scoring again: a backend fault, or a head whose worker crashed under it (respawned)."""
    if cell.valid or cell.error is None:
        return False
    return cell.error.code in TRANSIENT_ERRORS or (cell.error.code == ErrorCode.head_error
                                                    and bool(cell.details.get("worker_crashed")))

