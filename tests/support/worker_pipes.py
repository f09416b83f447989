"""The head worker's serve loop in a thread on two pipes, as its supervisor would drive it."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO


@contextmanager
def worker_on_pipes(join_s: float = 30.0) -> Iterator[tuple[BinaryIO, BinaryIO, list[int]]]:
    """(send, recv, rc): write frames to `send`, read the worker's from `recv`; on leaving, `send` is
    closed (the end of stdin ends the worker) and the thread joined: `rc` then holds serve's status."""
    from judge_gateway.heads import worker

    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    rc: list[int] = []
    with os.fdopen(in_r, "rb") as stdin, os.fdopen(out_w, "wb", buffering=0) as stdout:
        thread = threading.Thread(target=lambda: rc.append(worker.serve(stdin, stdout)), daemon=True)
        thread.start()
        with os.fdopen(in_w, "wb", buffering=0) as send, os.fdopen(out_r, "rb") as recv:
            try:
                yield send, recv, rc
            finally:
                send.close()
                thread.join(join_s)
