"""Cutting a run's watched samples into windows, and sealing a window once all its samples are in.

A run's windows follow the trainer's `step` when its first watched sample carries one
(`steps_per_window` steps per window); otherwise they close after `window_samples` sampled samples
or `window_s` seconds, whichever comes first. A window is *closed* when no more samples join it (a
later step arrived, or its count or time is up, or, with steps, no sample came for `window_s`)
and *sealed* once it is closed and none of its samples is still waiting for the shadows: only
then are its statistics computed, so a window's figures never change after they are reported.

The step clock (the highest step in the run's windows) is one request's to move only a little: a
step more than `max_step_jump` beyond it is not windowed (`StepJump`), and a step whose window is
sealed already is late (`LateSample`), so one request with step 2^53 moves nothing. A trainer that
really jumped (resumed from a checkpoint, restarted at 0, or the first request came from
somewhere else) is followed once `resync_requests` distinct requests in a row have landed outside
the clock near one another with no sample inside the clock in between: the open windows close and
the clock restarts at the new steps. One request, however many samples it carries, never does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..exceptions import InvalidInput

Row = dict[str, float | None]  # judge -> reward of one sample; None: the judge's score is invalid


@dataclass
class Window:
    number: int
    opened_at: float
    key: int | None = None  # step // steps_per_window in step mode
    steps: list[int] | None = None  # [first, last] step seen
    rows: list[Row] = field(default_factory=list)
    pending: int = 0  # samples assigned here, not yet scored or shed
    closed: bool = False
    last_sample_at: float = 0.0

    def take_step(self, step: int) -> None:
        if self.steps is None:
            self.steps = [step, step]
        else:
            self.steps = [min(self.steps[0], step), max(self.steps[1], step)]


class LateSample(InvalidInput):
    """The sample's window is sealed already (its step came after a later one's window closed)."""


class StepJump(InvalidInput):
    """The sample's step is further beyond the run's step clock than `max_step_jump`."""


@dataclass
class _Elsewhere:
    """Steps outside the clock that distinct requests agree on: the clock moves there once
    `resync_requests` of them have come with nothing inside the clock meanwhile."""

    step: int
    requests: set[str] = field(default_factory=set)


class RunWindows:
    """The open windows of one run. `assign` at offer time (counts the sample as pending),
    `add` or `drop` when its shadows are done or it is shed, `sealable` pops the windows whose
    statistics can now be computed, in order."""

    def __init__(self, *, steps_per_window: int, window_samples: int, window_s: float,
                 max_step_jump: int = 1000, resync_requests: int = 3) -> None:
        self.steps_per_window = steps_per_window
        self.window_samples = window_samples
        self.window_s = window_s
        self.max_step_jump = max_step_jump
        self.resync_requests = resync_requests
        self.max_step: int | None = None  # the step clock: the highest step windowed
        self.elsewhere: _Elsewhere | None = None
        self.resyncs = 0  # times the clock followed the trainer to other steps
        self.mode: Literal["step", "time"] | None = None
        self.open: list[Window] = []  # in number order
        self.next_number = 0
        self.max_key: int | None = None  # highest step key seen (step mode)
        self.ignored_steps = 0  # samples with a step in a run windowed by time

    def _new(self, now: float, key: int | None = None) -> Window:
        window = Window(number=self.next_number, opened_at=now, key=key, last_sample_at=now)
        self.next_number += 1
        self.open.append(window)
        return window

    def assign(self, step: int | None, now: float, request: str = "") -> Window:
        """The window a newly sampled sample belongs to; raises LateSample when it is sealed,
        StepJump when its step is too far beyond the clock. `request` tells requests apart (the
        clock follows steps that several requests agree on, never one request's)."""
        if self.mode is None:
            self.mode = "step" if step is not None else "time"
        if self.mode == "time":
            if step is not None:
                self.ignored_steps += 1
            current = self.open[-1] if self.open and not self.open[-1].closed else None
            if current is None or self._full(current, now):
                if current is not None:
                    current.closed = True
                current = self._new(now)
            current.pending += 1
            current.last_sample_at = now
            return current
        if step is not None:
            self._check_clock(step, request)
        window = self._step_window(step, now)
        window.pending += 1
        window.last_sample_at = now
        if step is not None:
            window.take_step(step)
        return window

    def _sealed(self, key: int) -> bool:
        """Whether the window of step key `key` is sealed (or would be behind a sealed one)."""
        if self.max_key is None or key >= self.max_key:
            return False
        return not any(w.key == key for w in self.open)

    def _check_clock(self, step: int, request: str) -> None:
        if self.max_step is None:
            self.max_step = step
            return
        key = step // self.steps_per_window
        ahead = step > self.max_step + self.max_step_jump
        if not ahead and not self._sealed(key):
            self.elsewhere = None  # inside the clock: the trainer is where the clock says
            self.max_step = max(self.max_step, step)
            return
        near = self.elsewhere is not None and abs(step - self.elsewhere.step) <= self.max_step_jump
        if not near:
            self.elsewhere = _Elsewhere(step)
        assert self.elsewhere is not None
        self.elsewhere.requests.add(request)
        if len(self.elsewhere.requests) >= self.resync_requests:
            self.resyncs += 1
            self.close_all()
            self.max_key = None  # the next window opens at the new steps, whatever they are
            self.max_step = step
            self.elsewhere = None
            return
        if ahead:
            raise StepJump(f"step {step} is more than watch.max_step_jump = {self.max_step_jump} beyond the run's "
                           f"step {self.max_step}; followed once {self.resync_requests} requests agree")
        raise LateSample(f"step {step} arrived after a later step's window; its own window is sealed")

    def _step_window(self, step: int | None, now: float) -> Window:
        if step is None:  # a sample without a step in a step-windowed run: the newest window
            if self.open and not self.open[-1].closed:
                return self.open[-1]
            return self._new(now, self.max_key)
        key = step // self.steps_per_window
        for window in self.open:
            if window.key == key:
                if key == self.max_key:
                    window.closed = False  # the newest step's window: a new sample undoes an idle close
                return window
        if self.max_key is not None and key < self.max_key:
            raise LateSample(f"step {step} arrived after a later step's window; its own window is sealed")
        self.max_key = key
        for window in self.open:  # a later step closes every earlier window
            window.closed = True
        return self._new(now, key)

    def _full(self, window: Window, now: float) -> bool:
        return (len(window.rows) + window.pending >= self.window_samples
                or now - window.opened_at >= self.window_s)

    def add(self, window: Window, row: Row) -> None:
        window.pending -= 1
        window.rows.append(row)

    def drop(self, window: Window) -> None:
        window.pending -= 1

    def tick(self, now: float) -> None:
        """Close what time closes: a time window past window_s, a step window idle for window_s."""
        for window in self.open:
            if window.closed:
                continue
            if self.mode == "time" and self._full(window, now):
                window.closed = True
            elif self.mode == "step" and now - window.last_sample_at >= self.window_s:
                window.closed = True

    def close_all(self) -> None:
        for window in self.open:
            window.closed = True

    def sealable(self) -> list[Window]:
        """Pop the leading windows that are closed with nothing pending (in number order: a window
        waits for the ones before it, so windows are sealed in order)."""
        out = []
        while self.open and self.open[0].closed and self.open[0].pending == 0:
            out.append(self.open.pop(0))
        return out

    @property
    def pending(self) -> int:
        return sum(w.pending for w in self.open)

    @property
    def open_samples(self) -> int:
        return sum(len(w.rows) for w in self.open)
