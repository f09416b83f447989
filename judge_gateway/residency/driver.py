"""What a sleeping thing must do, whatever it is: a head worker (heads/residency.py) or the vLLM
servers of a backend (residency/vllm.py). A `ResidencyUnit` (unit.py) drives one through its
states and never calls two of these at once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from ..exceptions import ConfigurationError, Unavailable


class ResidencyUnsupported(ConfigurationError):
    """A colocated judge whose server cannot sleep (vLLM on the CPU, a server without sleep mode
    or dev mode): refused at start, with the reason and the fix."""


class SleepBusy(Unavailable):
    """The thing itself refused to sleep now (it is busy): it is still awake, nothing was dropped."""


class SleepDriver(ABC):
    """Sleep, wake and the state of one thing that holds a judge's model."""

    label: str  # how errors name it: "head 'clip'", "backend 'qwen_vl'"

    async def verify(self) -> bool:
        """Raise ResidencyUnsupported when this thing can never sleep (checked at start). False: it
        could not be asked now (not refused; checked again before its next sleep)."""
        return True

    @abstractmethod
    async def sleep(self, level: int) -> dict[str, Any]:
        """Free what `level` frees (config/residency.py); facts about it (bytes freed, method).
        Raises SleepBusy when the thing refuses because it is busy (it stays awake)."""

    @abstractmethod
    async def wake(self, level: int) -> dict[str, Any]:
        """Bring the model back (a thing that is awake already is left as it is); facts."""

    async def is_asleep(self) -> bool | None:
        """What the thing says of itself (None: it cannot say, or cannot be reached)."""
        return None

    async def recover(self, reason: str) -> None:
        """A sleep or wake failed (or ran out of time): make the thing serve again if this side can
        (a head's worker is killed and its supervisor restarts it, awake); a vLLM server is `up`'s
        to restart, so the backend's driver does nothing."""

    def replicas(self) -> list[dict[str, Any]] | None:
        """Per replica: its state as last seen (a backend's servers); None for one process."""
        return None
