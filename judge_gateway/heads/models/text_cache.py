"""LRU cache of text embeddings: a GRPO group (K images, one prompt) encodes its prompt once."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any


class TextEmbeddingCache:
    """prompt -> embedding row. `encode` gets the missing prompts (deduplicated) in one call and
    returns one row per prompt, in order."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        # the worker's stager thread fills it while the forward's thread may read it (a batch
        # retried job by job prepares on that thread)
        self._lock = threading.Lock()
        self._rows: OrderedDict[str, Any] = OrderedDict()
        self.hits = 0
        self.encoded = 0  # prompts actually run through the text tower
        self.encode_calls = 0

    def __len__(self) -> int:
        return len(self._rows)

    def get_many(self, prompts: Sequence[str], encode: Callable[[list[str]], Any]) -> list[Any]:
        with self._lock:
            return self._get_many(prompts, encode)

    def _get_many(self, prompts: Sequence[str], encode: Callable[[list[str]], Any]) -> list[Any]:
        found: dict[str, Any] = {}
        missing: list[str] = []
        for p in prompts:
            if p in found or p in missing:
                continue
            row = self._rows.get(p)
            if row is not None:
                self._rows.move_to_end(p)
                found[p] = row
                self.hits += 1
            else:
                missing.append(p)
        if missing:
            rows = encode(missing)
            self.encode_calls += 1
            self.encoded += len(missing)
            for p, row in zip(missing, rows):
                found[p] = row
                if self.capacity > 0:
                    self._rows[p] = row
            while len(self._rows) > self.capacity:
                self._rows.popitem(last=False)
        return [found[p] for p in prompts]

    def map_rows(self, move: Callable[[Any], Any]) -> None:
        """Replace every cached row by `move(row)` (a colocated head's rows follow its weights
        to host memory and back: the same bits, so a cached prompt scores as before)."""
        with self._lock:
            for prompt, row in list(self._rows.items()):
                self._rows[prompt] = move(row)

    def stats(self) -> dict[str, int]:
        return {"text_cache_size": len(self._rows), "text_cache_hits": self.hits,
                "text_encoded": self.encoded, "text_encode_calls": self.encode_calls}
