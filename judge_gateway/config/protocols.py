"""Config sections of the drop-in protocol adapters and the result store.

    [store]                          memory (default) or redis; TTL and size bound
    [cosmos_rl]                      queue bound, invalid-sample policy, transient retries, request timeout
    [cosmos_rl.rewards.NAME]         cosmos-rl reward name -> judge + legacy score keys (+ its own invalid policy)
    [cosmos_rl.latents]              Wan VAE latent decoder worker (interpreter, one checkpoint per VAE)
    [flow_factory.profiles.NAME]     a weighted set of judges served at {path_prefix}/NAME

The reward-name mapping is data: a name whose judge is not configured is refused at enqueue
("reward X is not configured on this gateway"), so defaults can name judges that a given
deployment does not run.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from .base import Strict


class QueueConfig(Strict):
    """The durable queue of accepted cosmos-rl work (store.kind = redis): a Redis Stream with one
    consumer group shared by every gateway replica on that Redis. An entry is acknowledged only
    when its result is stored; a replica that dies leaves its entries pending, and another claims
    them (XAUTOCLAIM) once they have been idle `visibility_timeout_s` and scores them."""

    enabled: bool = Field(False, description="Put accepted cosmos-rl work on the Redis Stream (needs kind = redis).")
    visibility_timeout_s: float = Field(
        30.0, ge=2.0, description="An entry no live replica has touched for this long is claimed by another. "
        "Live replicas touch theirs every 1/4 of it (at most every 5 s)."
    )
    claim_interval_s: float = Field(2.0, gt=0, description="How often a replica looks for entries to claim.")
    max_backlog: int = Field(4096, gt=0, description="Accepted, not yet stored entries on the stream; beyond: 503.")
    max_deliveries: int = Field(
        3, ge=1, description="Times an entry may be handed out (read, then claimed after a replica stopped touching "
        "it); beyond, it is stored as failed: a request that kills its replica is not scored again and again."
    )


class StoreConfig(Strict):
    kind: Literal["memory", "redis"] = Field("memory", description="memory: this process only; redis: shared, survives restarts.")
    url: str | None = Field(None, description="redis://[:password@]host:port/db (kind = redis).")
    url_env: str | None = Field("JG_REDIS_URL", description="Environment variable that overrides `url` (a JG_ "
                                "name also reads its deprecated JUDGE_GATEWAY_ spelling, with a warning).")
    key_prefix: str = Field("judge-gateway:", description="Prefix of every key the gateway writes.")
    # Retention: a trainer that falls behind must not outlive its results. cosmos-rl's service keeps
    # 100k results with no TTL; we keep as many, a day unpulled, and say `expired` (not
    # `unknown`) for a key that was stored and has gone.
    ttl_s: float = Field(86400.0, gt=0, description="How long a result (or failure) nobody has pulled stays pullable.")
    pulled_ttl_s: float = Field(
        3600.0, gt=0,
        description="After its first successful pull a result stays this long (never longer than ttl_s): "
        "re-pulls and the request's other reward types.",
    )
    max_entries: int = Field(
        100000, gt=0,
        description="Entries kept; beyond, pulled results go first (oldest first), then the oldest unpulled.",
    )
    max_bytes: int = Field(
        1 << 30, gt=0,
        description="memory: bound on the stored JSON; evicts as max_entries does (redis: use its maxmemory).",
    )
    forget_after_s: float = Field(
        7 * 86400.0, gt=0,
        description="How long a key that expired or was evicted is remembered, so a pull says `expired`, not `unknown`.",
    )

    max_connections: int = Field(
        64, ge=2, description="kind = redis: connections to Redis this process keeps at most. When all are busy an "
        "operation waits for one (pool_wait_s) instead of failing: a Redis command takes well under a millisecond, "
        "so 64 serve hundreds of trainers polling at once (each durable-queue consumer holds one while it waits "
        "for work).")
    pool_wait_s: float = Field(
        10.0, gt=0, description="kind = redis: how long an operation waits for a free connection before it fails "
        "(a pull answers 503 + Retry-After, an enqueue 503).")
    persistence: Literal["refuse", "warn", "off"] = Field(
        "refuse",
        description="kind = redis: check (CONFIG GET) that Redis keeps what it acknowledges through a kill, i.e. has "
        "AOF (appendonly yes; RDB snapshots alone lose what came since the last one). refuse: do not start without "
        "it, and answer a cosmos-rl enqueue 503 (no uuid given) while Redis runs without it (looked up again every "
        "10 s); warn: log at start-up and accept anyway; off: no check.",
    )
    queue: QueueConfig = Field(
        default_factory=QueueConfig, description="The durable queue of accepted cosmos-rl work (Redis Streams)."
    )

    @model_validator(mode="after")
    def _queue_needs_redis(self) -> StoreConfig:
        if self.queue.enabled and self.kind != "redis":
            raise ValueError("store.queue.enabled needs store.kind = 'redis' (the queue is a Redis Stream)")
        return self

    def resolved_url(self) -> str | None:
        from ..env_vars import getenv

        return (getenv(self.url_env) if self.url_env else None) or self.url


_SOURCE_RE = re.compile(r"^(reward|raw|details\.[A-Za-z0-9_.-]+)$")


def details_path(v: str | None) -> str | None:
    """A `details.<key>` path (a peer_source), or None."""
    if v is not None and not (v.startswith("details.") and _SOURCE_RE.match(v)):
        raise ValueError(f"{v!r} is not `details.<key>`")
    return v


class TagSplit(Strict):
    """A per-tag legacy key: one list per tag; a sample's value goes in its own tag's list."""

    tag: str = Field(description="`details.<key>` holding the sample's tag.")
    tags: tuple[str, ...] = Field(min_length=1, description="Every tag, in cosmos-rl's order.")
    not_applicable: float = Field(-10.0, description="Value in the other tags' lists (cosmos-rl's -10.0).")

    @field_validator("tag")
    @classmethod
    def _tag(cls, v: str) -> str:
        if not v.startswith("details."):
            raise ValueError(f"{v!r} is not `details.<key>`")
        return v


# What an invalid sample's legacy value is. cosmos-rl's trainer reads only `scores` (never
# `valid`) and never re-enqueues, so a fill is trained on: it must not move GRPO advantages.
InvalidPolicy = Literal["group_mean", "value", "sentinel"]
SENTINEL_VALUE = -1.0  # what cosmos-rl's reward service writes for a failed sample
SENTINEL_LABEL = "Error"


class LegacyKey(Strict):
    """Where one legacy score key's value comes from in a JudgeScore."""

    source: str = Field(
        description="`reward`, `raw` or `details.<key>`; a bare string in `keys` is short for {source = ...}."
    )
    peer_source: str | None = Field(
        None,
        description="`details.<key>` holding the number the peer's own code computes for this sample "
        "(e.g. cosmos-rl's two-logit softmax), reported whenever the judge wrote it, valid or not: the "
        "legacy value follows the peer wherever the peer's code returns a number (docs: Conformance). "
        "Absent: `source` of a valid score, else the invalid policy.",
    )
    labels: tuple[str, str] | None = Field(
        None, description="Emit a label instead of the number: [below threshold, at or above]."
    )
    threshold: float = Field(0.5, description="With `labels`: the number at or above which the second label is emitted.")
    scale: float = Field(1.0, description="Multiply the number by this (cosmos-rl's unified_reward is score / 5).")
    by_tag: TagSplit | None = Field(
        None, description="Emit a dict of lists, one per tag (cosmos-rl's gen_eval_group) instead of a list."
    )

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        if not _SOURCE_RE.match(v):
            raise ValueError(f"{v!r} is not `reward`, `raw` or `details.<key>`")
        return v

    @field_validator("peer_source")
    @classmethod
    def _peer_source(cls, v: str | None) -> str | None:
        return details_path(v)

    @model_validator(mode="after")
    def _one_shape(self) -> LegacyKey:
        if self.labels is not None and self.by_tag is not None:
            raise ValueError("a key is either labels or by_tag, not both")
        return self


class InvalidFill(Strict):
    """One reward's resolved invalid-sample policy."""

    policy: InvalidPolicy
    value: float
    label: str


class CosmosReward(Strict):
    judge: str = Field(description="The configured judge that scores this cosmos-rl reward.")
    gpu_judge: str | None = Field(
        None, description="The judge that scores it instead when the request sets `ocr_use_gpu: true` (cosmos-rl's "
        "OCR on the GPU), e.g. a second ocr judge with device = cuda. Unset: the request's "
        "ocr_use_gpu is reported (the envelope's `notes`, /metrics), and `judge` scores."
    )
    keys: dict[str, LegacyKey] = Field(min_length=1, description="Legacy score key -> its source.")
    media: Literal["image", "video"] | None = Field(
        None, description="Medium the reward needs; default: the judge's own (a video judge needs video)."
    )
    on_invalid: InvalidPolicy | None = Field(None, description="Overrides cosmos_rl.on_invalid for this reward.")
    fill_value: float | None = Field(None, description="Overrides cosmos_rl.fill_value for this reward.")
    fill_label: str | None = Field(None, description="Overrides cosmos_rl.fill_label for this reward.")

    @field_validator("keys", mode="before")
    @classmethod
    def _short_form(cls, v: Any) -> Any:
        # `keys = {hpsv2 = "raw"}` is short for `{hpsv2 = {source = "raw"}}`.
        if isinstance(v, dict):
            return {k: ({"source": s} if isinstance(s, str) else s) for k, s in v.items()}
        return v


GENEVAL_TAGS = ("single_object", "two_object", "counting", "colors", "position", "color_attr")


def _r(judge: str, media: str | None = None, **keys: Any) -> dict[str, Any]:
    return {"judge": judge, "keys": keys, **({"media": media} if media else {})}


# The reward names and score keys of cosmos-rl's reward service. Heads report their native number as `raw`
# (its lists hold native numbers; trainers clip and weight them on their side).
DEFAULT_COSMOS_REWARDS: dict[str, dict[str, Any]] = {
    # Our yes/no judges read logprobs, not logits: yes_logit/no_logit carry log P(yes) and
    # log P(no). With the judge's counting = "exact" (configs/cosmos_rl.toml) their difference is
    # cosmos-rl's logit difference, so a softmax over the pair gives its no_score; with
    # "variants" each also sums the word's case/space variants. cosmos-rl reports that softmax
    # whatever mass the pair holds; the judge marks a pair below its min_answer_mass invalid but
    # records the pair's numbers, which these keys report (peer_source).
    "cosmos_reason1": _r("cosmos_reason1", "video",
                         prediction={"source": "reward", "labels": ["Bad", "Good"], "threshold": 0.5,
                                     "peer_source": "details.p_positive"},
                         no_score={"source": "reward", "peer_source": "details.p_positive"},
                         yes_logit={"source": "details.logprob_yes", "peer_source": "details.logprob_yes"},
                         no_logit={"source": "details.logprob_no", "peer_source": "details.logprob_no"}),
    "dance_grpo": _r("videoalign", "video", vq_reward="details.vq", mq_reward="details.mq",
                     ta_reward="details.ta", overall_reward="raw"),
    "hpsv2": _r("hpsv2", hpsv2="raw"),
    "hpsv3": _r("hpsv3", hpsv3="raw"),
    # cosmos-rl's service reports PickScore / 26 (exp(logit_scale) x cosine / 26), whatever the judge's
    # own normalisation.
    "pickscore": _r("pickscore", pickscore={"source": "raw", "scale": 1 / 26}),
    "image_reward": _r("image_reward", image_reward="raw"),
    # cosmos-rl scores a double-quoted target of spaces only 1.0; the judge marks it not_applicable
    # and records that number (details.reference_reward)
    "ocr": _r("ocr", ocr_reward={"source": "reward", "peer_source": "details.reference_reward"}),
    # cosmos-rl's own GenEval numbers (the judge's details.cosmos_rl: its partial score, GenEval's
    # correct over the includes, strict; geneval_only_strict forces correct to 0), whatever
    # `options.reward` makes raw. gen_eval_group: cosmos-rl's dict of the six tags' lists, that
    # correct (0/1) in the sample's own tag and -10.0 in the others.
    "gen_eval": _r("gen_eval", gen_eval_score="details.cosmos_rl.score", gen_eval_reward="details.cosmos_rl.correct",
                   gen_eval_strict="details.cosmos_rl.strict",
                   gen_eval_group={"source": "details.cosmos_rl.correct", "by_tag": {
                       "tag": "details.tag", "tags": list(GENEVAL_TAGS), "not_applicable": -10.0}}),
    # cosmos-rl's service: the 1-5 "Final Score" / 5.
    # Where the service's own pattern reads a number (the judge's peer_regex), that number.
    "unified_reward": _r("unified_reward", unified_reward={"source": "raw", "scale": 0.2,
                                                           "peer_source": "details.peer_score"}),
}


class WanVaeConfig(Strict):
    """One Wan VAE (diffusers AutoencoderKLWan format): a local dir or a hub id, fetched on first use."""

    checkpoint: str = Field(description="AutoencoderKLWan checkpoint: a local dir or a hub id (downloaded on first use).")
    subfolder: str | None = Field(None, description="e.g. `vae` inside a full Wan pipeline checkpoint.")
    load_mean_std: bool = Field(
        False,
        description="cosmos-rl's `load_mean_std`: the trainer's latents are normalised once more with "
        "dataset statistics; undo it (z * std + mean, per channel, per latent frame for videos) before "
        "the VAE's own denormalisation. Needs images_mean_std and video_mean_std. Settable by "
        "POST /api/reward/latent_attr.",
    )
    images_mean_std: str | None = Field(
        None, description="torch-saved (mean, std), C values each, for T=1 latents: a local file or `repo_id/filename`."
    )
    video_mean_std: str | None = Field(
        None, description="torch-saved (mean, std), [C, T_max] each, for video latents: a local file or `repo_id/filename`."
    )

    @model_validator(mode="after")
    def _stats(self) -> WanVaeConfig:
        if self.load_mean_std and not (self.images_mean_std and self.video_mean_std):
            raise ValueError("load_mean_std = true needs images_mean_std and video_mean_std")
        return self


# Latent channels -> the decoder that takes them: cosmos-rl's service picks its decoder the same way.
WAN_CHANNELS: dict[int, str] = {16: "wan2_1", 48: "wan2_2"}
WAN_NAMES = {"wan2_1": "Wan2.1 (16 channels, spatial x8)", "wan2_2": "Wan2.2 (48 channels, spatial x16)"}


class LatentDecoderConfig(Strict):
    python: str | None = Field(
        None, description="Interpreter with torch (+ diffusers to decode), e.g. .venv-latents/bin/python. "
        "Also loads torch-saved tensors (weights_only=True). Unset: latent and torch payloads get 400."
    )
    wan2_1: WanVaeConfig | None = Field(None, description="Decoder of 16-channel latents (Wan2.1 VAE).")
    wan2_2: WanVaeConfig | None = Field(None, description="Decoder of 48-channel latents (Wan2.2 VAE).")
    checkpoint: str | None = Field(None, description="Short for wan2_1.checkpoint.")
    subfolder: str | None = Field(None, description="Short for wan2_1.subfolder.")
    device: str = Field("cpu", description="torch device of the VAE (`cpu`, `cuda`, `cuda:N`).")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="The VAE's weights and inputs.")
    batch_size: int = Field(1, gt=0, description="Samples decoded per VAE call.")
    denormalize: bool = Field(
        True, description="Apply the VAE's latents_mean/latents_std before decoding, as Wan pipelines do."
    )
    to_uint8: Literal["truncate", "round"] = Field(
        "truncate",
        description="Pixels = (x.clamp(-1, 1) + 1) / 2 * 255, then truncated to uint8 as cosmos-rl's "
        "cast does (`round`: to the nearest level).",
    )
    start_timeout_s: float = Field(120.0, gt=0, description="Worker start, torch loads, and (on top of timeout_s) the VAE load.")
    timeout_s: float = Field(900.0, gt=0, description="Per decode call.")
    retry_failed_load_s: float = Field(
        60.0, ge=0, description="After a decoder failed to load, enqueues of its latents get 424 for this long."
    )

    @model_validator(mode="after")
    def _short_form(self) -> LatentDecoderConfig:
        if self.checkpoint is not None:
            if self.wan2_1 is not None:
                raise ValueError("give either checkpoint/subfolder or [cosmos_rl.latents.wan2_1], not both")
            self.wan2_1 = WanVaeConfig(checkpoint=self.checkpoint, subfolder=self.subfolder)
            self.checkpoint = self.subfolder = None  # moved: a dump of this config loads again
        elif self.subfolder is not None:
            raise ValueError("subfolder without checkpoint")
        if self.wan2_2 is not None and self.wan2_2.load_mean_std:
            raise ValueError("wan2_2.load_mean_std: cosmos-rl applies load_mean_std to Wan2.1 latents only")
        return self

    def decoders(self) -> dict[int, tuple[str, WanVaeConfig]]:
        """Latent channels -> (decoder name, its VAE) for the configured decoders."""
        out = {}
        for channels, name in WAN_CHANNELS.items():
            vae = getattr(self, name)
            if vae is not None:
                out[channels] = (name, vae)
        return out


class CosmosRLConfig(Strict):
    enabled: bool = Field(True, description="Serve /api/reward/ping, enqueue, pull and latent_attr.")
    max_pending: int = Field(64, gt=0, description="Accepted-but-unfinished requests; beyond: 503.")
    request_timeout_s: float = Field(
        1800.0, gt=0,
        description="An accepted request ends by then; a pending entry older than this (its gateway died) reads as failed.",
    )
    on_invalid: InvalidPolicy = Field(
        "group_mean",
        description="An invalid sample's legacy value (the trainer trains on it): group_mean (the mean of the "
        "valid values of that key among the request's samples with the same prompt, i.e. its GRPO group; "
        "a group with none valid gets one constant), value (fill_value / fill_label), sentinel (cosmos-rl's "
        "-1.0 / \"Error\").",
    )
    fill_value: float = Field(0.0, description="on_invalid = value: the number; group_mean: the constant of an all-invalid request.")
    fill_label: str = Field("Invalid", description="Label (e.g. `prediction`) for fill_value.")
    retry_attempts: int | None = Field(
        None, ge=0, description="A cap on re-scores of a sample whose judge failed transiently (timeout, "
        "backend_unavailable, backend_error) before it is filled; none (the default): re-scored with back-off "
        "until request_timeout_s (backend calls retry until it too), so a fault shorter than that gives real "
        "scores, not fills."
    )
    retry_backoff_s: float = Field(0.5, gt=0, description="First wait before a re-score; doubles each time.")
    retry_backoff_max_s: float = Field(8.0, gt=0, description="Longest wait between re-scores.")
    max_batch: int = Field(1024, gt=0, description="Largest batch B of one enqueue; larger is refused with 400.")
    on_failed: Literal["fill", "error"] = Field(
        "fill",
        description="A pull of a request that failed as a whole (deadline passed, latent decoding failed, its "
        "gateway died): fill = 200 with every sample invalid and its legacy values filled by the reward's "
        "on_invalid policy (cosmos-rl's trainer never drops a uuid it cannot pull: an error stalls its "
        "training on it); error = 500 {status: failed, reason}.",
    )
    rewards: dict[str, CosmosReward] = Field(
        default_factory=dict,
        description="cosmos-rl reward name -> the judge that scores it and its legacy score keys; merged over the "
        "names cosmos-rl's reward service serves (a name given here replaces the built-in one). Any "
        "configured judge also answers to its own name.",
    )
    latents: LatentDecoderConfig = Field(
        default_factory=LatentDecoderConfig,
        description="The torch worker that loads torch payloads and decodes Wan latents into pixels.",
    )
    pending_status: Literal[400, 425] = Field(
        425,
        description="The status of a pull whose result is not ready. 425 (Too Early, the default): "
        "cosmos-rl's trainer (0.4.7, make_request_with_retry) retries 408/425/429 inside the fetch with "
        "backoff and gives up at once on any other 4xx, so 425 is what it polls through; cosmos-rl's example "
        "clients poll on any non-200. 400: the reward service's README's '400 Not Ready', for clients "
        "written to that README. The body says `status: pending` either way.",
    )
    default_pull_type: str = Field(
        "dance_grpo", description="The reward a pull without a `type` field asks for (cosmos-rl's default)."
    )
    refuse_unready: bool = Field(
        True,
        description="Refuse an enqueue whose judge cannot score now, before a uuid is given: 424 when a "
        "head failed to load (a retry will not help; a head loading for the first time is waited for, "
        "load_wait_s), 503 + Retry-After when a VLM backend is unreachable. "
        "false: accept, and the samples come back invalid.",
    )
    load_wait_s: float = Field(
        45.0, gt=0,
        description="With refuse_unready: how long an enqueue waits for a head's first model load before "
        "a uuid is given (ready: accepted; failed: 424 with the reason). Still loading by then: 503 + "
        "Retry-After, which cosmos-rl's trainer retries. Below the trainer's enqueue read timeout (60 s at "
        "least) so that the wait ends in an answer.",
    )

    def fill_of(self, reward: CosmosReward) -> InvalidFill:
        """The reward's own policy where it sets one, else this section's."""
        return InvalidFill(
            policy=reward.on_invalid or self.on_invalid,
            value=self.fill_value if reward.fill_value is None else reward.fill_value,
            label=self.fill_label if reward.fill_label is None else reward.fill_label,
        )

    @model_validator(mode="after")
    def _defaults(self) -> CosmosRLConfig:
        merged = {k: CosmosReward.model_validate(v) for k, v in DEFAULT_COSMOS_REWARDS.items()}
        merged.update(self.rewards)
        self.rewards = merged
        return self


class FlowFactoryProfile(Strict):
    judges: dict[str, float] = Field(min_length=1, description="Judge name -> weight.")
    mode: Literal["pointwise", "groupwise"] = Field(
        "pointwise", description="pointwise: each sample's reward on its own; groupwise: the request is one "
        "group and group_transform ranks or standardises it."
    )
    combine: Literal["weighted_mean", "sum"] = Field(
        "weighted_mean", description="How the profile's judges' rewards become one (weights: `judges`)."
    )
    group_transform: Literal["none", "rank", "ordinal_rank", "zscore"] = Field(
        "ordinal_rank",
        description="groupwise: the request is one group. Default as Flow-Factory's groupwise "
        "PickScore_Rank: ordinal rank / n (ties by position); rank = average rank / (n - 1); none: "
        "the judges' rewards as they are (a groupwise judge, e.g. a Flow-Factory GroupwiseRewardModel "
        "behind kind = \"flow_factory_model\", scored the group itself).",
    )
    on_invalid: Literal["fill", "mean", "error"] = Field(
        "mean",
        description="A sample with an invalid judge score: fill (fill_value), mean (the mean of the "
        "request's valid rewards: neutral in a group), error (the request fails with {error}).",
    )
    fill_value: float = Field(0.0, description="on_invalid = fill: the reward of such a sample.")
    video_fps: float = Field(16.0, gt=0, description="Frame rate of frame-list videos (the protocol sends none).")
    peer_source: str | None = Field(
        None, description="`details.<key>` where the profile's judges record the number Flow-Factory's own "
        "reward model computes (e.g. `details.peer_reward` of a rubric judge with peer_reading): where "
        "present it is the judge's reward in `rewards`, valid or not (`valid` and `errors` stay ours), so the "
        "value follows Flow-Factory wherever its code returns a number (docs: Conformance)."
    )

    @field_validator("peer_source")
    @classmethod
    def _peer_source(cls, v: str | None) -> str | None:
        return details_path(v)

    @field_validator("judges")
    @classmethod
    def _weights(cls, v: dict[str, float]) -> dict[str, float]:
        if any(w < 0 for w in v.values()) or not any(w > 0 for w in v.values()):
            raise ValueError("weights must be >= 0 with at least one > 0")
        return v


class FlowFactoryConfig(Strict):
    enabled: bool = Field(True, description="Serve the profiles' routes.")
    path_prefix: str = Field("/flow-factory", description="Profiles are served at {path_prefix}/{name}.")
    profiles: dict[str, FlowFactoryProfile] = Field(
        default_factory=dict, description="Profile name (a path segment) -> a weighted set of judges."
    )

    @field_validator("path_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError("must start with '/'")
        return v.rstrip("/")


def check_protocols(judges: set[str], cosmos: CosmosRLConfig, flow: FlowFactoryConfig,
                    store: StoreConfig) -> list[str]:
    """Cross-section problems, each naming its key."""
    problems = []
    for name, profile in flow.profiles.items():
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            problems.append(f"flow_factory.profiles.{name}: profile names are path segments ([A-Za-z0-9_.-])")
        for judge in profile.judges:
            if judge not in judges:
                problems.append(f"flow_factory.profiles.{name}.judges.{judge}: unknown judge "
                                f"(configured: {', '.join(sorted(judges)) or 'none'})")
    if store.kind == "redis" and not store.resolved_url():
        problems.append("store.url: required for kind = 'redis' (or set the url_env variable)")
    for name, reward in cosmos.rewards.items():
        if reward.gpu_judge is not None and reward.gpu_judge not in judges:
            problems.append(f"cosmos_rl.rewards.{name}.gpu_judge: unknown judge {reward.gpu_judge!r} "
                            f"(configured: {', '.join(sorted(judges)) or 'none'})")
    pull = cosmos.default_pull_type
    if cosmos.enabled and pull not in cosmos.rewards and pull not in judges:
        problems.append(f"cosmos_rl.default_pull_type: {pull!r} is neither a cosmos-rl reward name nor a "
                        "configured judge")
    if cosmos.latents.decoders() and not cosmos.latents.python:
        problems.append("cosmos_rl.latents.python: required with a decoder checkpoint (an interpreter with torch + diffusers)")
    return problems
