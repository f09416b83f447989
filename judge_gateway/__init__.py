"""judge-gateway: rewards for RL of image and video generators, in one score schema."""

from ._version import __version__
from .client import AsyncRewardClient, RewardAPIError, RewardClient, RewardConnectionError
from .config import ConfigError, GatewayConfig, load_config
from .exceptions import (
    ConfigurationError,
    InvalidInput,
    JudgeGatewayError,
    Overloaded,
    ScoringFailed,
    Unavailable,
)
from .gateway import Gateway, UnknownJudgeError
from .schema import (
    SCHEMA_VERSION,
    ErrorCode,
    JudgeInfo,
    JudgeScore,
    RewardRequest,
    RewardResponse,
    SampleInput,
    SampleResult,
    ScoreError,
    TemplateRef,
)

__all__ = [
    "AsyncRewardClient", "RewardClient", "RewardAPIError", "RewardConnectionError", "ConfigError", "GatewayConfig", "load_config",
    "Gateway", "UnknownJudgeError", "SCHEMA_VERSION", "ErrorCode", "JudgeInfo", "JudgeScore",
    "RewardRequest", "RewardResponse", "SampleInput", "SampleResult", "ScoreError", "TemplateRef",
    "JudgeGatewayError", "InvalidInput", "ConfigurationError", "Overloaded", "Unavailable", "ScoringFailed",
    "__version__",
]
