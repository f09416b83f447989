"""A head worker process with a fake model, for transport tests that need a real subprocess but
no torch: `python -m tests.support.fake_head_worker` speaks the worker protocol of
judge_gateway.heads.worker with a head whose outputs fingerprint the pixels it received.

Per image: {"raw": sum of its bytes, "sha256": of its bytes, "shape": [H, W, 3]}. Prompts steer it:
"hang" writes the file named by $JG_FAKE_HEAD_MARK and sleeps (to kill a worker mid-batch);
"slow" sleeps $JG_FAKE_HEAD_SLEEP_S (default 0.05 s) per batch. $JG_FAKE_HEAD_LOAD_S makes loading
take that long.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from typing import Any

import numpy as np

from judge_gateway.heads import worker
from judge_gateway.heads.models.base import HeadModel


class FingerprintHead(HeadModel):
    def load(self) -> dict[str, Any]:
        time.sleep(float(os.environ.get("JG_FAKE_HEAD_LOAD_S", "0")))  # a model that takes a while
        return {"model": "fingerprint"}

    def infer(self, images, prompts) -> list[dict[str, Any]]:
        if "hang" in prompts:
            with open(os.environ["JG_FAKE_HEAD_MARK"], "w") as f:
                f.write(str(os.getpid()))
            time.sleep(600)
        if "slow" in prompts:
            if os.environ.get("JG_FAKE_HEAD_STARTED"):  # tells a test the batch is being run
                with open(os.environ["JG_FAKE_HEAD_STARTED"], "w") as f:
                    f.write(str(os.getpid()))
            time.sleep(float(os.environ.get("JG_FAKE_HEAD_SLEEP_S", "0.05")))
        return [{"raw": float(np.asarray(im, dtype=np.uint64).sum()),
                 "sha256": hashlib.sha256(np.ascontiguousarray(im).tobytes()).hexdigest(),
                 "shape": list(im.shape)} for im in images]


def fake_head_python(folder) -> str:
    """An "interpreter" for `options.python` that runs this fake worker instead of the real one."""
    path = os.path.join(str(folder), "fake-head-python")
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\nexec {sys.executable} -m tests.support.fake_head_worker\n")
    os.chmod(path, 0o755)
    return path


if __name__ == "__main__":
    worker.build_head = lambda kind, options: FingerprintHead(kind, options)
    sys.exit(worker.main())
