"""A training request's run and step: native body fields, or the X-Judge-Gateway-Run / -Step
headers (the cosmos-rl and Flow-Factory bodies are the peers' and stay unchanged).

A run name is 1-128 printable characters; a step an integer from 0 to 2^53. A malformed header
is the request's bad input (the caller answers it in its protocol's way), never ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..exceptions import InvalidInput

RUN_HEADER = "x-judge-gateway-run"
STEP_HEADER = "x-judge-gateway-step"
DEFAULT_RUN = "default"  # the run of a request that names none
MAX_RUN_CHARS = 128
MAX_STEP = 2**53
_RUN_CHARS = re.compile(r"^[\x20-\x7e]+$")


class BadTags(InvalidInput):
    """A run or step the gateway cannot use; `field` names where it came from."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class RunTags:
    run: str = DEFAULT_RUN
    step: int | None = None
    run_given: bool = False  # the trainer named the run (else DEFAULT_RUN)

    def as_entry(self) -> dict[str, str | int | None]:
        """For a stored entry (cosmos-rl's queued work carries its tags through the store)."""
        return {"run": self.run if self.run_given else None, "step": self.step}

    @classmethod
    def from_entry(cls, entry: object) -> RunTags | None:
        """The tags `as_entry` stored; None for anything else (an entry of an older gateway)."""
        if not isinstance(entry, dict):
            return None
        run, step = entry.get("run"), entry.get("step")
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            step = None
        return cls(run=run, step=step, run_given=True) if isinstance(run, str) else cls(step=step)


def check_run(run: str, field: str = "run") -> str:
    if not run or len(run) > MAX_RUN_CHARS or not _RUN_CHARS.match(run) or run.strip() != run:
        raise BadTags(field, f"a run name is 1-{MAX_RUN_CHARS} printable ASCII characters without "
                             f"leading or trailing spaces, got {run[:40]!r}")
    return run


def _step(text: str, field: str) -> int:
    if not re.fullmatch(r"\d{1,16}", text.strip()):
        raise BadTags(field, f"a step is a whole number from 0 to 2^53, got {text[:40]!r}")
    step = int(text)
    if step > MAX_STEP:
        raise BadTags(field, f"a step is a whole number from 0 to 2^53, got {text[:40]!r}")
    return step


def tags_from(headers: Mapping[str, str], run: str | None = None, step: int | None = None) -> RunTags:
    """The request's tags: body fields (native) when given, else the headers."""
    run_text = run if run is not None else headers.get(RUN_HEADER)
    step_value = step if step is not None else (
        _step(headers[STEP_HEADER], "X-Judge-Gateway-Step") if STEP_HEADER in headers else None)
    if run_text is None:
        return RunTags(step=step_value)
    return RunTags(run=check_run(run_text, "run" if run is not None else "X-Judge-Gateway-Run"),
                   step=step_value, run_given=True)
