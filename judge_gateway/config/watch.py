"""The [watch] config section: shadow judges score a sampled share of live training traffic, off
the critical path, and per-window statistics raise alarms (judge_gateway/watch/; rules in
docs/guides/watch.md).

    [watch]            on/off, sample rate, queue bound, shadow concurrency, windows, the record
    [watch.shadows]    training judge -> the shadow judges that watch it
    [watch.alarms]     each alarm's thresholds
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import Strict


class WatchAlarms(Strict):
    """Thresholds of the alarms. Every rule compares the last `windows` sealed windows (pooled)
    with a reference: the `windows` windows before them (divergence) or the run's baseline
    windows (correlation, invalid rate, drift); a condition must hold at `persist` consecutive
    window seals before its alarm fires."""

    windows: int = Field(3, ge=1, le=100, description="N: windows pooled on each side of a comparison.")
    persist: int = Field(2, ge=1, le=100, description="Consecutive window seals a condition must hold to fire.")
    min_samples: int = Field(16, ge=4, description="Valid scores needed on each side of a comparison; fewer: "
                             "the rule says `insufficient` and does not fire.")
    # divergence: the training reward rises while its shadow falls or stays flat
    rise_auc: float = Field(0.65, gt=0.5, le=1.0, description="Divergence: P(a recent training score beats an "
                            "earlier one) at least this (0.5: no change).")
    rise_z: float = Field(3.0, gt=0, description="Divergence: and the rise's Mann-Whitney z at least this.")
    shadow_share: float = Field(0.25, ge=0.0, le=1.0, description="Divergence: the shadow's rise (its AUC - 0.5) "
                                "is at most this share of the training judge's (negative: it fell).")
    # correlation collapse
    min_baseline_corr: float = Field(0.3, gt=-1.0, lt=1.0, description="Correlation: judged only when training and "
                                     "shadow agreed this much (Spearman) in the baseline windows.")
    corr_drop: float = Field(0.4, gt=0.0, le=2.0, description="Correlation: recent Spearman at least this far below "
                             "the baseline's.")
    corr_z: float = Field(3.0, gt=0, description="Correlation: and the drop's Fisher z at least this.")
    # invalid-rate jump
    invalid_jump: float = Field(0.05, gt=0.0, le=1.0, description="Invalid rate: recent rate at least this far "
                                "(absolute) above the baseline's.")
    invalid_z: float = Field(3.0, gt=0, description="Invalid rate: and the two-proportion z at least this.")
    # distribution drift
    drift_ks: float = Field(0.3, gt=0.0, le=1.0, description="Drift: Kolmogorov-Smirnov distance of the recent "
                            "scores from the baseline's at least this.")
    drift_p: float = Field(1e-3, gt=0.0, lt=1.0, description="Drift: and the KS test's p-value at most this.")
    drift_on: list[Literal["train", "shadow"]] = Field(
        default_factory=lambda: ["shadow"],
        description="Whose scores the drift alarm watches: a training reward is meant to move as the policy "
        "learns, so by default only the shadows'.")


class WatchConfig(Strict):
    enabled: bool = Field(False, description="Score a sampled share of training traffic with shadow judges.")
    shadows: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Training judge -> the shadow judges that score its sampled samples (judges the trainer "
        "does not optimise).")
    sample_rate: float = Field(0.1, gt=0.0, le=1.0, description="Share of a watched request's samples the shadows score.")
    seed: int | None = Field(None, description="Seed of the sampling draw (unset: a fresh one per process).")
    queue_size: int = Field(256, ge=1, description="Sampled samples waiting for the shadows; beyond: shed (counted).")
    queue_bytes: int = Field(512 * 1024 * 1024, ge=1 << 20, description="Media bytes those samples may hold "
                             "(encoded bytes and decoded pixels); beyond: shed (counted).")
    max_concurrency: int = Field(1, ge=1, le=64, description="Shadow requests in flight at once.")
    batch_size: int = Field(8, ge=1, le=256, description="Samples per shadow request.")
    backend_headroom: float = Field(
        0.25, ge=0.0, lt=1.0,
        description="A shadow request to a VLM backend waits while fewer than this share of the backend's "
        "slots (replicas x max_concurrency) are free: the rest is the trainer's.")
    max_wait_s: float = Field(30.0, gt=0, description="A sampled sample not started within this is shed (counted).")
    # windows
    steps_per_window: int = Field(1, ge=1, description="Trainer steps per window (when the trainer sends `step`).")
    window_samples: int = Field(256, ge=1, description="Without steps: a window closes after this many sampled samples ...")
    window_s: float = Field(60.0, gt=0, description="... or this many seconds; also, with steps, how long a window "
                            "waits for a later step before it closes.")
    max_step_jump: int = Field(
        1000, ge=1, description="With steps: a sample whose step is more than this beyond the run's highest "
        "windowed step is not windowed (shed as `step_jump`) until resync_requests requests agree on the new "
        "steps: one request cannot move a run's windows far ahead.")
    resync_requests: int = Field(
        3, ge=2, le=1000, description="With steps: distinct requests in a row whose steps lie outside the run's "
        "windows (far ahead, or behind a sealed window) after which the windows follow them (a trainer that "
        "resumed from a checkpoint or restarted).")
    baseline_windows: int = Field(3, ge=1, le=100, description="The run's first windows: the reference of the "
                                  "correlation, invalid-rate and drift alarms.")
    history_windows: int = Field(2000, ge=10, description="Windows per run kept in memory (and in watch.json).")
    max_runs: int = Field(32, ge=1, description="Runs held in memory; the longest idle goes first (its record stays).")
    # the record
    folder: str = Field("watch", description="Where each run's record folder is written (watch/RUN/).")
    max_file_bytes: int = Field(64 * 1024 * 1024, ge=4096, description="scores.jsonl is rotated past this size.")
    keep_files: int = Field(0, ge=0, description="Rotated score files kept per run (0: all).")
    max_run_folders: int = Field(
        256, ge=0, description="Run folders kept under `folder`: when a run's record opens, the least recently "
        "written beyond this many are removed (never one a gateway is writing). 0: no bound.")
    max_run_age_days: float = Field(
        90.0, ge=0, description="Run folders not written for this many days are removed when a run's record "
        "opens (never one a gateway is writing). 0: no bound.")
    thumbnails_per_window: int = Field(8, ge=0, le=256, description="Thumbnails kept per window: its samples where "
                                       "training and shadow disagree most.")
    max_thumbnails: int = Field(5000, ge=0, description="Thumbnails per run at most.")
    thumbnail_px: int = Field(160, ge=16, le=1024, description="Longest side of a thumbnail (per video frame).")
    video_frames: int = Field(3, ge=1, le=16, description="Frames of a video shown side by side in its thumbnail.")
    alarms: WatchAlarms = Field(default_factory=WatchAlarms, description="Each alarm's thresholds.")

    @model_validator(mode="after")
    def _shadows(self) -> WatchConfig:
        for train, shadows in self.shadows.items():
            if not shadows:
                raise ValueError(f"shadows.{train}: names no shadow judge")
            if train in shadows:
                raise ValueError(f"shadows.{train}: a judge cannot shadow itself")
            if len(set(shadows)) != len(shadows):
                raise ValueError(f"shadows.{train}: a shadow is named twice")
        if self.enabled and not self.shadows:
            raise ValueError("enabled = true but `shadows` maps no training judge to shadow judges")
        return self

    @property
    def shadow_judges(self) -> list[str]:
        """Every shadow judge, each once, in config order."""
        return list(dict.fromkeys(s for shadows in self.shadows.values() for s in shadows))


def check_watch(cfg: WatchConfig, judges: set[str]) -> list[str]:
    """Problems of [watch] across sections: every judge it names must be configured."""
    problems = []
    known = ", ".join(sorted(judges)) or "none configured"
    for train, shadows in cfg.shadows.items():
        if train not in judges:
            problems.append(f"watch.shadows.{train}: no such judge (configured: {known})")
        for shadow in shadows:
            if shadow not in judges:
                problems.append(f"watch.shadows.{train}: no such shadow judge {shadow!r} (configured: {known})")
    return problems
