"""Config options of the local head kinds (`[judges.NAME] kind = "clip" | ... , options = {...}`);
which kind takes which model: kinds.py.

Pydantic only, no torch: the gateway validates these at config load and sends the worker process
the fields the config set (`model_dump(exclude_unset=True)`); the worker rebuilds the same model
from them (heads/factory.py), so every default and derived value (`preprocess_mode`,
`overlaps_preprocessing` ...) is written here once.
"""

from __future__ import annotations

import os
import re
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .base import Strict
from .normalize import NormalizeConfig

_DEVICE_RE = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")
# `dtype` as torch names it (the worker resolves it with getattr(torch, name)).
TORCH_DTYPE_NAMES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


class HeadOptions(BaseModel):
    """What every head shares: where and how its worker runs, and how it batches."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    device: str = Field("cpu", description="`cpu`, `cuda`, `cuda:N` or `mps`.")
    dtype: Literal["fp32", "fp16", "bf16"] = Field("fp32", description="Model weights and inputs.")
    python: str | None = Field(
        None,
        description=(
            "Interpreter of the worker process (e.g. `.venv-heads/bin/python`), so a head's "
            "dependencies can live in their own venv; relative paths are from the working "
            "directory; default: the gateway's own interpreter."
        ),
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment of the worker.")
    threads: int | None = Field(None, ge=1, description="torch / onnxruntime intra-op threads.")
    max_batch_size: int = Field(32, ge=1, le=4096, description="Items (images or frames) per forward pass.")
    max_wait_ms: float = Field(
        5.0, ge=0, le=10_000, description="How long a batch waits for more concurrent items once it has one."
    )
    pipeline_min_batch: int | None = Field(
        None, ge=1, le=4096, description="While the device is idle, start a batch as soon as it holds this many "
        "items instead of waiting for max_batch_size or max_wait_ms: the first images of a GRPO step start the "
        "forward while the rest arrive (batches after it fill while it runs). Default: off.")
    max_queue_items: int = Field(
        4096, ge=1, description="Items (images or frames) accepted and not yet answered; a request that would "
        "go over is refused with Retry-After (429 native, 503 Flow-Factory; accepted cosmos-rl work waits). "
        "An empty queue takes any request."
    )
    max_queue_pixels: int = Field(
        2**28, ge=1, description="Pixels of those items (2^28: ~0.8 GB of RGB); the same rule."
    )
    overlap_preprocessing: bool | None = Field(
        None,
        description=(
            "Prepare the next batch while the current one runs (heads with a preprocessing stage: the "
            "CLIP family, image_reward; the transform itself runs in processes or on the device). "
            "Default: on for cuda/mps, off for cpu, where both stages compete for the same cores."
        ),
    )
    transport: Literal["shm", "pipe"] = Field(
        "shm",
        description=(
            "How pixels reach the worker: `shm` writes them into a shared-memory arena (an anonymous "
            "memfd, only frame headers on the pipe), falling back to the pipe where that is "
            "unavailable; `pipe` sends them through the worker's stdin. The score's "
            "`details.head.transport` says which ran."
        ),
    )
    shm_mb: int = Field(
        512, ge=1, le=1 << 20,
        description="Size of the shared-memory arena per worker (MiB); pages are used as written.",
    )
    pooling: Literal["mean", "min", "topk_mean"] = Field(
        "mean", description="How per-frame scores of a video become one score."
    )
    top_k: int = Field(3, ge=1, description="Frames averaged by `topk_mean` (the k best).")
    startup_timeout_s: float = Field(600.0, gt=0, description="Longest wait for the worker to load its model.")
    restart_backoff_s: float = Field(0.5, ge=0, description="First delay before restarting a crashed worker.")
    retry_failed_load_s: float = Field(
        30.0, ge=0, description="After a failed model load, retry at the next request this much later."
    )

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not _DEVICE_RE.match(v):
            raise ValueError(f"{v!r} is not a device (cpu, cuda, cuda:N, mps)")
        return v

    def default_normalize(self) -> NormalizeConfig | None:
        """How raw becomes reward when the judge sets no `normalize`: None is identity."""
        return None

    def overlaps_preprocessing(self) -> bool:
        """`overlap_preprocessing`, defaulting as documented: on for cuda/mps, off for cpu."""
        if self.overlap_preprocessing is not None:
            return self.overlap_preprocessing
        return not self.device.startswith("cpu")

    def torch_dtype_name(self) -> str:
        """`dtype` as torch names it (`float32`, `float16`, `bfloat16`)."""
        return TORCH_DTYPE_NAMES[self.dtype]

    # Options naming weights as a local path or a hub id: a value written as a path (absolute,
    # ./, ../ or ~) that does not exist can never load, which missing_local_weights says at once.
    local_weight_fields: ClassVar[tuple[str, ...]] = ()

    def missing_local_weights(self) -> str | None:
        """Why the head cannot load, when an option names a local file or folder that does not
        exist (checked before a worker starts: a request is refused with it at once); else None."""
        for name in self.local_weight_fields:
            value = getattr(self, name, None)
            if not isinstance(value, str) or not value.startswith(("/", "./", "../", "~")):
                continue  # unset, or a hub id (`org/name`)
            if not os.path.exists(os.path.expanduser(value)):
                return f"options.{name} {value!r} does not exist"
        return None


class PreprocessModeOptions(HeadOptions):
    """Heads that can prepare their images on their own device: the CLIP family, image_reward,
    hpsv3 (Qwen2-VL), videoalign (Qwen2-VL video)."""

    preprocess: Literal["device", "reference"] | None = Field(
        None,
        description=(
            "`device`: batched tensor ops on the head's device from the uint8 pixels (resize with "
            "antialiasing into uint8 levels, then the head's own crop / pad / normalise / patches); "
            "`reference`: the library's own per-image transform (PIL / CLIPProcessor / open_clip / "
            "Qwen2-VL's processor; the CLIP family and image_reward run it in `preprocess_processes` "
            "separate processes). Default: `device` on cuda, else `reference`. The score's "
            "`details.head.preprocess_mode` says which ran."
        ),
    )

    def preprocess_mode(self) -> str:
        return self.preprocess or ("device" if self.device.startswith("cuda") else "reference")


class PreprocessOptions(PreprocessModeOptions):
    """Heads whose image preprocessing is a separate stage (`prepare`): the CLIP family, image_reward."""

    preprocess_processes: int | None = Field(
        None, ge=1, le=256,
        description="`reference`: processes running the transform; default min(8, CPUs).",
    )

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: object) -> object:
        if isinstance(data, dict) and "preprocess_threads" in data:
            raise ValueError("preprocess_threads is gone: preprocessing runs in processes now "
                             "(preprocess_processes) or on the device (preprocess = \"device\")")
        return data

    def preprocess_process_count(self) -> int:
        """`reference`: the processes running the transform (`preprocess_processes`, default min(8, CPUs))."""
        return self.preprocess_processes or min(8, os.cpu_count() or 1)


class ClipFamilyOptions(PreprocessOptions):
    text_cache_size: int = Field(4096, ge=0, description="Prompts whose text embedding is kept (LRU).")


class ClipOptions(ClipFamilyOptions):
    library: Literal["open_clip", "transformers"] = Field(
        "transformers", description="Loader: transformers `CLIPModel` or open_clip."
    )
    model: str = Field(
        "openai/clip-vit-large-patch14",
        description="transformers: hub id or local dir; open_clip: architecture name (e.g. `ViT-L-14`).",
    )
    pretrained: str | None = Field(
        None, description="open_clip: pretrained tag (`openai`) or a checkpoint path; unused by transformers."
    )
    processor: str | None = Field(None, description="transformers: processor hub id or dir (default: model).")
    model_config_file: str | None = Field(
        None, description="open_clip: a JSON model config to register first (a custom architecture)."
    )
    cosine_dtype: Literal["float32", "model"] = Field(
        "float32",
        description="Where the cosine is computed: float32 (the embeddings cast first), or `model`: in the "
        "model's dtype, as Flow-Factory's CLIP reward computes it (transformers: CLIPModel's own "
        "normalisation, F.normalize, then the dot product, all in `dtype`; bf16 by default there).",
    )

    @model_validator(mode="after")
    def _cosine_dtype(self) -> "ClipOptions":
        if self.cosine_dtype == "model" and self.library != "transformers":
            raise ValueError("cosine_dtype = 'model' is Flow-Factory's CLIPModel arithmetic: library = 'transformers'")
        return self


class PickScoreOptions(ClipFamilyOptions):
    local_weight_fields: ClassVar[tuple[str, ...]] = ("model", "processor")
    model: str = Field("yuvalkirstain/PickScore_v1", description="Hub id or local dir of the CLIPModel.")
    processor: str = Field(
        "laion/CLIP-ViT-H-14-laion2B-s32B-b79K", description="Hub id or local dir of the CLIPProcessor."
    )
    peer_scale: bool = Field(
        True,
        description=(
            "reward = raw / 26 as cosmos-rl and Flow-Factory report PickScore (typical 0.75-0.9); "
            "false: reward = raw (exp(logit_scale) x cosine)."
        ),
    )

    def default_normalize(self) -> NormalizeConfig | None:
        return _PEER_PICKSCORE if self.peer_scale else None


_PEER_PICKSCORE = NormalizeConfig(kind="affine", scale=1.0 / 26.0)


class HPSv2Options(ClipFamilyOptions):
    local_weight_fields: ClassVar[tuple[str, ...]] = ("checkpoint",)
    model: str = Field("ViT-H-14", description="open_clip architecture name.")
    checkpoint: str = Field(
        "xswu/HPSv2/HPS_v2.1_compressed.pt",
        description="HPS checkpoint: a local path, or `hub_repo_id/filename` on the Hugging Face hub.",
    )
    model_config_file: str | None = Field(
        None, description="A JSON open_clip model config to register first (a custom architecture)."
    )


class HPSv3Options(PreprocessModeOptions):
    """HPSv3 (MizzenAI): Qwen2-VL + a ranknet head giving (mu, log sigma) per image; loaded by
    the `hpsv3` package's HPSv3RewardInferencer, so it runs under .venv-hpsv3 (transformers 4.45.2)."""

    local_weight_fields: ClassVar[tuple[str, ...]] = ("checkpoint", "base_model", "config")

    checkpoint: str = Field(
        "MizzenAI/HPSv3/HPSv3.safetensors",
        description=(
            "The reward model's state dict: a local .safetensors (or torch .pth/.pt/.bin) file, or "
            "`hub_repo_id/filename` on the Hugging Face hub (the default is the released one)."
        ),
    )
    base_model: str | None = Field(
        None,
        description=(
            "Qwen2-VL base model (config, processor, architecture) written into the config's "
            "`model_name_or_path`: hub id or local dir; default: the config's own "
            "(`Qwen/Qwen2-VL-7B-Instruct` in the package's shipped HPSv3_7B.yaml)."
        ),
    )
    config: str | None = Field(
        None,
        description=(
            "HPSv3 yaml config; default: the package's shipped config/HPSv3_7B.yaml. Its "
            "torch_dtype / bf16 / fp16 / disable_flash_attn2 are replaced from `dtype` and "
            "`flash_attn` (a temporary copy is what the package reads)."
        ),
    )
    flash_attn: bool = Field(
        False, description="flash-attention 2 (CUDA with fp16/bf16, the flash_attn package); off: SDPA."
    )
    max_batch_size: int = Field(8, ge=1, le=1024, description="Images per forward pass (each ~450 text + 256 image tokens).")

    @field_validator("checkpoint")
    @classmethod
    def _checkpoint(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must name a checkpoint file or `hub_repo_id/filename`")
        if not v.endswith((".safetensors", ".pth", ".pt", ".bin")):
            raise ValueError(f"{v!r}: expected a .safetensors, .pth, .pt or .bin file")
        return v

    @field_validator("base_model")
    @classmethod
    def _base_model(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("must be a hub id or a local directory (or unset)")
        return v

    @field_validator("config")
    @classmethod
    def _config(cls, v: str | None) -> str | None:
        if v is not None and not v.endswith((".yaml", ".yml")):
            raise ValueError(f"{v!r}: expected a .yaml file")
        return v

    @model_validator(mode="after")
    def _flash_attn_needs_cuda(self) -> HPSv3Options:
        if self.flash_attn and (not self.device.startswith("cuda") or self.dtype == "fp32"):
            raise ValueError("flash_attn = true needs device = cuda and dtype = bf16 or fp16 "
                             f"(got device = {self.device!r}, dtype = {self.dtype!r})")
        return self


class OcrOptions(HeadOptions):
    max_batch_size: int = Field(8, ge=1, le=4096, description="Images (or frames) per OCR pass.")
    min_confidence: float = Field(
        0.5, ge=0, le=1, description="Drop recognised lines below this score (PP-OCR default 0.5)."
    )
    use_cls: bool = Field(True, description="Run PP-OCR's text-direction classifier.")


class GenEvalOptions(HeadOptions):
    """GenEval (judge_gateway/heads/geneval/rules.py): an mmdet detector + open_clip colour zero-shot."""

    max_batch_size: int = Field(4, ge=1, le=4096, description="Images per detector pass.")
    detector_config: str = Field(
        "mask2former/mask2former_swin-s-p4-w7-224_8xb2-lsj-50e_coco.py",
        description=(
            "mmdet config: a file path, or a path inside the configs mmdet's wheel ships "
            "(default: Mask2Former Swin-S COCO instance segmentation, GenEval's detector)."
        ),
    )
    detector_checkpoint: str = Field(
        description="The detector's weights: a local .pth, `repo_id/filename` on the hub, or an http(s) URL "
        "(OpenMMLab's model zoo; fetched on first use), e.g. mmdet's Mask2Former Swin-S COCO checkpoint."
    )
    clip_model: str = Field("ViT-L-14", description="open_clip architecture of the colour classifier.")
    clip_pretrained: str = Field(
        description="open_clip pretrained tag (`openai`) or a checkpoint path for `clip_model`."
    )
    clip_model_config_file: str | None = Field(
        None, description="A JSON open_clip model config to register first (a custom architecture)."
    )
    reward: Literal["score", "correct", "strict"] = Field(
        "score",
        description=(
            "What raw and reward are: the partial `score` (mean of per-include components), GenEval's "
            "`correct` (0/1) or `strict` (0/1, exact counts). A sample's `geneval_only_strict: true` "
            "(cosmos-rl) picks `strict` for that sample."
        ),
    )


class VideoAlignOptions(PreprocessModeOptions):
    """VideoAlign / VideoReward: frames sampled at the fps and size the checkpoint was trained
    with (its model_config.json), whatever the trainer's video fps; `video.*` is not used."""

    local_weight_fields: ClassVar[tuple[str, ...]] = ("checkpoint", "base_model")

    checkpoint: str = Field(
        "KwaiVGI/VideoReward",
        description="Directory (or hub id) with model_config.json and checkpoint-STEP/model.pth.",
    )
    checkpoint_step: int | None = Field(None, ge=0, description="Which checkpoint-STEP; default: the highest.")
    base_model: str | None = Field(
        None, description="Base Qwen2-VL config + processor (hub id or dir); default: model_config's model_name_or_path."
    )
    normalize: bool = Field(True, description="z-normalise VQ/MQ/TA with the checkpoint's inference_config mean/std.")
    max_batch_size: int = Field(4, ge=1, le=256, description="Videos per forward pass.")


class ImageRewardVit(Strict):
    """A vision tower other than the released ImageReward's ViT-L/16, built with the package's own
    BLIP VisionTransformer at its 224 px input (tiny test checkpoints)."""

    embed_dim: int = Field(ge=8, le=4096, description="Vision width (the med BERT's encoder_width).")
    depth: int = Field(ge=1, le=64, description="Transformer blocks.")
    num_heads: int = Field(ge=1, le=64, description="Attention heads; must divide embed_dim.")
    patch_size: int = Field(16, ge=1, le=224, description="Patch size; must divide 224.")

    @model_validator(mode="after")
    def _check(self) -> ImageRewardVit:
        if self.embed_dim % self.num_heads:
            raise ValueError(f"num_heads {self.num_heads} does not divide embed_dim {self.embed_dim}")
        if 224 % self.patch_size:
            raise ValueError(f"patch_size {self.patch_size} does not divide the 224 px input")
        return self


class ImageRewardOptions(PreprocessOptions):
    """ImageReward (BLIP ViT-L/16 + med BERT with cross-attention + MLP), run by the
    `image-reward` package's own model code in its own venv (scripts/setup_imagereward.sh)."""

    local_weight_fields: ClassVar[tuple[str, ...]] = ("checkpoint", "med_config")

    max_batch_size: int = Field(16, ge=1, le=1024, description="(prompt, image) pairs per forward pass.")
    checkpoint: str = Field(
        "THUDM/ImageReward/ImageReward.pt",
        description="ImageReward state dict: a local path, or `hub_repo_id/filename` on the Hugging Face hub.",
    )
    med_config: str = Field(
        "THUDM/ImageReward/med_config.json",
        description="The med BERT config JSON: a local path, or `hub_repo_id/filename` on the Hugging Face hub.",
    )
    tokenizer: str = Field(
        "bert-base-uncased",
        description=(
            "BertTokenizer the package loads (it hard-codes `bert-base-uncased`): a hub id or a local "
            "directory (works offline)."
        ),
    )
    vit: ImageRewardVit | None = Field(
        None,
        description=(
            "Vision tower sizes when the checkpoint is not ImageReward-v1.0's ViT-L/16 (tests' tiny "
            "checkpoints); unset: the package's own `vit='large'`."
        ),
    )
