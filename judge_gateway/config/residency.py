"""[judges.NAME.residency]: whether a judge keeps its model on its device (`resident`, the
default) or shares the device with a trainer (`colocated`): it sleeps when told (POST
/v1/residency, the `X-Judge-Gateway-Residency: sleep` header of a reward request, Flow-Factory's
`/offload`) or after `idle_sleep_s` without work, and wakes on the next request that needs it (or
when told). The gateway's side is judge_gateway/residency/; what a sleep frees per level is in
docs/guides/colocate.md.

Judges on one backend share its vLLM servers, so they share one residency: their tables must be
equal (loading.py checks it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, model_validator

from .base import Strict

RESIDENCY_MODES = ("resident", "colocated")


class ResidencyConfig(Strict):
    mode: Literal["resident", "colocated"] = Field(
        "resident", description="`resident`: the model stays on its device (never sleeps); `colocated`: it "
        "shares the device with a trainer, sleeps when told or when idle, wakes on the next request.")
    level: Literal[1, 2] = Field(
        1, description="What a sleep frees. 1: the weights go to host memory (a head: pinned host memory; vLLM: "
        "its level 1, weights offloaded, KV cache discarded), a wake copies them back. 2: the weights are "
        "dropped and reloaded from their files at wake (vLLM: its level 2, then `reload_weights`): no host "
        "memory held, a slower wake. A head on the CPU always drops and reloads (its host memory is its "
        "device memory).")
    idle_sleep_s: float | None = Field(
        60.0, gt=0, description="Sleep after this long without work (trainers that send no signal, "
        "cosmos-rl's and Flow-Factory's stock clients, get their memory back between steps); none: only "
        "when told.")
    wake_timeout_s: float = Field(
        120.0, gt=0, description="A wake that has not finished in this time fails: the requests waiting for it "
        "get `backend_unavailable` with the reason, the judge reads not ready, and a head's worker is "
        "restarted. A request waits for a wake at most until its own deadline.")
    drain_timeout_s: float = Field(
        30.0, gt=0, description="A sleep waits this long for the work in flight when it was asked (never "
        "dropping it); work still running then: the sleep is refused (409) and the judge stays awake.")
    sleep_timeout_s: float = Field(
        120.0, gt=0, description="The sleep call itself (weights copied out) must finish in this time; else "
        "it fails, the judge is marked not ready and a head's worker is restarted.")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        """`residency = "colocated"` is the table with its defaults."""
        if isinstance(data, str):
            if data not in RESIDENCY_MODES:
                raise ValueError(f"{data!r} is not a residency (resident, colocated)")
            return {"mode": data}
        return data

    @property
    def colocated(self) -> bool:
        return self.mode == "colocated"


# What vLLM's own check says when a server is started with --enable-sleep-mode on a platform
# without it (vllm/config/model.py, ModelConfig: `current_platform.is_sleep_mode_available()`,
# true on CUDA, ROCm and XPU; the CPU build refuses to start).
VLLM_SLEEP_PLATFORMS = "CUDA and ROCm GPUs (and Intel XPU)"


def check_residency(judges: Mapping[str, Any], backends: Mapping[str, Any]) -> list[str]:
    """Judges on one backend share its servers, so one residency; a colocated backend that `up`
    would launch on vLLM's CPU build is refused here (that build refuses --enable-sleep-mode)."""
    problems: list[str] = []
    by_backend: dict[str, list[str]] = {}
    for name, judge in judges.items():
        if judge.kind_spec.runs_on == "vlm" and judge.backend in backends:
            by_backend.setdefault(judge.backend, []).append(name)
    for backend, names in by_backend.items():
        first = judges[names[0]].residency
        for other in names[1:]:
            if judges[other].residency != first:
                problems.append(f"judges.{other}.residency: judges {names[0]!r} and {other!r} share backend "
                                f"{backend!r} (one set of vLLM servers, which sleep together): give them the "
                                "same residency table")
        launch = backends[backend].launch
        if first.colocated and launch is not None and launch.gpus == 0:
            problems.append(f"judges.{names[0]}.residency: colocated needs vLLM's sleep mode, which works on "
                            f"{VLLM_SLEEP_PLATFORMS} only; backend {backend!r} is launched on vLLM's CPU build "
                            "(launch.gpus = 0), which refuses --enable-sleep-mode: keep it resident")
    return problems
