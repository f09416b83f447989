"""Configuration: TOML, validated at load, with errors that name the offending key.

The shape (see README "Configuration reference"):

    [server]    host, port, api_keys / api_keys_env, max_body_bytes, timeouts, header limits, ...
    [media]     decoded-pixel budgets per image, video and request
    [combine]   policy, on_invalid, fill_value
    [backends.NAME]  model, base_urls, api_key_env, timeout_s, max_concurrency, ...
    [judges.NAME]    kind, backend, template, weight, deadline_s, normalize, options, image, video
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, ValidationError, field_validator, model_validator

from .bands import check_bands
from .head_options import HEAD_KIND_OPTIONS, HEAD_KINDS
from .media import MAX_VIDEO_FRAMES, MediaLimits
from .protocol_config import CosmosRLConfig, FlowFactoryConfig, StoreConfig, check_protocols
from .ray_config import RayConfig, check_ray

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent / "configs" / "default.toml"

# Judge kinds served by a VLM backend through a prompt template.
VLM_KINDS = ("yes_no", "rubric", "final_score", "critic")


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AdmissionConfig(_Strict):
    """Admission control of the synchronous APIs (native /v1/rewards and Flow-Factory /compute):
    at most `max_active` requests score at once; up to `max_waiting` more wait for a slot, each at
    most `max_wait_s`; the rest are refused at once, with Retry-After: 429 on the native API, 503 on
    Flow-Factory (its client retries 5xx, not 4xx). cosmos-rl has its own bound (max_pending)."""

    max_active: int = Field(256, gt=0, description="Synchronous requests scored at once (native + Flow-Factory).")
    max_waiting: int = Field(512, ge=0, description="Requests that may wait for a slot; beyond: refused at once.")
    max_wait_s: float = Field(10.0, gt=0, description="Longest wait for a slot; then refused.")
    retry_after_s: int = Field(2, ge=1, description="The Retry-After (seconds) sent with a refusal.")


class ServerConfig(_Strict):
    host: str = Field("127.0.0.1", description="Bind address; loopback unless you mean to expose it.")
    port: int = Field(8080, ge=0, le=65535)
    api_keys: list[str] = Field(default_factory=list, description="Accepted Bearer tokens.")
    api_keys_env: str | None = Field(
        "JUDGE_GATEWAY_API_KEYS",
        description="Environment variable holding more accepted tokens, comma-separated.",
    )
    max_body_bytes: int = Field(256 * 1024 * 1024, gt=0, description="Largest accepted request body.")
    max_samples_per_request: int = Field(4096, gt=0)
    readiness_interval_s: float = Field(
        5.0, gt=0, description="How long a backend readiness probe result is reused."
    )
    allow_unauthenticated_public: bool = Field(
        False,
        description="Permit a non-loopback host without API keys (refused by default).",
    )
    # Slow or oversized clients (see README "Limits"): enforced by the HTTP protocol the CLI runs.
    header_timeout_s: float = Field(
        10.0, gt=0, description="A request's headers must arrive within this time of its first byte "
        "(or of the connection opening); else 408 and the connection is closed."
    )
    body_timeout_s: float = Field(
        60.0, gt=0, description="A request's body must arrive within this time of its headers; else "
        "408 and the connection is closed."
    )
    keep_alive_s: float = Field(30.0, gt=0, description="An idle keep-alive connection is closed after this.")
    max_header_bytes: int = Field(
        16384, ge=1024, description="Largest request line + headers (bytes); larger is refused with 431 (400 when h11's own buffer bound trips first, on headers still arriving)."
    )
    max_headers: int = Field(100, gt=0, description="Most request headers; more is refused with 431.")
    admission: AdmissionConfig = Field(default_factory=AdmissionConfig)

    @field_validator("api_keys")
    @classmethod
    def _keys(cls, keys: list[str]) -> list[str]:
        for i, key in enumerate(keys):
            check_api_key(key, f"api_keys[{i}]")
        return keys

    def resolved_api_keys(self) -> list[str]:
        keys = list(self.api_keys)
        if self.api_keys_env:
            extra = os.environ.get(self.api_keys_env, "")
            keys += [k.strip() for k in extra.split(",") if k.strip()]
        return keys


def check_api_key(key: str, where: str = "API key") -> str:
    """An empty key would match a request that sends none: refuse it (and keys no header can carry)."""
    if not key.strip():
        raise ValueError(f"{where} is empty or whitespace: it would accept requests without a key")
    if key != key.strip():
        raise ValueError(f"{where} has leading/trailing whitespace, which no Authorization header keeps")
    return key


class MediaConfig(_Strict):
    """Decoded-size budgets, checked against declared sizes (image headers, container stream
    info, tensor shapes) before any pixel is decoded."""

    max_image_pixels: int = Field(4096 * 4096, gt=0, description="Pixels (W*H) of one image or video frame.")
    max_video_frames: int = Field(MAX_VIDEO_FRAMES, gt=0, le=MAX_VIDEO_FRAMES, description="Frames of one video.")
    max_video_pixels: int = Field(
        2**28, gt=0, description="Decoded pixels (frames*W*H) of one video (2^28: ~0.8 GB of RGB)."
    )
    max_request_pixels: int = Field(
        2**29, gt=0, description="Decoded pixels of all compressed media (PNG/JPEG/WebP, mp4) in one request, "
        "and of all tensors in one cosmos-rl enqueue (2^29: ~1.6 GB of RGB)."
    )

    @model_validator(mode="after")
    def _order(self) -> "MediaConfig":
        if self.max_video_pixels < self.max_image_pixels:
            raise ValueError("max_video_pixels must be >= max_image_pixels (a video holds at least one frame)")
        if self.max_request_pixels < max(self.max_image_pixels, self.max_video_pixels):
            raise ValueError("max_request_pixels must be >= max_image_pixels and max_video_pixels")
        return self

    def limits(self) -> MediaLimits:
        return MediaLimits(**self.model_dump())


class EvalConfig(_Strict):
    """`judge-gateway eval`: where a reward becomes a "good" verdict against binary labels."""

    threshold: float = Field(0.5, description="A sample is called good when its reward is >= this.")
    thresholds: dict[str, float] = Field(
        default_factory=dict, description="Judge name -> its own threshold (overrides `threshold`)."
    )

    def threshold_for(self, judge: str) -> float:
        return self.thresholds.get(judge, self.threshold)


class CombineConfig(_Strict):
    policy: Literal["weighted_mean", "sum"] = "weighted_mean"
    on_invalid: Literal["invalidate", "skip", "fill"] = Field(
        "invalidate",
        description=(
            "invalidate: any invalid judge makes the sample's combined reward null; skip: combine "
            "the valid judges only (null when none); fill: use fill_value for the invalid judge. "
            "In every case the sample is flagged valid=false."
        ),
    )
    fill_value: float = 0.0


class BackendConfig(_Strict):
    model: str = Field(description="Served model name sent in each request.")
    base_urls: list[str] = Field(min_length=1, description="One OpenAI-compatible /v1 URL per replica.")
    api_key_env: str | None = Field(None, description="Environment variable with the backend's API key.")
    timeout_s: float = Field(120.0, gt=0, description="Per-attempt HTTP timeout.")
    connect_timeout_s: float = Field(5.0, gt=0)
    max_concurrency: int = Field(64, gt=0, description="In-flight requests per replica.")
    max_retries: int = Field(2, ge=0, description="Retries of transient faults (connect, timeout, 429, 5xx).")
    eject_after_failures: int = Field(5, gt=0, description="Consecutive failures before a replica is ejected.")
    eject_cooldown_s: float = Field(10.0, ge=0)

    @field_validator("base_urls")
    @classmethod
    def _urls(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"{url!r} is not an http(s) URL")
        return [u.rstrip("/") for u in urls]

    def api_key(self) -> str:
        # vLLM without --api-key accepts any token; the openai client insists on one.
        if self.api_key_env:
            return os.environ.get(self.api_key_env) or "EMPTY"
        return "EMPTY"


class ImageEncodingConfig(_Strict):
    max_pixels: int | None = Field(None, gt=0, description="Downscale larger images to this many pixels.")
    min_pixels: int | None = Field(None, gt=0)
    format: Literal["png", "jpeg"] = "png"
    jpeg_quality: int = Field(95, ge=1, le=100)


class VideoSamplingConfig(_Strict):
    num_frames: int | None = Field(None, gt=0, description="Sample this many frames uniformly.")
    fps: float | None = Field(None, gt=0, description="Sample at this rate (never upsampled).")
    max_frames: int = Field(160, gt=0, description="Stride down to at most this many frames.")
    max_pixels: int | None = Field(None, gt=0, description="Pixels per frame.")
    total_pixels: int | None = Field(None, gt=0, description="Pixels over all frames.")
    even_frames: bool = True


class NormalizeConfig(_Strict):
    """reward = clip(f(raw)); f is identity, affine (raw*scale+offset) or minmax ((raw-min)/(max-min))."""

    kind: Literal["identity", "affine", "minmax"] = "identity"
    scale: float = 1.0
    offset: float = 0.0
    min: float | None = None
    max: float | None = None
    clip: tuple[float, float] | None = None

    @model_validator(mode="after")
    def _check(self) -> "NormalizeConfig":
        if self.kind == "minmax":
            if self.min is None or self.max is None or self.max <= self.min:
                raise ValueError("minmax needs min < max")
        if self.clip is not None and self.clip[0] > self.clip[1]:
            raise ValueError("clip must be [low, high] with low <= high")
        return self

    def apply(self, raw: float) -> float:
        if self.kind == "affine":
            value = raw * self.scale + self.offset
        elif self.kind == "minmax":
            assert self.min is not None and self.max is not None
            value = (raw - self.min) / (self.max - self.min)
        else:
            value = raw
        if self.clip is not None:
            value = min(max(value, self.clip[0]), self.clip[1])
        return value


class JudgeConfig(_Strict):
    kind: str = Field(description="yes_no | rubric | final_score | critic | clip | pickscore | hpsv2 | hpsv3 | image_reward | ocr | videoalign | gen_eval")
    backend: str | None = Field(None, description="Name of a [backends.*] entry (VLM judges).")
    template: str | None = Field(None, description="Pinned prompt template, `family@version`.")
    weight: float = Field(1.0, description="Weight in the combined reward.")
    deadline_s: float | None = Field(None, gt=0, description="Per-sample deadline for this judge.")
    default: bool = Field(True, description="Scored when a request names no judges.")
    normalize: NormalizeConfig | None = Field(
        None, description="How raw becomes reward; each kind has a sensible default."
    )
    options: dict[str, Any] = Field(default_factory=dict, description="Kind-specific options.")
    bands: dict[str, StrictFloat] | None = Field(
        None, description="Score bands, label -> lower bound of the reward (the lowest band is open "
        "below), written to details['band']. Default: High >= 0.7, Medium >= 0.3, Low for judges "
        "that see a video, none for the others; {} turns bands off."
    )
    image: ImageEncodingConfig = Field(default_factory=ImageEncodingConfig)
    video: VideoSamplingConfig = Field(default_factory=VideoSamplingConfig)

    @field_validator("bands")
    @classmethod
    def _bands(cls, bands: dict[str, float] | None) -> dict[str, float] | None:
        return None if bands is None else check_bands(bands)


class VLMOptions(_Strict):
    """Options every VLM judge kind takes."""

    shadow_template: str | None = Field(
        None, description="Also score with this pinned template (`family@version`, same kind); its "
        "result goes into details['shadow'], never into the reward."
    )
    video_first_frame: bool = Field(
        False, description="A template with an <image> slot scores a sample that has a video and no "
        "image by the video's first frame (as Flow-Factory's vllm_evaluate does)."
    )


class YesNoOptions(VLMOptions):
    top_logprobs: int = Field(20, ge=1, le=20, description="vLLM's default --max-logprobs is 20.")
    min_answer_mass: float = Field(
        0.5, ge=0.0, le=1.0, description="Below this listed P(yes)+P(no) the score is answer_missing."
    )
    counting: Literal["variants", "exact"] = Field(
        "variants", description="variants: sum every case/space variant of the answer words; exact: "
        "only tokens spelled exactly as the template's words, reward sigmoid(lp_yes - lp_no) "
        "(Flow-Factory vllm_evaluate's default)."
    )


class RubricOptions(VLMOptions):
    aspect_weights: dict[str, float] | None = Field(
        None, description="Aspect name -> weight (default: the template's weights)."
    )
    na_policy: Literal["skip", "value"] = Field(
        "skip", description="skip: leave N/A aspects out of the mean; value: count them as na_value."
    )
    na_value: float | None = None
    missing_policy: Literal["invalid", "skip"] | None = Field(
        None, description="An expected aspect absent from the reply makes the score invalid, or is left out "
        "of the mean (default: the template's, else invalid). A reply with no aspect score is invalid either way."
    )
    scale: tuple[float, float] | None = Field(None, description="Aspect scale (default: the template's).")
    max_tokens: int | None = Field(None, gt=0)
    temperature: float | None = Field(None, ge=0.0, description="Sampling temperature (default: the template's, else 0).")
    stop: list[str] | None = None
    guided_regex: str | None = Field(
        None, description="Constrain the reply with vLLM structured outputs (a regex)."
    )
    aggregation_profile: str | None = Field(
        None, description="A tuned aggregation profile file `<name>@<version>.json` (`judge-gateway tune "
        "rubric`): its weights, na_policy and na_value replace aspect_weights/na_policy/na_value."
    )
    aggregation_profile_sha256: str | None = Field(
        None, pattern=r"^[0-9a-f]{64}$", description="Pin the profile file's exact bytes."
    )

    @model_validator(mode="after")
    def _check(self) -> "RubricOptions":
        if self.na_policy == "value" and self.na_value is None:
            raise ValueError("na_policy = 'value' needs na_value")
        if self.aspect_weights is not None:
            for name, w in self.aspect_weights.items():
                if w < 0:
                    raise ValueError(f"aspect weight {name!r} must be >= 0")
            if not any(w > 0 for w in self.aspect_weights.values()):
                raise ValueError("aspect_weights needs at least one positive weight")
        if self.aggregation_profile is not None and self.aspect_weights is not None:
            raise ValueError("set aspect_weights or aggregation_profile, not both")
        if self.aggregation_profile_sha256 is not None and self.aggregation_profile is None:
            raise ValueError("aggregation_profile_sha256 pins an aggregation_profile; none is set")
        return self


class FinalScoreOptions(VLMOptions):
    scale: tuple[float, float] | None = None
    label: str | None = None
    max_tokens: int | None = Field(None, gt=0)
    temperature: float | None = Field(None, ge=0.0, description="Sampling temperature (default: the template's, else 0).")
    stop: list[str] | None = None
    guided_regex: str | None = None


class CriticOptions(VLMOptions):
    """A critic: the reply is one JSON object in the template's schema (see README "Critic")."""

    reward_field: str = Field(
        "video_analysis.physical_accuracy.score", pattern=r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$",
        description="Dotted path of the reply's number that becomes the reward (a number field of the "
        "template's schema; its minimum/maximum, when set, map it onto [0, 1])."
    )
    structured_outputs: bool = Field(
        True, description="Send the template's schema as vLLM structured outputs (`json`); the reply is "
        "checked against it either way."
    )
    on_bad_timestamp: Literal["flag", "invalid"] = Field(
        "flag", description="A violation timed outside the clip the judge saw: flag it (valid_time = "
        "false, counted in details['bad_violation_times']) or make the score invalid (parse_error)."
    )
    share_video_with: str | None = Field(
        None, description="Use this judge's [video] sampling, so a request scoring both encodes each "
        "clip once (the critic's own `video` table must then be left out)."
    )
    max_tokens: int | None = Field(None, gt=0)
    temperature: float | None = Field(None, ge=0.0, description="Sampling temperature (default: the template's, else 0).")
    stop: list[str] | None = None


KIND_OPTIONS: dict[str, type[BaseModel]] = {
    "yes_no": YesNoOptions,
    "rubric": RubricOptions,
    "final_score": FinalScoreOptions,
    "critic": CriticOptions,
    # Local scorer heads (judge_gateway/heads): options say how their worker process runs.
    **HEAD_KIND_OPTIONS,
}


class GatewayConfig(_Strict):
    server: ServerConfig = Field(default_factory=ServerConfig)
    media: MediaConfig = Field(default_factory=MediaConfig)
    combine: CombineConfig = Field(default_factory=CombineConfig)
    backends: dict[str, BackendConfig] = Field(default_factory=dict)
    judges: dict[str, JudgeConfig] = Field(default_factory=dict)
    # Drop-in protocol adapters and their result store (see protocol_config.py).
    store: StoreConfig = Field(default_factory=StoreConfig)
    cosmos_rl: CosmosRLConfig = Field(default_factory=CosmosRLConfig)
    flow_factory: FlowFactoryConfig = Field(default_factory=FlowFactoryConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    # Distributed mode (`judge-gateway serve --ray`); absent: one machine, no Ray needed.
    ray: RayConfig | None = None

    def judge_options(self, name: str) -> BaseModel:
        judge = self.judges[name]
        return KIND_OPTIONS[judge.kind].model_validate(judge.options)


def _loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def _format_validation(err: ValidationError, prefix: tuple[Any, ...] = ()) -> str:
    lines = []
    for e in err.errors():
        lines.append(f"{_loc(prefix + tuple(e['loc']))}: {e['msg']}")
    return "; ".join(lines)


def validate_config(data: dict[str, Any], *, source: str = "<config>") -> GatewayConfig:
    """Validate a parsed TOML document; raise ConfigError naming every offending key."""
    try:
        cfg = GatewayConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{source}: {_format_validation(err)}") from None

    problems: list[str] = []
    from .prompts import TemplateError, load_template  # local: prompts import is not free

    for name, judge in cfg.judges.items():
        key = f"judges.{name}"
        if judge.kind not in KIND_OPTIONS:
            problems.append(f"{key}.kind: unknown kind {judge.kind!r} (known: {', '.join(KIND_OPTIONS)})")
            continue
        try:
            KIND_OPTIONS[judge.kind].model_validate(judge.options)
        except ValidationError as err:
            problems.append(_format_validation(err, (*key.split("."), "options")))
        if judge.kind in HEAD_KINDS:
            for field in ("backend", "template"):
                if getattr(judge, field) is not None:
                    problems.append(f"{key}.{field}: not used by head kind {judge.kind!r} (heads run locally)")
        if judge.kind in VLM_KINDS:
            if not judge.backend:
                problems.append(f"{key}.backend: required for kind {judge.kind!r}")
            elif judge.backend not in cfg.backends:
                known = ", ".join(cfg.backends) or "none configured"
                problems.append(f"{key}.backend: unknown backend {judge.backend!r} (known: {known})")
            if not judge.template:
                problems.append(f"{key}.template: required for kind {judge.kind!r} (pin `family@version`)")
            else:
                try:
                    template = load_template(judge.template)
                except TemplateError as err:
                    problems.append(f"{key}.template: {err}")
                else:
                    if template.kind != judge.kind:
                        problems.append(
                            f"{key}.template: {judge.template} is a {template.kind!r} template, "
                            f"but the judge's kind is {judge.kind!r}"
                        )
                    elif judge.kind == "rubric":
                        weights = judge.options.get("aspect_weights") or {}
                        names = {a.name for a in template.aspects}
                        for aspect in weights:
                            if aspect not in names:
                                problems.append(
                                    f"{key}.options.aspect_weights.{aspect}: not an aspect of "
                                    f"{judge.template} (aspects: {', '.join(sorted(names))})"
                                )
                        problems += _check_profile(key, judge, template, source)
                    elif judge.kind == "critic":
                        problems += _check_critic(key, name, judge, template, cfg)
                    problems += _check_shadow(key, judge, template)
                    if judge.options.get("video_first_frame") and "image" not in template.media_slots:
                        problems.append(f"{key}.options.video_first_frame: {judge.template} has no <image> "
                                        "slot for a video's first frame to fill")
    problems += check_protocols(set(cfg.judges), cfg.cosmos_rl, cfg.flow_factory, cfg.store)
    problems += check_ray(cfg.ray, {n for n, j in cfg.judges.items() if j.kind in HEAD_KINDS}, set(cfg.judges),
                          cfg.store.kind, cfg.cosmos_rl.enabled, cfg.store.queue.enabled)
    host = cfg.server.host
    if host not in ("127.0.0.1", "localhost", "::1") and not cfg.server.resolved_api_keys():
        if not cfg.server.allow_unauthenticated_public:
            problems.append(
                f"server.host: {host!r} exposes the service beyond loopback without API keys; set "
                "server.api_keys (or the api_keys_env variable) or allow_unauthenticated_public = true"
            )
    for name in cfg.eval.thresholds:
        if name not in cfg.judges:
            problems.append(f"eval.thresholds.{name}: no such judge (configured: {', '.join(cfg.judges)})")
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))
    return cfg


def _check_critic(key: str, name: str, judge: JudgeConfig, template: Any, cfg: GatewayConfig) -> list[str]:
    """The reward field must be a number of the template's schema; share_video_with must name a
    judge that sees a video, and then the critic takes that judge's sampling (resolved here, once)."""
    from .parsers.json_schema import subschema

    try:
        opts = CriticOptions.model_validate(judge.options)
    except ValidationError:
        return []  # reported with the other options errors
    problems = []
    node = subschema(template.json_schema, opts.reward_field)
    types = (node or {}).get("type")
    if node is None or (types != "number" and types != "integer"):
        problems.append(f"{key}.options.reward_field: {opts.reward_field!r} is not a number field of "
                        f"{judge.template}'s json_schema")
    other = opts.share_video_with
    if other is not None:
        where = f"{key}.options.share_video_with"
        if other == name or other not in cfg.judges:
            problems.append(f"{where}: {other!r} is not another configured judge")
        elif "video" in judge.model_fields_set:
            problems.append(f"{where}: set either the critic's own `video` table or share_video_with, not both")
        else:
            judge.video = cfg.judges[other].video.model_copy()
    return problems


def _check_shadow(key: str, judge: JudgeConfig, template: Any) -> list[str]:
    """A shadow template must be pinned, exist, differ from the judge's, and be of its kind."""
    from .prompts import TemplateError, load_template

    ref = judge.options.get("shadow_template")
    if not isinstance(ref, str):
        return []
    where = f"{key}.options.shadow_template"
    try:
        shadow = load_template(ref)
    except TemplateError as err:
        return [f"{where}: {err}"]
    if shadow.kind != template.kind:
        return [f"{where}: {ref} is a {shadow.kind!r} template, but the judge's kind is {judge.kind!r}"]
    if shadow.sha256 == template.sha256:
        return [f"{where}: {ref} is the judge's own template"]
    if judge.kind == "rubric":
        names = {a.name for a in shadow.aspects}
        wanted = set(judge.options.get("aspect_weights") or {})
        if wanted - names:
            return [f"{where}: {ref} lacks aspect(s) {', '.join(sorted(wanted - names))} of aspect_weights"]
    return []


def _check_profile(key: str, judge: JudgeConfig, template: Any, source: str) -> list[str]:
    """Load the rubric judge's aggregation profile (path resolved next to the config file)."""
    ref = judge.options.get("aggregation_profile")
    if not isinstance(ref, str):
        return []
    from .profiles import ProfileError, load_profile

    where = f"{key}.options.aggregation_profile"
    path = Path(ref)
    if not path.is_absolute() and Path(source).is_file():
        path = Path(source).resolve().parent / path
    try:
        profile = load_profile(path, sha256=judge.options.get("aggregation_profile_sha256"))
    except ProfileError as err:
        return [f"{where}: {err}"]
    if profile.kind != "rubric_aspects":
        return [f"{where}: {profile.ref} is a {profile.kind!r} profile, not rubric aspect weights"]
    made_for = (profile.created_from.get("template") or {}).get("id")
    if made_for != template.id:
        return [f"{where}: {profile.ref} was tuned for template family {made_for!r}, the judge uses {template.id!r}"]
    names = {a.name for a in template.aspects}
    unknown = set(profile.weights) - names
    if unknown:
        return [f"{where}: {profile.ref} weighs aspect(s) {', '.join(sorted(unknown))} that "
                f"{judge.template} does not have"]
    judge.options["aggregation_profile"] = str(path)  # resolved once, here
    return []


def load_config(path: str | Path | None = None) -> GatewayConfig:
    """Load and validate a TOML config; `None` loads the embedded default."""
    p = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    try:
        raw = p.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read config {p}: {err.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{p}: not valid TOML: {err}") from None
    return validate_config(data, source=str(p))
