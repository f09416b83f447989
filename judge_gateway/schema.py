"""Score schema v1: the one set of models every API, adapter and client shares.

A failure is never a score: every `JudgeScore` says whether it is `valid`, and an invalid one
carries an `error` with a code instead of a number.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .media import ImageMedia, VideoMedia

SCHEMA_VERSION = 1
# Longest accepted generation prompt (characters); longer is bad input (422 / 400 / 200 {error}).
MAX_PROMPT_CHARS = 100_000


class ErrorCode(str, Enum):
    """Why a judge gave no trustworthy number for a sample."""

    bad_input = "bad_input"
    timeout = "timeout"
    backend_unavailable = "backend_unavailable"
    backend_error = "backend_error"
    parse_error = "parse_error"
    answer_missing = "answer_missing"
    head_error = "head_error"
    not_applicable = "not_applicable"


# Faults of the moment, not of the sample: scoring the same sample again may give a number.
TRANSIENT_ERRORS = frozenset({ErrorCode.timeout, ErrorCode.backend_unavailable, ErrorCode.backend_error})


class ScoreError(BaseModel):
    """The reason a score is invalid."""

    model_config = ConfigDict(extra="forbid")

    code: ErrorCode = Field(description="Machine-readable error class.")
    message: str = Field(description="Human-readable reason, with the detail needed to act on it.")


class TemplateRef(BaseModel):
    """Which prompt template produced a VLM judge's score, down to its bytes."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="Template family, e.g. `cosmos_reason1`.")
    version: str = Field(description="Released version within the family, e.g. `1`.")
    sha256: str = Field(description="SHA-256 of the template file's bytes.")


class JudgeScore(BaseModel):
    """One judge's verdict on one sample."""

    model_config = ConfigDict(extra="forbid")

    judge: str = Field(description="Configured judge name, e.g. `cosmos_reason1`.")
    reward: float | None = Field(
        default=None,
        description="The judge's normalised reward; null when the score is invalid.",
    )
    raw: float | None = Field(
        default=None,
        description=(
            "The judge's native number before normalisation (P(positive answer), weighted mean "
            "aspect score, final score, head logit ...); null when none was produced."
        ),
    )
    valid: bool = Field(description="False when no trustworthy number exists for this sample.")
    error: ScoreError | None = Field(default=None, description="Set exactly when `valid` is false.")
    details: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Judge-specific facts: p_yes, p_no, answer_mass, per-aspect scores, media sampling "
            "(frames, fps, pixels), the reply text of generative judges ..."
        ),
    )
    template: TemplateRef | None = Field(
        default=None, description="The prompt template of a VLM judge; null for local heads."
    )
    model: str | None = Field(default=None, description="The model that produced the score.")
    latency_ms: float = Field(default=0.0, description="Wall time spent on this judge for this sample.")

    @classmethod
    def failure(
        cls,
        judge: str,
        code: ErrorCode,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        template: TemplateRef | None = None,
        model: str | None = None,
        latency_ms: float = 0.0,
        raw: float | None = None,
    ) -> "JudgeScore":
        return cls(
            judge=judge,
            reward=None,
            raw=raw,
            valid=False,
            error=ScoreError(code=code, message=message),
            details=details or {},
            template=template,
            model=model,
            latency_ms=latency_ms,
        )


class SampleResult(BaseModel):
    """All judges' scores for one sample, and their combination."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(description="Position of the sample in the request.")
    group_id: str | None = Field(default=None, description="The sample's group id, echoed.")
    scores: dict[str, JudgeScore] = Field(description="Judge name -> that judge's score.")
    reward: float | None = Field(
        default=None,
        description=(
            "Combined reward of the judges (weighted per the combine policy); null when the "
            "policy makes the sample invalid."
        ),
    )
    valid: bool = Field(
        description=(
            "False when any judge's score was invalid (even if the policy still produced a "
            "number, e.g. with `on_invalid = \"fill\"`)."
        )
    )
    invalid_judges: list[str] = Field(
        default_factory=list, description="Names of the judges whose score is invalid."
    )
    group_reward: float | None = Field(
        default=None,
        description=(
            "The combined reward after the request's group transform (rank, ordinal rank or "
            "z-score within the sample's group); null without a transform or for an invalid sample."
        ),
    )


class Timings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    total_ms: float = Field(description="Wall time of the whole request inside the gateway.")


class CombineInfo(BaseModel):
    """How the per-judge rewards became one number, echoed for reproducibility."""

    model_config = ConfigDict(extra="forbid")

    policy: str = Field(description="`weighted_mean` or `sum`.")
    on_invalid: str = Field(description="`invalidate`, `skip` or `fill`.")
    fill_value: float | None = Field(default=None, description="Used with `on_invalid = \"fill\"`.")
    weights: dict[str, float] = Field(description="Judge name -> weight used.")
    group_transform: str = Field(description="`none`, `rank`, `ordinal_rank` or `zscore`.")


class RewardResponse(BaseModel):
    """The reply of `POST /v1/rewards`."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = Field(default=SCHEMA_VERSION, description="Version of this schema.")
    id: str = Field(description="Request id (the caller's, or a generated one).")
    judges: list[str] = Field(description="The judges that scored this request, in order.")
    results: list[SampleResult] = Field(description="One entry per sample, in request order.")
    combine: CombineInfo = Field(description="The combine policy and weights this request was scored with.")
    timings: Timings = Field(description="Where the time went.")


class ResidencyInfo(BaseModel):
    """A judge's residency (config: `judges.NAME.residency`), as `GET /v1/judges`, `/readyz` and
    `GET /v1/residency` report it. Judges on one backend share one unit (its vLLM servers)."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["resident", "colocated"] = Field(description="`resident`: never sleeps; `colocated`: may sleep.")
    state: Literal["awake", "draining", "sleeping", "asleep", "waking", "failed"] = Field(
        "awake", description="`draining`: a sleep waits for the calls in flight; `failed`: a sleep or wake "
        "failed (the judge is not ready; it is being recovered).")
    reason: str | None = Field(None, description="What put it in this state.")
    unit: str | None = Field(None, description="What sleeps: `head:NAME` or `backend:NAME`.")
    judges: list[str] = Field(default_factory=list, description="The judges that sleep and wake with it.")
    level: int | None = Field(None, description="What a sleep frees (1 or 2, config/residency.py).")
    idle_sleep_s: float | None = Field(None, description="It sleeps after this long without work.")
    wakes: int = Field(0, description="Wakes that finished.")
    wake_failures: int = Field(0, description="Wakes that failed or ran out of time.")
    sleeps: int = Field(0, description="Sleeps that finished.")
    sleeps_refused: int = Field(0, description="Sleeps refused (work in flight past drain_timeout_s, or the "
                                               "server was busy); nothing was dropped.")
    sleep_failures: int = Field(0, description="Sleeps that failed part way.")
    last_wake_s: float | None = Field(None, description="Seconds the last wake took.")
    asleep_s: float = Field(0.0, description="Seconds asleep since the gateway started.")
    in_flight: int = Field(0, description="Calls scoring on it now.")
    waiting: int = Field(0, description="Calls waiting for it to be awake.")
    replicas: list[dict[str, Any]] | None = Field(None, description="A backend's servers: each one's state as "
                                                                     "last seen.")
    last: dict[str, Any] = Field(default_factory=dict, description="The last transition and its facts (bytes "
                                 "freed, RSS or device memory before and after, seconds).")


class ResidencyEvent(BaseModel):
    """A sleep or wake on the residency timeline (`GET /v1/residency`, the watch page)."""

    model_config = ConfigDict(extra="forbid")

    at: float = Field(description="Unix time it ended.")
    unit: str
    judges: list[str]
    event: Literal["sleep", "wake", "sleep_refused", "sleep_failed", "wake_failed"]
    trigger: str = Field(description="`told` (POST /v1/residency), `header`, `flow_factory`, `idle`, `request` "
                                     "(a call woke it), `restart`.")
    seconds: float | None = Field(None, description="How long the sleep or wake took.")
    reason: str | None = None


class JudgeInfo(BaseModel):
    """One configured judge, as `GET /v1/judges` lists it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The configured judge name (`[judges.NAME]`).")
    kind: str = Field(description="`yes_no`, `rubric`, `final_score`, `critic`, or a head kind.")
    weight: float = Field(description="Its weight in the combined reward.")
    backend: str | None = Field(default=None, description="The backend a VLM judge runs on; null for heads.")
    model: str | None = Field(default=None, description="The served model (VLM) or the head's model.")
    template: TemplateRef | None = Field(default=None, description="The pinned template of a VLM judge.")
    media: list[str] = Field(default_factory=list, description="Media the judge needs per sample.")
    ready: bool | None = Field(
        default=None, description="Whether its backend answered the last readiness probe."
    )
    ready_reason: str | None = Field(default=None, description="Why it is not ready (or still starting).")
    residency: ResidencyInfo | None = Field(default=None, description="Resident, or colocated with its state "
                                            "(asleep, awake, ...), wakes and time asleep.")


class ErrorBody(BaseModel):
    """Body of every 4xx/5xx reply of the native API."""

    error: dict[str, Any] = Field(
        description="`{type, message, [field]}`: what was wrong, and where."
    )


# --- Requests -------------------------------------------------------------------------------
# Media types validate cheaply (magic bytes and headers); pixels are decoded once, on demand.


class SampleInput(BaseModel):
    """One generated sample to score."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    prompt: str = Field("", description="The generation prompt (or edit instruction).", max_length=MAX_PROMPT_CHARS)
    image: ImageMedia | None = Field(None, description="The generated image.")
    video: VideoMedia | None = Field(None, description="The generated video.")
    condition_images: list[ImageMedia] = Field(
        default_factory=list,
        description="Condition images, e.g. the source image of an edit (first).",
        max_length=16,
    )
    condition_videos: list[VideoMedia] = Field(
        default_factory=list,
        description="Condition videos, e.g. the source video of a video edit (first).",
        max_length=4,
    )
    group_id: str | None = Field(None, description="GRPO group id for group transforms.", max_length=256)
    metadata: dict[str, Any] = Field(default_factory=dict, description="Judge-specific per-sample inputs.")


class RewardRequest(BaseModel):
    """The body of `POST /v1/rewards`."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    samples: list[SampleInput] = Field(min_length=1, description="The samples to score.")
    judges: list[str] | None = Field(
        None,
        description="Judge names to run; omitted: every judge configured with default = true.",
    )
    group_transform: Literal["none", "rank", "ordinal_rank", "zscore"] = Field(
        "none",
        description=(
            "Transform of the combined reward within each group of samples sharing a group_id: "
            "rank (average rank / (n - 1), ties share their mean rank), ordinal_rank (ordinal "
            "rank / n, ties by position: Flow-Factory's PickScore_Rank) or zscore "
            "((x - mean) / std). Written to group_reward."
        ),
    )
    request_id: str | None = Field(None, description="Your id for this request, echoed.", max_length=256)
    run: str | None = Field(
        None, min_length=1, max_length=128,
        description="The training run these samples come from (the reward-hacking watch keeps one record and "
                    "one set of windows per run); the X-Judge-Gateway-Run header when absent.",
    )
    step: int | None = Field(
        None, ge=0, le=2**53,
        description="The trainer's step (the watch's windows follow it); the X-Judge-Gateway-Step header when absent.",
    )
