"""Judges that share the trainer's GPUs (`judges.NAME.residency = "colocated"`): they sleep while
the policy trains, wake on the next call that needs them, and never hang one.

    driver.py      what a sleeping thing does (sleep, wake, recover); ResidencyUnsupported, SleepBusy
    unit.py        one thing that sleeps and its contract: calls wait for a wake within their deadline,
                   a sleep drains (never drops) work, a failed transition is reported and recovered
    vllm.py        a backend's driver: vLLM's sleep mode (/sleep, /wake_up, /is_sleeping) on its servers
    controller.py  the gateway's units, what the routes ask, what /v1/judges, /readyz, /metrics report

A head's driver is the head's own (heads/residency.py, inside its worker heads/sleeping.py).
"""

from .controller import Residency
from .driver import ResidencyUnsupported, SleepBusy, SleepDriver
from .unit import NotColocated, ResidencyUnit, SleepFailed, SleepRefused, WakeFailed, WakeWait
from .vllm import VllmSleepDriver

__all__ = ["Residency", "ResidencyUnit", "SleepDriver", "VllmSleepDriver", "ResidencyUnsupported", "SleepBusy",
           "SleepRefused", "SleepFailed", "WakeFailed", "WakeWait", "NotColocated"]
