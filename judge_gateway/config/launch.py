"""[backends.NAME.launch]: how `judge-gateway up` (and `prepare`, for its probes) starts the backend's vLLM
servers on this machine: one server per `base_urls` entry (its port), through
scripts/start_vllm.sh (a preset by name, or a model), each on `gpus` GPUs taken in order from
CUDA_VISIBLE_DEVICES. A backend without `launch` is someone else's server: never started here.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from .base import Strict

# The presets of scripts/start_vllm.sh (its usage text lists them; a unit test checks both agree).
VLLM_PRESETS = ("cosmos_reason1", "rational_rewards_t2i", "rational_rewards_edit", "unified_reward", "qwen_vl",
                "cosmos_reason2", "unified_reward_2", "unified_reward_think", "videoscore2", "qwen3_vl")

_MEDIA_LIMIT = re.compile(r"^[a-z_]+$")


class LaunchConfig(Strict):
    preset: str | None = Field(
        None, description=f"A scripts/start_vllm.sh preset ({', '.join(VLLM_PRESETS)}): its model, context "
        "length and media limits; the keys below override it.")
    model: str | None = Field(None, description="Hub id or local folder to serve (overrides the preset's).")
    gpus: int = Field(
        1, ge=0, le=64, description="GPUs per server (its tensor-parallel size), taken in order from "
        "CUDA_VISIBLE_DEVICES; 0: vLLM's CPU build (`start_vllm.sh --cpu`).")
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1, description="vLLM's --gpu-memory-utilization.")
    max_model_len: int | None = Field(None, gt=0, description="vLLM's --max-model-len (default: the preset's).")
    limit_mm_per_prompt: dict[str, int] | None = Field(
        None, description="vLLM's --limit-mm-per-prompt, e.g. {image = 2, video = 1} (default: the preset's).")
    api_server_count: int = Field(
        1, ge=1, le=64, description="vLLM's API-server processes (--api-server-count): a video's CPU cost in vLLM "
        "(its decode and multimodal processing) is spent there, so one process caps the videos/s a GPU serves; "
        "see the VLM performance guide.")
    python: str | None = Field(
        None, description="Interpreter with vLLM installed; default `.venv-vllm/bin/python` when it exists "
        "(`judge-gateway prepare` builds it), else what start_vllm.sh finds.")
    extra_args: list[str] = Field(default_factory=list, description="More vLLM arguments, as a list.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment of the server.")
    startup_timeout_s: float = Field(1800.0, gt=0, description="Longest wait for GET /health = 200 after a start.")
    restart_backoff_s: float = Field(2.0, gt=0, description="First delay before restarting a server that died; "
                                     "doubles per failure, at most restart_backoff_max_s.")
    restart_backoff_max_s: float = Field(120.0, gt=0, description="Longest delay between restarts of a server that keeps dying.")

    @field_validator("preset")
    @classmethod
    def _preset(cls, v: str | None) -> str | None:
        if v is not None and v not in VLLM_PRESETS:
            raise ValueError(f"unknown preset {v!r} (start_vllm.sh has: {', '.join(VLLM_PRESETS)})")
        return v

    @field_validator("limit_mm_per_prompt")
    @classmethod
    def _limits(cls, v: dict[str, int] | None) -> dict[str, int] | None:
        for media, n in (v or {}).items():
            if not _MEDIA_LIMIT.match(media) or n < 0:
                raise ValueError(f"{media} = {n}: expected a media name and a count >= 0")
        return v

    @model_validator(mode="after")
    def _what(self) -> "LaunchConfig":
        if self.preset is None and self.model is None:
            raise ValueError("launch needs a preset or a model")
        return self
