"""Fill the score cache for every (sample, judge) cell a tuning run needs, then read it out.

Cells already cached are never re-scored; the rest go through the gateway (in-process from a
config, or a running service) in batches, with a progress bar.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..exceptions import InvalidInput
from ..schema import ErrorCode, JudgeScore
from .cache import CachedScore, CacheKey, ScoreCache
from .prefs import PreferenceData, PrefSample


class MissingScoresError(InvalidInput):
    """--cache-only was asked for, but the cache lacks some cells."""


@dataclass(frozen=True)
class JudgeSpec:
    """A judge to score with: its name in the gateway, and its identity in the cache."""

    gateway_name: str
    cache_name: str
    template_sha256: str
    model: str

    def key(self, sample: str) -> CacheKey:
        return CacheKey(sample=sample, judge=self.cache_name, template_sha256=self.template_sha256,
                        model=self.model)


ScoreTable = dict[tuple[str, str], CachedScore]  # (sample key, judge gateway name) -> score


def collect_scores(data: PreferenceData, judges: list[JudgeSpec], cache: ScoreCache, *,
                   client_factory: Any = None, cache_only: bool = False, batch_size: int = 16,
                   concurrency: int = 4, progress: bool = True) -> tuple[ScoreTable, dict[str, int]]:
    """Every sample's score per judge, from the cache or freshly scored.

    Returns the table and counts (`cached`, `scored`, `transient_failures`). `client_factory`
    makes an `AsyncRewardClient`; it is only called when something must be scored, so a run
    from a complete cache never needs a reachable backend.
    """
    samples = data.samples()
    table: ScoreTable = {}
    todo: dict[str, list[PrefSample]] = {}
    for spec in judges:
        for key, sample in samples.items():
            hit = cache.get(spec.key(key))
            if hit is not None:
                table[(key, spec.gateway_name)] = hit
            else:
                todo.setdefault(spec.gateway_name, []).append(sample)
    counts = {"cached": len(table), "scored": 0, "transient_failures": 0}
    missing = sum(len(v) for v in todo.values())
    if not missing:
        return table, counts
    if cache_only or client_factory is None:
        raise MissingScoresError(
            f"the score cache {cache.path} lacks {missing} of {missing + len(table)} (sample, judge) cells "
            f"(judges: {', '.join(sorted(todo))}); run without --cache-only to score them")
    by_name = {s.gateway_name: s for s in judges}
    results = asyncio.run(_score_missing(todo, client_factory, batch_size, concurrency, progress))
    for (name, sample), score in results:
        spec = by_name[name]
        row = CachedScore.from_score(score)
        cache.put(spec.key(sample.key), row)
        table[(sample.key, spec.gateway_name)] = row
        counts["scored"] += 1
        counts["transient_failures"] += int(row.transient)
    return table, counts


async def _score_missing(todo: Mapping[str, list[PrefSample]], client_factory: Any, batch_size: int,
                         concurrency: int, progress: bool) -> list[tuple[tuple[str, PrefSample], JudgeScore]]:
    from tqdm import tqdm

    client = client_factory()
    sem = asyncio.Semaphore(concurrency)
    out: list[tuple[tuple[str, PrefSample], JudgeScore]] = []
    total = sum(len(v) for v in todo.values())
    bar = tqdm(total=total, unit="score", desc="scoring", disable=not progress, file=sys.stderr)

    async def run(name: str, batch: list[PrefSample]) -> None:
        async with sem:
            try:
                request = await asyncio.to_thread(lambda: [s.item.to_sample(None) for s in batch])
                resp = await client.rewards.create(samples=request, judges=[name])
                scores = [r.scores[name] for r in resp.results]
            except Exception as exc:  # noqa: BLE001  the batch's cells become transient failures, never scores
                scores = [JudgeScore.failure(name, ErrorCode.backend_error, f"{type(exc).__name__}: {exc}")
                          for _ in batch]
        out.extend(((name, s), sc) for s, sc in zip(batch, scores))
        bar.update(len(batch))

    try:
        await asyncio.gather(*(run(name, items[i:i + batch_size])
                               for name, items in todo.items() for i in range(0, len(items), batch_size)))
    finally:
        bar.close()
        await client.close()
    return out
