"""What the watch reports: the models of `GET /v1/watch` and of each run's watch.json (the page
reads either). A figure with no value (too few samples, a constant series) is null."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..schema import ResidencyEvent

AlarmKind = Literal["divergence", "correlation", "invalid_rate", "drift"]


class _Report(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JudgeWindow(_Report):
    """One judge's scores in one window."""

    scored: int = Field(description="Samples this judge scored in the window.")
    valid: int
    invalid_rate: float | None = Field(description="invalid / scored; null when nothing was scored.")
    mean: float | None = None
    q10: float | None = None
    q50: float | None = None
    q90: float | None = None
    drift_ks: float | None = Field(None, description="KS distance of the window's valid scores from the baseline's.")
    drift_p: float | None = Field(None, description="Its p-value (limiting Kolmogorov distribution).")
    drift_w1: float | None = Field(None, description="Wasserstein-1 distance from the baseline, in reward units.")


class PairWindow(_Report):
    """A training judge and one of its shadows in one window."""

    train: str
    shadow: str
    pairs: int = Field(description="Samples both scored validly.")
    spearman: float | None


class WindowReport(_Report):
    window: int = Field(description="The window's number in its run, from 0.")
    steps: list[int] | None = Field(None, description="[first, last] trainer step of the window; null without steps.")
    opened_at: float = Field(description="Unix time of its first sample.")
    sealed_at: float = Field(description="Unix time its statistics were computed.")
    samples: int
    baseline: bool = Field(description="One of the run's baseline windows.")
    judges: dict[str, JudgeWindow]
    pairs: list[PairWindow]


class Evidence(_Report):
    """What an alarm saw: the windows compared and the named figures of its rule."""

    windows: list[int] = Field(description="The recent windows the rule pooled.")
    reference: list[int] = Field(description="The windows it compared them with.")
    values: dict[str, float | None] = Field(description="The rule's figures, by name (see docs/guides/watch.md).")
    means: dict[str, list[float | None]] = Field(
        default_factory=dict, description="Per judge involved: its mean per window, reference then recent.")


class AlarmReport(_Report):
    kind: AlarmKind
    judge: str = Field(description="The judge whose scores moved (the training judge for divergence / correlation).")
    shadow: str | None = Field(None, description="The shadow judge (divergence, correlation).")
    state: Literal["firing", "resolved"]
    fired_window: int = Field(description="The window at whose seal it fired.")
    fired_step: int | None = None
    last_window: int = Field(description="The last window its condition held.")
    message: str = Field(description="The warning logged when it fired.")
    evidence: Evidence


class Disagreement(_Report):
    """A sample where the training judge and a shadow disagree most (training high, shadow low)."""

    index: int = Field(description="Its line in the run's scores files (`index`).")
    window: int
    step: int | None = None
    prompt: str
    train: str
    shadow: str
    train_reward: float | None
    shadow_reward: float | None
    gap: float = Field(description="Percentile of the training score minus percentile of the shadow's, each "
                                   "within the run's recent scores of that judge: from -1 to 1.")
    thumbnail: str | None = Field(None, description="Path of its thumbnail, relative to the run folder.")
    api: str
    request_id: str


class RunReport(_Report):
    run: str
    folder: str | None = Field(description="The run's record folder.")
    windowing: Literal["step", "time"] = Field(
        description="step: windows follow the trainer's `step`; time: no step was sent, windows close after "
        "watch.window_samples samples or watch.window_s seconds.")
    note: str | None = Field(None, description="Why the windows are what they are, when the trainer sent no step.")
    record_error: str | None = Field(None, description="Why the run's record could not be written, when it could not.")
    train: dict[str, list[str]] = Field(description="Training judge -> its shadows, as watched in this run.")
    open_samples: int = Field(description="Samples in the window not yet sealed.")
    pending: int = Field(description="Sampled samples of this run waiting for or in shadow scoring.")
    windows: list[WindowReport]
    alarms: list[AlarmReport]
    disagreements: list[Disagreement] = Field(description="The run's most disagreeing samples with thumbnails.")
    residency: list[ResidencyEvent] = Field(
        default_factory=list, description="Colocated judges' sleeps and wakes since the run's first sample (the "
        "page's residency timeline; judges.NAME.residency).")


class QueueReport(_Report):
    capacity: int
    depth: int
    in_flight: int
    offered: int = Field(description="Samples of watched requests seen.")
    sampled: int
    scored: int
    shed: dict[str, int] = Field(description="Sampled samples dropped, by reason (queue_full, waited_too_long, "
                                             "late_window, shutdown).")


class WatchReport(_Report):
    enabled: bool
    sample_rate: float | None = None
    shadows: dict[str, list[str]] = Field(default_factory=dict)
    queue: QueueReport | None = None
    runs: list[RunReport] = Field(default_factory=list)
