"""Where a training judge and its shadow disagree: each score placed among the run's recent scores
of its judge (a percentile, scale-free), and the gap = training percentile - shadow percentile.
A gap near 1: the training judge loved a sample its shadow rated among the worst, the look of a
hack. Each window keeps its top samples by gap (their thumbnails are what the record keeps)."""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from .stats import percentile_rank

REFERENCE_SIZE = 512  # recent valid scores per judge that a new score is placed among

T = TypeVar("T")


class Reference:
    """The last REFERENCE_SIZE valid scores of one judge, kept sorted."""

    def __init__(self, size: int = REFERENCE_SIZE) -> None:
        self.size = size
        self._recent: deque[float] = deque()
        self._sorted: list[float] = []

    def add(self, value: float) -> None:
        self._recent.append(value)
        bisect.insort(self._sorted, value)
        if len(self._recent) > self.size:
            old = self._recent.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]

    def percentile(self, value: float) -> float | None:
        return percentile_rank(self._sorted, value)


@dataclass(frozen=True)
class Gap:
    value: float
    train: str
    shadow: str


def largest_gap(row: dict[str, float | None], shadows: dict[str, list[str]], refs: dict[str, Reference]) -> Gap | None:
    """The sample's largest training-minus-shadow percentile gap over its (training, shadow) pairs,
    against the references as they are before this sample joins them; then it joins them."""
    best: Gap | None = None
    for train, its_shadows in shadows.items():
        t = row.get(train)
        if t is None:
            continue
        pt = refs.setdefault(train, Reference()).percentile(t)
        for shadow in its_shadows:
            s = row.get(shadow)
            if s is None:
                continue
            ps = refs.setdefault(shadow, Reference()).percentile(s)
            if pt is None or ps is None:
                continue
            if best is None or pt - ps > best.value:
                best = Gap(pt - ps, train, shadow)
    for judge, value in row.items():
        if value is not None:
            refs.setdefault(judge, Reference()).add(value)
    return best


@dataclass(order=True)
class _Ranked(Generic[T]):
    gap: float
    seq: int
    item: T = field(compare=False)


class TopK(Generic[T]):
    """The k items with the largest gaps seen (ties: the earlier stays)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self._heap: list[_Ranked[T]] = []
        self._seq = 0

    def would_take(self, gap: float) -> bool:
        return self.k > 0 and (len(self._heap) < self.k or gap > self._heap[0].gap)

    def offer(self, gap: float, item: T) -> T | None:
        """Keep `item` if it ranks; returns the item it displaced (or `item` itself if it did not rank)."""
        if not self.would_take(gap):
            return item
        self._seq -= 1  # a later item with an equal gap ranks below an earlier one
        entry = _Ranked(gap, self._seq, item)
        if len(self._heap) < self.k:
            heapq.heappush(self._heap, entry)
            return None
        return heapq.heapreplace(self._heap, entry).item

    def items(self) -> list[T]:
        """Largest gap first."""
        return [e.item for e in sorted(self._heap, reverse=True)]
