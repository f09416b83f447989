"""Configuration: TOML, validated at load, with errors that name the offending key.

    base.py          Strict, the base of every section's model: unknown keys are refused
    models.py        the sections' models (GatewayConfig, ServerConfig, JudgeConfig, ...)
    kinds.py         the one table of judge kinds: options model, VLM or head, media, classes
    vlm_options.py   the VLM kinds' options;  head_options.py  the head kinds' options
    comparative_options.py  the comparative kind's options (schedule, swap, budget, group deadline)
    custom_heads.py  the options of heads you bring (a class named by import path)
    normalize.py     raw -> reward ([judges.NAME.normalize])
    protocols.py     [store], [cosmos_rl], [flow_factory]: the drop-in protocol adapters' sections
    ray.py           [ray] (no Ray import)
    watch.py         [watch]: shadow judges, windows, alarm thresholds
    launch.py        [backends.NAME.launch]: the vLLM servers `judge-gateway up` starts
    residency.py     [judges.NAME.residency]: resident, or colocated with a trainer (sleeps, wakes)
    loading.py       reading the TOML and the checks across sections
    cosmos_rl_toml.py  cosmos-rl's own rewards.toml, mapped onto these sections

This face re-exports the names callers use.
"""

from .comparative_options import ComparativeOptions
from .custom_heads import (
    CosmosRLHandlerOptions,
    CustomHeadOptions,
    FlowFactoryModelOptions,
    ImportedHeadOptions,
    class_ref,
)
from .head_options import (
    ClipOptions,
    GenEvalOptions,
    HeadOptions,
    HPSv2Options,
    HPSv3Options,
    ImageRewardOptions,
    ImageRewardVit,
    OcrOptions,
    PickScoreOptions,
    VideoAlignOptions,
)
from .kinds import HEAD_KIND_OPTIONS, HEAD_KINDS, KIND_OPTIONS, KINDS, VLM_KINDS, JudgeOptions, KindSpec
from .cosmos_rl_toml import RewardsToml, is_cosmos_rl_rewards, map_rewards_toml
from .launch import VLLM_PRESETS, LaunchConfig
from .loading import (
    DEFAULT_CONFIG_PATH,
    SHIPPED_CONFIGS_DIR,
    ConfigError,
    load_config,
    load_config_report,
    resolve_config_path,
    shipped_configs,
    validate_config,
)
from .models import (
    BackendConfig,
    CombineConfig,
    EvalConfig,
    GatewayConfig,
    ImageEncodingConfig,
    JudgeConfig,
    MediaConfig,
    PromptsConfig,
    VideoSamplingConfig,
)
from .media_device import DeviceVideoConfig
from .normalize import NormalizeConfig
from .protocols import (
    DEFAULT_COSMOS_REWARDS,
    GENEVAL_TAGS,
    SENTINEL_LABEL,
    SENTINEL_VALUE,
    WAN_CHANNELS,
    WAN_NAMES,
    CosmosReward,
    CosmosRLConfig,
    FlowFactoryConfig,
    FlowFactoryProfile,
    InvalidFill,
    LatentDecoderConfig,
    LegacyKey,
    QueueConfig,
    StoreConfig,
    TagSplit,
    WanVaeConfig,
)
from .ray import RayAutoscaling, RayConfig, RayDeploymentConfig
from .residency import VLLM_SLEEP_PLATFORMS, ResidencyConfig
from .server import AdmissionConfig, ServerConfig, check_api_key, is_loopback
from .vlm_options import (
    AnswerProbabilityOptions,
    AspectWeightOptions,
    ChecklistOptions,
    CriticOptions,
    FinalScoreOptions,
    MultiAxisOptions,
    RubricOptions,
    VLMOptions,
    YesNoOptions,
)
from .watch import WatchAlarms, WatchConfig

__all__ = [
    "LaunchConfig",
    "VLLM_PRESETS",
    # loading
    "ConfigError", "DEFAULT_CONFIG_PATH", "SHIPPED_CONFIGS_DIR", "load_config", "load_config_report",
    "resolve_config_path", "shipped_configs", "validate_config",
    "RewardsToml", "is_cosmos_rl_rewards", "map_rewards_toml",
    # sections
    "GatewayConfig", "ServerConfig", "AdmissionConfig", "MediaConfig", "DeviceVideoConfig", "CombineConfig", "BackendConfig",
    "JudgeConfig", "ImageEncodingConfig", "VideoSamplingConfig", "NormalizeConfig", "EvalConfig", "PromptsConfig",
    "check_api_key", "is_loopback",
    # judge kinds and their options
    "KINDS", "KindSpec", "VLM_KINDS", "HEAD_KINDS", "KIND_OPTIONS", "HEAD_KIND_OPTIONS", "JudgeOptions",
    "VLMOptions", "YesNoOptions", "RubricOptions", "FinalScoreOptions", "CriticOptions",
    "ComparativeOptions",
    "AspectWeightOptions", "MultiAxisOptions", "ChecklistOptions", "AnswerProbabilityOptions",
    "HeadOptions", "ClipOptions", "PickScoreOptions", "HPSv2Options", "HPSv3Options", "OcrOptions",
    "GenEvalOptions", "VideoAlignOptions", "ImageRewardOptions", "ImageRewardVit",
    "ImportedHeadOptions", "CustomHeadOptions", "FlowFactoryModelOptions", "CosmosRLHandlerOptions", "class_ref",
    # protocol adapters
    "StoreConfig", "QueueConfig", "CosmosRLConfig", "CosmosReward", "InvalidFill", "LegacyKey", "TagSplit",
    "LatentDecoderConfig", "WanVaeConfig", "WAN_CHANNELS", "WAN_NAMES", "DEFAULT_COSMOS_REWARDS",
    "GENEVAL_TAGS", "SENTINEL_VALUE", "SENTINEL_LABEL", "FlowFactoryConfig", "FlowFactoryProfile",
    # distributed mode
    "RayConfig", "RayDeploymentConfig", "RayAutoscaling",
    # reward-hacking watch
    "WatchConfig", "WatchAlarms",
    # judges that share a trainer's GPUs
    "ResidencyConfig", "VLLM_SLEEP_PLATFORMS",
]
