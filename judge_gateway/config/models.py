"""The config's models, one per section (docs/reference/configuration.md is generated from them):

    [server]    (server.py) host, port, api_keys / api_keys_env, limits, admission, network guards
    [media]     decoded-pixel budgets per image, video and request
    [combine]   policy, on_invalid, fill_value
    [backends.NAME]  model, base_urls, api_key_env, timeout_s, max_concurrency, ...
    [judges.NAME]    kind, backend, template, weight, deadline_s, normalize, options, image, video, residency
    [prompts]   dirs: your own template folders, after the package's
    [store] [cosmos_rl] [flow_factory] (protocols.py), [eval], [ray] (ray.py), [watch] (watch.py)

Each model checks its own section; the checks across sections are in loading.py.
"""

from __future__ import annotations

import os
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    PrivateAttr,
    SerializationInfo,
    StrictFloat,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ..bands import check_bands
from ..media import MAX_VIDEO_FRAMES, MediaLimits
from ..media.budget import auto_process_pixels
from .base import Strict
from .custom_heads import resolve_path
from .kinds import KINDS, JudgeOptions, KindSpec
from .launch import LaunchConfig
from .media_device import DeviceVideoConfig
from .normalize import NormalizeConfig
from .protocols import CosmosRLConfig, FlowFactoryConfig, StoreConfig
from .ray import RayConfig
from .residency import ResidencyConfig
from .server import LOOPBACK_HOSTS, ServerConfig
from .watch import WatchConfig


class MediaConfig(Strict):
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
    workers: int | None = Field(
        None, gt=0, description="Threads that decode, resize and encode media (default: one per core this "
        "process may use).")
    max_pending: int | None = Field(
        None, gt=0, description="Media jobs queued or running beyond which new synchronous requests are refused "
        "(429 / 503 with Retry-After; default: 32 per worker).")
    device: DeviceVideoConfig | None = Field(
        None, description="Decode and resize videos for VLM judges on the device ([media.device]); a video the "
        "worker cannot do is done here (details.video.device_fallback says why).")
    max_process_pixels: int | None = Field(
        None, gt=0, description="Decoded pixels all requests scoring at once may hold, process-wide: a request "
        "reserves what its compressed media (and cosmos-rl latents) decode to before it scores and waits for room "
        "(server.admission.max_wait_s; then 429 native / 503 Flow-Factory with Retry-After; accepted cosmos-rl "
        "work waits until its deadline). Default: a quarter of the machine's memory (its cgroup limit when lower) "
        "in RGB pixels, at least max_request_pixels."
    )

    @model_validator(mode="after")
    def _order(self) -> "MediaConfig":
        if self.max_video_pixels < self.max_image_pixels:
            raise ValueError("max_video_pixels must be >= max_image_pixels (a video holds at least one frame)")
        if self.max_request_pixels < max(self.max_image_pixels, self.max_video_pixels):
            raise ValueError("max_request_pixels must be >= max_image_pixels and max_video_pixels")
        if self.max_process_pixels is not None and self.max_process_pixels < self.max_request_pixels:
            raise ValueError("max_process_pixels must be >= max_request_pixels (one request must fit)")
        return self

    def limits(self) -> MediaLimits:
        return MediaLimits(**self.model_dump(exclude={"max_process_pixels", "workers", "max_pending", "device"}))

    def process_pixels(self) -> int:
        """max_process_pixels, or its default for this machine."""
        if self.max_process_pixels is not None:
            return self.max_process_pixels
        return auto_process_pixels(self.max_request_pixels)


class EvalConfig(Strict):
    """`judge-gateway eval`: where a reward becomes a "good" verdict against binary labels."""

    threshold: float = Field(0.5, description="A sample is called good when its reward is >= this.")
    thresholds: dict[str, float] = Field(
        default_factory=dict, description="Judge name -> its own threshold (overrides `threshold`)."
    )

    def threshold_for(self, judge: str) -> float:
        return self.thresholds.get(judge, self.threshold)


class CombineConfig(Strict):
    policy: Literal["weighted_mean", "sum"] = Field(
        "weighted_mean", description="A sample's combined reward: the weighted mean of its judges' rewards, "
        "or their weighted sum (weights: judges.NAME.weight)."
    )
    on_invalid: Literal["invalidate", "skip", "fill"] = Field(
        "invalidate",
        description=(
            "invalidate: any invalid judge makes the sample's combined reward null; skip: combine "
            "the valid judges only (null when none); fill: use fill_value for the invalid judge. "
            "In every case the sample is flagged valid=false."
        ),
    )
    fill_value: float = Field(0.0, description="on_invalid = fill: the reward an invalid judge counts as.")


class BackendConfig(Strict):
    model: str = Field(description="Served model name sent in each request.")
    base_urls: list[str] = Field(min_length=1, description="One OpenAI-compatible /v1 URL per replica.")
    api_key_env: str | None = Field(None, description="Environment variable with the backend's API key.")
    timeout_s: float = Field(120.0, gt=0, description="Per-attempt HTTP timeout.")
    connect_timeout_s: float = Field(5.0, gt=0, description="Per-attempt TCP connect timeout.")
    max_concurrency: int = Field(64, gt=0, description="In-flight requests per replica.")
    max_retries: int | None = Field(
        None, ge=0, description="A cap on retries of transient faults (connect, timeout, 429, 5xx); none (the "
        "default): they are retried with back-off until the call's deadline (the judge's deadline_s, a cosmos-rl "
        "request's request_timeout_s), or for retry_for_s when it has none."
    )
    retry_for_s: float = Field(
        30.0, gt=0, description="How long transient faults of a call without a deadline of its own are retried "
        "(a backend restarting, a replica ejected): a fault shorter than this is waited out."
    )
    retry_backoff_max_s: float = Field(2.0, gt=0, description="Longest wait between two attempts (jittered "
                                       "exponential back-off from 0.1 s).")
    eject_after_failures: int = Field(5, gt=0, description="Consecutive failures before a replica is ejected.")
    eject_cooldown_s: float = Field(10.0, ge=0, description="How long an ejected replica is skipped before it is tried again.")
    down_after_s: float = Field(
        10.0, ge=0, description="A replica that cannot be connected to (refused, unreachable), by a call or its readiness probe, and has not "
        "answered for this long is down; while every replica is down, calls fail at once with backend_unavailable "
        "and the reason (one readiness check a second looks for its return; the first answer ends it). A fault "
        "sooner after an answer is transient: retried until the call's deadline."
    )
    launch: LaunchConfig | None = Field(
        None, description="How `judge-gateway up` starts this backend's vLLM servers here (one per base_urls "
        "entry); absent: an external server, never started by judge-gateway.")
    video_input: Literal["auto", "jpeg_frames", "mp4"] = Field(
        "auto", description="How its servers take a video a judge sampled (the judge's video.codec = auto): "
        "jpeg_frames: a `video/jpeg` list of JPEG frames with the rate in the request's media_io_kwargs (vLLM "
        "started with --trust-request-mm-kwargs, which `up` and `start_vllm.sh --trust-request-mm-kwargs` add); "
        "mp4: Motion JPEG in mp4 (any server); auto: jpeg_frames when the backend has a launch table, else mp4.")

    @field_validator("base_urls")
    @classmethod
    def _urls(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"{url!r} is not an http(s) URL")
        return [u.rstrip("/") for u in urls]

    @model_validator(mode="after")
    def _launch_here(self) -> "BackendConfig":
        if self.launch is not None:
            for url in self.base_urls:
                parsed = urlsplit(url)
                if parsed.hostname not in (*LOOPBACK_HOSTS, "0.0.0.0") or parsed.port is None:
                    raise ValueError(f"launch starts servers on this machine: base_urls entry {url!r} must name "
                                     "a loopback host and a port (e.g. http://127.0.0.1:8001/v1); a server on another "
                                     "host has no launch table: drop it")
        return self

    def takes_jpeg_frames(self) -> bool:
        """Whether its servers take `video/jpeg` frame lists with per-request media_io_kwargs."""
        return self.video_input == "jpeg_frames" or (self.video_input == "auto" and self.launch is not None)

    def api_key(self) -> str:
        # vLLM without --api-key accepts any token; the openai client insists on one.
        if self.api_key_env:
            return os.environ.get(self.api_key_env) or "EMPTY"
        return "EMPTY"


class ImageEncodingConfig(Strict):
    max_pixels: int | None = Field(None, gt=0, description="Downscale larger images to this many pixels.")
    min_pixels: int | None = Field(None, gt=0, description="Upscale smaller images to this many pixels.")
    format: Literal["png", "jpeg"] = Field("png", description="How the image is sent to the VLM (a data URL).")
    jpeg_quality: int = Field(95, ge=1, le=100, description="format = jpeg: the encoder's quality.")
    resampler: Literal["fast", "pil"] = Field(
        "fast", description="fast: OpenCV (PSNR >= 40 dB of PIL's bicubic); pil: PIL's bicubic, the reference.")
    data_url_mime: str | None = Field(
        None, pattern=r"^image(/[A-Za-z0-9.+-]+)?$",
        description="The media type the data URL names (default `image/<format>`); `image` sends "
        "`data:image;base64,...`, as cosmos-rl's unified_reward does. The bytes are the same.")


class VideoSamplingConfig(Strict):
    num_frames: int | None = Field(None, gt=0, description="Sample this many frames uniformly.")
    fps: float | None = Field(None, gt=0, description="Sample at this rate (never upsampled).")
    max_frames: int = Field(160, gt=0, description="Stride down to at most this many frames.")
    max_pixels: int | None = Field(None, gt=0, description="Pixels per frame.")
    total_pixels: int | None = Field(None, gt=0, description="Pixels over all frames.")
    even_frames: bool = Field(
        True, description="Drop the last frame of an odd count (Qwen2.5-VL's temporal patch is 2 frames); a lone "
        "frame is sent twice."
    )
    codec: Literal["auto", "jpeg_frames", "mjpeg", "libx264", "mpeg4"] = Field(
        "auto", description="auto: jpeg_frames where the backend takes them (backends.NAME.video_input) and the "
        "template has one video slot, else mjpeg; jpeg_frames: a `video/jpeg` list of JPEG frames (no container) "
        "with its rate in the request's media_io_kwargs; mjpeg: Motion JPEG (libjpeg-turbo frames in mp4); "
        "libx264 / mpeg4 through FFmpeg.")
    jpeg_quality: int = Field(95, ge=1, le=100, description="JPEG quality of jpeg_frames and mjpeg (4:4:4 chroma "
                              "from 90).")
    crf: int = Field(18, ge=0, le=51, description="libx264's quality.")
    resampler: Literal["fast", "pil"] = Field(
        "fast", description="fast: OpenCV (PSNR >= 40 dB of PIL's bicubic); pil: PIL's bicubic, the reference.")


class JudgeConfig(Strict):
    kind: str = Field(description=" | ".join(KINDS))
    backend: str | None = Field(None, description="Name of a [backends.*] entry (VLM judges).")
    template: str | None = Field(None, description="Pinned prompt template, `family@version`.")
    weight: float = Field(1.0, description="Weight in the combined reward.")
    deadline_s: float | None = Field(None, gt=0, description="Per-sample deadline for this judge.")
    default: bool = Field(True, description="Scored when a request names no judges.")
    normalize: NormalizeConfig | None = Field(
        None, description="How raw becomes reward; each kind has a sensible default."
    )
    options: JudgeOptions = Field(
        default_factory=dict, validate_default=True,  # type: ignore[arg-type]  # {} -> the kind's defaults
        description="Options of the judge's kind (each kind's keys are listed per kind), validated at load."
    )
    bands: dict[str, StrictFloat] | None = Field(
        None, description="Score bands, label -> lower bound of the reward (the lowest band is open "
        "below), written to details['band']. Default: High >= 0.7, Medium >= 0.3, Low for judges "
        "that see a video, none for the others; {} turns bands off."
    )
    image: ImageEncodingConfig = Field(
        default_factory=ImageEncodingConfig, description="How a VLM judge's images are sized and encoded."
    )
    video: VideoSamplingConfig = Field(
        default_factory=VideoSamplingConfig,
        description="Which frames of a video a judge sees, and at what size (recorded in details['video']).",
    )
    # Left out of the config's dump (exclude): residency never changes a number (a woken judge scores
    # bit for bit as a resident one), so it is no part of a run's config_sha256 and a score folder
    # resumes across a change of it.
    residency: ResidencyConfig = Field(
        default_factory=ResidencyConfig, exclude=True,
        description="`resident` (the default: its model stays on its device) or `colocated` (it shares the "
        "device with a trainer: sleeps when told or idle, wakes on the next request); `residency = "
        "\"colocated\"` or a table. Judges on one backend share one residency.",
    )
    # The [prompts] dirs its template is looked up in after the package's (set by GatewayConfig).
    _template_dirs: tuple[str, ...] = PrivateAttr(default=())

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        if kind not in KINDS:
            raise PydanticCustomError("unknown_kind", f"unknown kind {kind!r} (known: {', '.join(KINDS)})")
        return kind

    @field_validator("options", mode="plain")
    @classmethod
    def _typed_options(cls, options: Any, info: ValidationInfo) -> Any:
        """The options model is chosen by `kind` (a union discriminated by the sibling field); its
        errors keep their place under `judges.NAME.options`."""
        spec = KINDS.get(info.data.get("kind", ""))
        if spec is None:
            return options  # the kind's own error says why
        if not isinstance(options, (dict, spec.options)):  # the TOML's text, not the model's name
            raise PydanticCustomError("dict_type", "Input should be a valid dictionary")
        return spec.options.model_validate(options, context=info.context)  # base_dir: relative paths

    @field_serializer("options")
    def _options_as_written(self, options: JudgeOptions, info: SerializationInfo) -> dict[str, Any]:
        # The keys the config set (and load resolved), as the TOML had them: dumps stay the same.
        return options.model_dump(mode=info.mode, exclude_unset=True)

    @property
    def kind_spec(self) -> KindSpec:
        return KINDS[self.kind]

    @property
    def template_dirs(self) -> tuple[str, ...]:
        """The user template folders ([prompts] dirs) its template refs are looked up in."""
        return self._template_dirs

    @model_validator(mode="after")
    def _kind_video_default(self) -> JudgeConfig:
        """A kind with its own video default (kinds.py `video_frames`) gets it when the judge
        sets no `video` table; the config's dump shows it, so runs record what was sampled."""
        spec = KINDS.get(self.kind)
        if spec is not None and spec.video_frames and "video" not in self.model_fields_set:
            self.video = VideoSamplingConfig(num_frames=spec.video_frames)
        return self

    @field_validator("bands")
    @classmethod
    def _bands(cls, bands: dict[str, float] | None) -> dict[str, float] | None:
        return None if bands is None else check_bands(bands)


class PromptsConfig(Strict):
    """Template families of your own, beside the package's (`judge-gateway prompts new` starts one)."""

    dirs: list[str] = Field(
        default_factory=list,
        description=(
            "Folders of template families, each `<family>/<version>.toml` with the folder's own "
            "`templates.lock` (`judge-gateway prompts lock --dir DIR`), checked as the package's are: "
            "a released version's bytes never change. Looked up after the package's templates; a "
            "family lives in one place only. Relative paths are from the config file's folder."
        ),
    )

    @field_validator("dirs")
    @classmethod
    def _absolute(cls, dirs: list[str], info: ValidationInfo) -> list[str]:
        resolved = [resolve_path(d, info) for d in dirs]
        if len(set(resolved)) != len(resolved):
            raise ValueError(f"{dirs}: a folder is listed twice")
        return resolved


class GatewayConfig(Strict):
    """A whole config file. The descriptions here introduce each section in the docs' reference."""

    server: ServerConfig = Field(
        default_factory=ServerConfig,
        description="The HTTP service: bind address, API keys, body and header limits, slow-client timeouts.",
    )
    media: MediaConfig = Field(default_factory=MediaConfig, description="Decoded-size budgets of the media a request brings.")
    combine: CombineConfig = Field(
        default_factory=CombineConfig, description="How a sample's judge scores become its one combined reward."
    )
    backends: dict[str, BackendConfig] = Field(
        default_factory=dict, description="A served VLM: its model name on one or more vLLM (OpenAI-compatible) replicas."
    )
    judges: dict[str, JudgeConfig] = Field(
        default_factory=dict,
        description="A judge: a VLM kind on a backend through a pinned prompt template, or a local head kind.",
    )
    # Drop-in protocol adapters and their result store (see protocols.py).
    store: StoreConfig = Field(
        default_factory=StoreConfig,
        description="Where the async protocol (cosmos-rl) keeps results until they are pulled: memory or Redis.",
    )
    cosmos_rl: CosmosRLConfig = Field(
        default_factory=CosmosRLConfig, description="cosmos-rl's reward service protocol (/api/reward/*)."
    )
    flow_factory: FlowFactoryConfig = Field(
        default_factory=FlowFactoryConfig, description="Flow-Factory's remote reward server protocol, one path per profile."
    )
    eval: EvalConfig = Field(default_factory=EvalConfig, description="`judge-gateway eval`'s thresholds.")
    ray: RayConfig | None = Field(
        None, description="Distributed mode (`judge-gateway serve --ray`) on Ray Serve; absent: one machine, no Ray needed."
    )
    prompts: PromptsConfig = Field(
        default_factory=PromptsConfig,
        description="Template families of your own, in your folders beside the package's.",
    )
    watch: WatchConfig = Field(
        default_factory=WatchConfig,
        description="Shadow judges over live training traffic, per-window statistics and reward-hacking alarms.",
    )

    @model_validator(mode="after")
    def _bind_template_dirs(self) -> "GatewayConfig":
        for judge in self.judges.values():
            judge._template_dirs = tuple(self.prompts.dirs)
        return self

    def judge_options(self, name: str) -> JudgeOptions:
        return self.judges[name].options
