"""A head worker whose model sleeps `SLOW_HEAD_S` seconds per batch and appends each prompt it
starts to the file `SLOW_HEAD_LOG`. The real supervisor runs it through a wrapper interpreter
(see tests/unit/test_disconnect.py), so what reaches the worker, and what it runs, is real."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from judge_gateway.heads import worker
from judge_gateway.heads.models.base import HeadModel


class SlowHead(HeadModel):
    def load(self) -> dict[str, Any]:
        return {"model": "slow-fake"}

    def infer(self, images: Sequence[np.ndarray], prompts: Sequence[str]) -> list[dict[str, Any]]:
        with open(os.environ["SLOW_HEAD_LOG"], "a", encoding="utf-8") as log:
            log.writelines(f"{p}\n" for p in prompts)
        time.sleep(float(os.environ.get("SLOW_HEAD_S", "1")))
        return [{"raw": 0.5} for _ in images]


if __name__ == "__main__":
    worker.build_head = lambda kind, options: SlowHead(kind, options)
    raise SystemExit(worker.main())
