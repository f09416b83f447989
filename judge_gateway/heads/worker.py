"""A head worker process: `python -m judge_gateway.heads.worker` (under any interpreter that has
the head's dependencies and can import judge_gateway).

Protocol (workers/framing.py frames carrying the head messages of protocol.py) on stdin/stdout:
  gateway -> worker  {"op": "init", "kind", "name", "options", "arena"?: {"fd", "size"}}
                     (`options`: the fields the judge's config set; the worker rebuilds the
                     kind's typed options from them, factory.head_options)
                     then scoring messages:
                     {"op": "score", "via", "region"?, "jobs": [...]} (+ uint8 frames via the pipe;
                                              a brought head's jobs carry whole samples, protocol.py)
                     {"op": "stats", "id"}
                     {"op": "cancel", "id"}   the request of a queued score message was abandoned:
                                              drop it (no result is sent for it)
                     {"op": "sleep", "id", "level"} / {"op": "wake", "id"}
                                              a colocated head (heads/sleeping.py), run after every
                                              job sent before it
  worker -> gateway  {"op": "ready", "info"} | {"op": "fatal", "error", "detail"?} (error: for replies;
                     detail: for the gateway's log only)
                     (`info.sleep_methods`: how it sleeps at level 1 and 2, heads/sleeping.py)
                     {"op": "result", "id", "ok": true, "outputs": [...]}
                     {"op": "result", "id", "ok": false, "error"}
                     {"op": "stats", "id", "stats"}
                     {"op": "residency", "id", "ok", "facts" | "error", "asleep"}
End of stdin (the gateway closed the pipe or died) ends the worker.
With an `arena` (a shared-memory fd the gateway passed at spawn, shm.py) the pixels of a score
frame are read from it in place; `info.transport` says whether the worker mapped it ("shm") or
takes pixels from the pipe only ("pipe"). A job's result is its region's release: the worker
never reads a job's pixels after answering it.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ..workers.framing import ProtocolError, read_frame, write_frame
from .batcher import Control, FairJobQueue, Job, MicroBatcher, Staged
from .factory import build_head, head_options
from .models.base import HeadLoadError
from .protocol import jobs_from_frame
from .sleeping import HeadSleeper
from .shm import ArenaView

log = logging.getLogger("judge_gateway.heads.worker")
_EOF = object()
_STAGER_DIED = object()


class _Writer:
    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def send(self, header: dict[str, Any]) -> None:
        with self.lock:  # several threads answer on the one stream
            write_frame(self.stream, header)


def _protocol_streams() -> tuple[BinaryIO, BinaryIO]:
    """Keep the real stdout for frames only; anything a library prints goes to stderr."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    return sys.stdin.buffer, out


class _Cancels:
    """Score messages the gateway cancelled while they waited in the queue (thread-safe: the
    reader thread marks them, the batching thread drops them when it collects them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queued: set[int] = set()
        self._cancelled: set[int] = set()
        self.dropped = 0

    def queued(self, msg_id: int) -> None:
        with self._lock:
            self._queued.add(msg_id)

    def cancel(self, msg_id: Any) -> None:
        with self._lock:
            if msg_id in self._queued:  # one already collected runs; its result is discarded
                self._cancelled.add(msg_id)

    def keep(self, jobs: list[Job]) -> tuple[list[Job], list[Job]]:
        """(the collected jobs still wanted, the cancelled ones); they leave the queue either way."""
        with self._lock:
            kept = [job for job in jobs if job.msg_id not in self._cancelled]
            dropped = [job for job in jobs if job.msg_id in self._cancelled]
            for job in jobs:
                self._queued.discard(job.msg_id)
                self._cancelled.discard(job.msg_id)
            self.dropped += len(dropped)
        return kept, dropped


def _attach_arena(spec: Any) -> tuple[ArenaView | None, str | None]:
    """Map the gateway's shared-memory arena, or say why the pipe must carry the pixels."""
    if spec is None:
        return None, None
    try:
        return ArenaView(int(spec["fd"]), int(spec["size"])), None
    except (KeyError, TypeError, ValueError, OSError) as exc:
        return None, f"cannot map the shared-memory arena ({type(exc).__name__}: {exc})"


def _reader(stream: BinaryIO, q: "queue.Queue[Any] | FairJobQueue", writer: _Writer, arena: ArenaView | None = None,
            cancels: _Cancels | None = None) -> None:
    try:
        while True:
            frame = read_frame(stream)
            if frame is None:
                break
            header, payload = frame
            op, msg_id = header.get("op"), header.get("id")
            if op == "score":
                region = header.get("region", 0)
                jobs, bad = jobs_from_frame(header, payload, arena, region if isinstance(region, int) else -1)
                for bad_id, why in bad:
                    writer.send({"op": "result", "id": bad_id, "ok": False, "error": why})
                for job in jobs:
                    if cancels is not None:
                        cancels.queued(job.msg_id)
                    q.put(Job(msg_id=job.msg_id, frames=job.frames, prompt=job.prompt, items=job.items))
            elif op == "cancel":
                if cancels is not None:
                    cancels.cancel(msg_id)
            elif op == "stats":
                q.put(Control(msg_id=msg_id, op="stats"))
            elif op in ("sleep", "wake"):
                q.put(Control(msg_id=msg_id, op=op, args={"level": header.get("level", 1)}))
            elif op == "shutdown":
                break
            else:
                writer.send({"op": "result", "id": msg_id, "ok": False, "error": f"unknown op {op!r}"})
    except ProtocolError as exc:
        log.error("bad frame from the gateway: %s", exc)
    finally:
        q.put(_EOF)


def serve(stdin: BinaryIO, stdout: BinaryIO) -> int:
    writer = _Writer(stdout)
    init = read_frame(stdin)
    if init is None:
        return 0
    header, _ = init
    if header.get("op") != "init":
        writer.send({"op": "fatal", "error": f"expected an init message, got {header.get('op')!r}"})
        return 2
    kind = header["kind"]
    arena, arena_error = _attach_arena(header.get("arena"))
    if arena_error:
        log.warning("%s; pixels come through the pipe", arena_error)
    try:
        options = head_options(kind, header.get("options") or {})
        head = build_head(kind, options)
        head.name = str(header.get("name") or kind)  # the configured judge's name, before it loads
        info = head.load()
    except HeadLoadError as exc:
        writer.send({"op": "fatal", "error": str(exc)})
        return 3
    except Exception as exc:  # an unforeseen load fault: its kind in replies, its message in the log
        traceback.print_exc()
        writer.send({"op": "fatal", "error": f"{type(exc).__name__} while loading (the gateway's log has its message)",
                     "detail": f"{type(exc).__name__}: {exc}"})
        return 3
    make_batcher = getattr(head, "make_batcher", None)  # video-level heads batch whole videos
    max_batch, max_wait = options.max_batch_size, options.max_wait_ms
    if make_batcher is not None:
        batcher = make_batcher(max_batch, max_wait)
    else:
        batcher = MicroBatcher(head.infer, max_batch, max_wait, prepare=head.prepare,
                               pipeline_min_batch=options.pipeline_min_batch)
    transport = {"transport": "shm" if arena is not None else "pipe"}
    if arena_error:
        transport["transport_error"] = arena_error
    atexit.register(head.close)  # its preprocessing processes and shared memory
    # Which judge_gateway this interpreter imported: the gateway checks it is its own.
    package = str(Path(__file__).resolve().parents[1])
    sleeper = HeadSleeper(head)
    writer.send({"op": "ready", "info": {**info, **transport, "pid": os.getpid(), "package": package,
                                         "sleep_methods": list(head.sleep_methods())}})

    q = FairJobQueue()  # small jobs first, none starved (batcher.py)
    cancels = _Cancels()
    threading.Thread(target=_reader, args=(stdin, q, writer, arena, cancels), daemon=True,
                     name="head-reader").start()
    overlap = options.overlaps_preprocessing()
    device_idle = threading.Event()  # set while this thread waits for its next batch
    items = _batches(batcher, q, cancels, writer, device_idle.is_set)
    if overlap and batcher.prepare is not None:
        # One batch ahead: the stager thread collects batch k+1 and has it prepared (by the
        # preprocessing processes, or as kernels on the device's side stream) while this thread
        # runs batch k; maxsize=1 keeps at most one prepared batch waiting.
        staged_q: queue.Queue[Any] = queue.Queue(maxsize=1)
        threading.Thread(target=_stager, args=(items, staged_q), daemon=True, name="head-stager").start()
        next_item = staged_q.get
    else:
        next_item = items.__next__  # the same stages, in turn on this thread
    while True:
        device_idle.set()
        item = next_item()
        device_idle.clear()
        if isinstance(item, _Batch):
            if sleeper.asleep:  # the gateway wakes a head before it sends work; never score on no weights
                log.warning("a batch came while the head slept: waking it first")
                sleeper.wake()
            for msg_id, out in batcher.run(item.jobs, item.staged).items():
                if isinstance(out, Exception):
                    log.error("inference failed: %s", "".join(traceback.format_exception(out)))
                    writer.send({"op": "result", "id": msg_id, "ok": False,
                                 "error": f"{type(out).__name__}: {out}"})
                else:
                    writer.send({"op": "result", "id": msg_id, "ok": True, "outputs": out})
        elif item is _EOF:
            return 0
        elif item is _STAGER_DIED:
            return 4
        elif isinstance(item, Control) and item.op == "stats":
            writer.send({"op": "stats", "id": item.msg_id,
                         "stats": {**batcher.stats(), **head.stats(), "cancelled_jobs": cancels.dropped,
                                   "asleep": sleeper.asleep}})
        elif isinstance(item, Control) and item.op in ("sleep", "wake"):
            writer.send(_residency(sleeper, item))


def _residency(sleeper: HeadSleeper, control: Control) -> dict[str, Any]:
    """The reply to a sleep or wake: its facts, or why it failed (the head's state as it is then)."""
    try:
        level = control.args.get("level", 1)
        facts = sleeper.sleep(level if level in (1, 2) else 1) if control.op == "sleep" else sleeper.wake()
        return {"op": "residency", "id": control.msg_id, "ok": True, "facts": facts, "asleep": sleeper.asleep}
    except Exception as exc:  # a failed sleep or wake: the gateway marks the judge failed and restarts it
        log.error("%s failed: %s", control.op, "".join(traceback.format_exception(exc)))
        return {"op": "residency", "id": control.msg_id, "ok": False, "error": f"{type(exc).__name__}: {exc}",
                "asleep": sleeper.asleep}


@dataclass
class _Batch:
    jobs: list[Job]
    staged: Staged | None


def _batches(batcher: MicroBatcher, q: "queue.Queue[Any] | FairJobQueue", cancels: _Cancels | None = None,
             writer: _Writer | None = None, idle: Callable[[], bool] | None = None) -> Iterator[Any]:
    """Collected batches with their CPU preparation done, then the messages that came after
    them (controls, the end of stream), in arrival order. Cancelled jobs are dropped unrun, and
    answered: every job gets an answer (the gateway frees its shared-memory region on it).
    `idle()`: the device waits for a batch (batcher.collect's pipelining)."""
    while True:
        jobs, others = batcher.collect(q, idle)
        if cancels is not None:
            jobs, dropped = cancels.keep(jobs)
            for job in dropped:
                if writer is not None:
                    writer.send({"op": "result", "id": job.msg_id, "ok": False, "error": "cancelled by the gateway"})
        if jobs:
            yield _Batch(jobs, batcher.stage(jobs))  # stage keeps a failed slice's exception
        yield from others


def _stager(items: Iterator[Any], staged_q: "queue.Queue[Any]") -> None:
    try:
        for item in items:
            staged_q.put(item)
            if item is _EOF:
                return
    except BaseException:
        # Never leave the main thread waiting: the worker exits and the supervisor restarts it,
        # failing the in-flight items with head_error.
        log.critical("the stager thread died:\n%s", traceback.format_exc())
        staged_q.put(_STAGER_DIED)


def main() -> int:
    logging.basicConfig(level=os.environ.get("JG_HEAD_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s head-worker %(levelname)s %(message)s", stream=sys.stderr)
    stdin, stdout = _protocol_streams()
    return serve(stdin, stdout)


if __name__ == "__main__":
    sys.exit(main())
