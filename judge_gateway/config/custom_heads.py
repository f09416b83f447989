"""Options of the heads you bring without editing the package: a class named by import path that
the head's worker process imports under the head's own interpreter (`python`).

    custom              a class with our interface (judge_gateway.heads.custom: CustomHead)
    flow_factory_model  a Flow-Factory PointwiseRewardModel / GroupwiseRewardModel, unchanged
    cosmos_rl_handler   a cosmos-rl BaseRewardHandler subclass, unchanged

The class's own options (`params`) are validated in the worker, by the pydantic model the class
declares (`Options`): its module may import torch, which the gateway's venv need not have. What the
gateway can check without importing the class is checked here, at config load: the import path's
form, the media, the import roots (relative ones are made absolute from the config file's folder,
so a dump of the config, e.g. for Ray replicas, loads the same from anywhere).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from .head_options import HeadOptions

# `package.module:Class` (the form the kind table uses), or `package.module:Outer.Inner`.
_REF_RE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")
# Flow-Factory's own form in its YAML (`reward_model: my_pkg.rewards.MyReward`).
_DOTTED_RE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$")

# What a brought head may take per sample: the scored medium, and condition media (an edit's source).
CustomMedia = Literal["image", "video", "condition_image", "condition_video"]
# Options of every head that mean nothing to a class scoring whole samples: refused when set.
_PER_FRAME_OPTIONS = ("pooling", "top_k", "overlap_preprocessing")


def class_ref(value: str, *, dotted: bool = False) -> str:
    """A class's import path as `module:Name`; `dotted` also takes `module.Name` (Flow-Factory's
    YAML form), returned in the colon form."""
    value = value.strip()
    if _REF_RE.fullmatch(value):
        return value
    if dotted and _DOTTED_RE.fullmatch(value):
        module, _, name = value.rpartition(".")
        return f"{module}:{name}"
    forms = "`package.module:ClassName`" + (" or `package.module.ClassName`" if dotted else "")
    raise ValueError(f"{value!r} is not an import path of a class: write {forms}")


def resolve_path(value: str, info: ValidationInfo) -> str:
    """A folder the config names, absolute: a relative one is taken from the config file's folder
    (`base_dir` in the validation context, set by config loading), else from the working directory."""
    path = Path(value).expanduser()
    if not path.is_absolute():
        base = (info.context or {}).get("base_dir")
        path = (Path(base) if base else Path.cwd()) / path
    return str(path.resolve())


class ImportedHeadOptions(HeadOptions):
    """What every brought head shares: where its class is imported from, its own options, the media
    it takes. One item is one sample (an image, or a video's sampled frames), not one frame."""

    pythonpath: list[str] = Field(
        default_factory=list,
        description=(
            "Folders put first on the worker's sys.path before the class is imported (your rewards "
            "package need not be installed in the head's venv); relative paths are from the config "
            "file's folder."
        ),
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="The class's own options, validated in the worker by the model the class declares.",
    )
    media: list[CustomMedia] = Field(
        default_factory=lambda: ["image", "video"], min_length=1,
        description=(
            "What the class scores (`image`, `video`: a sample needs one of those it lists) and the "
            "condition media it needs besides (`condition_image`, `condition_video`: required of "
            "every sample)."
        ),
    )
    max_batch_size: int = Field(16, ge=1, le=4096, description="Samples per call of the class.")

    @model_validator(mode="before")
    @classmethod
    def _whole_samples(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in _PER_FRAME_OPTIONS:
                if key in data:
                    raise ValueError(f"{key}: not used by a brought head (its class scores whole samples: a "
                                     "video's sampled frames go to it together)")
        return data

    @field_validator("pythonpath")
    @classmethod
    def _absolute(cls, paths: list[str], info: ValidationInfo) -> list[str]:
        return [resolve_path(p, info) for p in paths]

    @field_validator("media")
    @classmethod
    def _media(cls, media: list[str]) -> list[str]:
        if len(set(media)) != len(media):
            raise ValueError(f"{media}: a medium is listed twice")
        if not {"image", "video"} & set(media):
            raise ValueError("must list `image` or `video` (the medium the class scores)")
        return media

    def class_path(self) -> str:
        """The class this head runs, as `module:Name`."""
        raise NotImplementedError


class CustomHeadOptions(ImportedHeadOptions):
    """`kind = "custom"`: a class with judge-gateway's interface (judge_gateway.heads.custom)."""

    head: str = Field(description="The class, `package.module:ClassName`.")

    @field_validator("head")
    @classmethod
    def _ref(cls, v: str) -> str:
        return class_ref(v)

    def class_path(self) -> str:
        return self.head


class FlowFactoryModelOptions(ImportedHeadOptions):
    """`kind = "flow_factory_model"`: a Flow-Factory reward model class, unchanged. It is built as
    Flow-Factory builds it, `cls(config, accelerator)`: `config` carries this judge's name, device,
    dtype, `max_batch_size` as `batch_size` and `params` as the extra keys of its YAML entry."""

    reward_model: str = Field(description="The class: `package.module:ClassName` or Flow-Factory's `package.module.ClassName`.")

    @field_validator("reward_model")
    @classmethod
    def _ref(cls, v: str) -> str:
        return class_ref(v, dotted=True)

    def class_path(self) -> str:
        return self.reward_model


class CosmosRLHandlerOptions(ImportedHeadOptions):
    """`kind = "cosmos_rl_handler"`: a cosmos-rl BaseRewardHandler subclass, unchanged: built with
    cosmos-rl's keyword arguments, then `set_up()`, then `calculate_reward(tensor, metadata)` per batch."""

    handler: str = Field(description="The handler class, `package.module:ClassName`.")
    model_path: str = Field("", description="cosmos-rl's `model_path` keyword (rewards.toml).")
    download_path: str = Field("", description="cosmos-rl's `download_path` keyword (rewards.toml).")
    score_key: str | None = Field(
        None,
        description=(
            "The key of the handler's `scores` whose value is a sample's raw number; the other keys go "
            "to details.scores. Default: the only key, else the one named like the handler's reward_name."
        ),
    )
    batch_keys: list[str] = Field(
        default_factory=lambda: ["geneval_only_strict", "ocr_use_gpu"],
        description=(
            "Metadata keys passed once per call (as cosmos-rl's clients send them), not as per-sample "
            "lists; samples that disagree on them are scored in separate calls."
        ),
    )
    error_values: dict[str, list[str | float]] = Field(
        default_factory=dict,
        description=(
            "Score key -> values that mean the handler failed on that sample (e.g. cosmos_reason1's "
            "`{prediction = [\"Error\"]}`): the sample's score is invalid instead of that number."
        ),
    )

    @field_validator("handler")
    @classmethod
    def _ref(cls, v: str) -> str:
        return class_ref(v)

    def class_path(self) -> str:
        return self.handler


def cosmos_dtype(dtype: str) -> str:
    """Our dtype names -> the ones cosmos-rl's rewards.toml and handlers use."""
    return {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[dtype]
