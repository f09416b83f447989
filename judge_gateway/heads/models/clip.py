"""CLIP-family heads (CLIP score, PickScore, HPSv2) on open_clip or transformers.

All three score an (image, prompt) pair from L2-normalised embeddings:
- clip:      raw = cosine(image, text)
- pickscore: raw = exp(logit_scale) x cosine (PickScore_v1, a CLIP-H fine-tune)
- hpsv2:     raw = cosine(image, text) on open_clip ViT-H-14 with the HPS checkpoint's weights,
             images padded to a square with black (HPSv2's ResizeMaxSize / cosmos-rl)
Text embeddings go through a TextEmbeddingCache: the prompts of a batch missing from it are
encoded in one text-tower call (a GRPO group's prompt once); everything runs under
torch.inference_mode. Image preprocessing (`prepare`, preprocess/stage.py) runs either on the device
(`preprocess = "device"`, each head's reference geometry as batched tensor ops) or as the library's
own transform in preprocessing processes (`"reference"`), on the worker's stager thread while the
previous batch runs on the device. transformers' CLIPModel is loaded with SDPA attention;
open_clip's towers use torch's MultiheadAttention, whose inference path is SDPA already.
"""

from __future__ import annotations

import contextlib
import logging
from abc import abstractmethod
from dataclasses import dataclass
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..preprocess.device import Geometry
from ..preprocess.pool import TransformSpec
from ..preprocess.stage import ImageStage
from ...config.head_options import ClipFamilyOptions, ClipOptions, HPSv2Options, PickScoreOptions
from .base import HeadLoadError, HeadModel
from .hub import resolve_model_file
from .text_cache import TextEmbeddingCache

log = logging.getLogger(__name__)


def _vector_norm(emb: torch.Tensor) -> torch.Tensor:
    """CLIPModel.forward's norm: transformers' own _get_vector_norm where it has one (pow, sum,
    pow 0.5, in the tensor's dtype), else the same three steps."""
    try:
        from transformers.models.clip.modeling_clip import _get_vector_norm
    except ImportError:
        return torch.pow(torch.sum(torch.pow(emb, 2), dim=-1, keepdim=True), 0.5)
    return _get_vector_norm(emb)


def _features(out: Any) -> torch.Tensor:
    """transformers < 5 returns a tensor from get_*_features; 5.x an output object whose
    pooler_output is the projected embedding."""
    if isinstance(out, torch.Tensor):
        return out
    pooled = getattr(out, "pooler_output", None)
    if isinstance(pooled, torch.Tensor):
        return pooled
    raise TypeError(f"unexpected feature output {type(out).__name__}")


@dataclass
class TextRows:
    """A batch's normalised text rows [n, d]; `ready`: the CUDA event recorded on the side stream
    after their kernels (None off CUDA)."""

    rows: torch.Tensor
    ready: Any = None


@dataclass
class PreparedBatch:
    """A batch made ready before its forward: the image stage's output and its prompts' text rows."""

    staged: Any
    text: TextRows | None  # None when prepared without prompts


class _GpuTimer:
    """The device time between start() and stop(), read once the stream has synchronised
    (a no-op off CUDA): what the worker's forward costs on the GPU, apart from its host waits."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) \
            if device.type == "cuda" else None

    def start(self) -> None:
        if self._events:
            # The head's device's stream: a bare record() would use the current device's (cuda:0
            # for a head on cuda:1), timing nothing and opening a context on that other GPU.
            self._events[0].record(torch.cuda.current_stream(self.device))

    def stop(self) -> None:
        if self._events:
            self._events[1].record(torch.cuda.current_stream(self.device))

    def elapsed_s(self) -> float:
        if not self._events:
            return 0.0
        self._events[1].synchronize()
        return self._events[0].elapsed_time(self._events[1]) / 1000.0


class ClipFamilyHead(HeadModel):
    options: ClipFamilyOptions

    def __init__(self, kind: str, options: ClipFamilyOptions) -> None:
        super().__init__(kind, options)
        self.device = torch.device(options.device)
        self.dtype = getattr(torch, options.torch_dtype_name())
        self.text_cache = TextEmbeddingCache(options.text_cache_size)
        self.stage: ImageStage | None = None
        self.gpu_forward_s = 0.0  # the image tower's time on the device (CUDA events), for the bench

    # -- model-specific parts ------------------------------------------------------------------
    @abstractmethod
    def _geometry(self) -> Geometry | None:
        """The reference transform's geometry for `preprocess = "device"` (None: no equivalent)."""

    @abstractmethod
    def _reference(self) -> TransformSpec:
        """The reference transform, as built in the preprocessing processes."""

    @abstractmethod
    def _encode_image(self, pixels: torch.Tensor) -> torch.Tensor: ...

    @abstractmethod
    def _encode_text(self, prompts: list[str]) -> torch.Tensor: ...

    def _scale(self) -> float:
        return 1.0

    # -- shared scoring ------------------------------------------------------------------------
    @property
    def cosine_in_model_dtype(self) -> bool:
        """clip's `cosine_dtype = "model"`: normalise and multiply in the model's dtype (Flow-Factory)."""
        return getattr(self.options, "cosine_dtype", "float32") == "model"

    def _unit(self, emb: torch.Tensor) -> torch.Tensor:
        """Unit rows: in float32, or, with cosine_in_model_dtype, in the model's dtype exactly as
        Flow-Factory's CLIP reward gets them (src/flow_factory/rewards/clip.py 85-94 at a0b2bc5):
        CLIPModel.forward's division by the norm (transformers' _get_vector_norm), then F.normalize."""
        if not self.cosine_in_model_dtype:
            emb = emb.float()
            return emb / emb.norm(dim=-1, keepdim=True)
        emb = emb / _vector_norm(emb)
        return torch.nn.functional.normalize(emb, p=2, dim=-1)

    def _text_rows(self, prompts: list[str]) -> list[torch.Tensor]:
        return list(self._unit(self._encode_text(prompts)))

    def _start_stage(self) -> dict[str, Any]:
        """Build the prepare stage once the model is loaded; its facts for the score's details."""
        mode = self.options.preprocess_mode()
        self.stage = ImageStage(mode, self.device, self.dtype, self._geometry() if mode == "device" else None,
                                self._reference(), self.options.preprocess_process_count())
        return self.stage.facts()

    def prepare(self, images: Sequence[np.ndarray], prompts: Sequence[str] = ()) -> PreparedBatch:
        """The batch's preprocessed pixels (see ImageStage.prepare) and, given its prompts, their
        text rows: the worker's stager thread runs this while the previous batch's forward runs,
        so a step's new prompts go through the text tower off the forward's thread (on a GPU the
        text kernels queue behind that forward instead of the GPU idling while they launch)."""
        assert self.stage is not None
        staged = self.stage.prepare(images)
        return PreparedBatch(staged, self._text(prompts) if prompts else None)

    def _text(self, prompts: Sequence[str]) -> TextRows:
        """The prompts' rows, encoded on the side stream on CUDA: from the stager thread, a
        synchronous copy of the tokens on the forward's stream would wait for the forward that is
        running. The cached rows are only ever read on that side stream."""
        side = self.stage.side_stream if self.stage is not None else None
        with torch.inference_mode():
            if side is None:
                return TextRows(torch.stack(self.text_cache.get_many(list(prompts), self._text_rows)))
            with torch.cuda.stream(side):
                rows = torch.stack(self.text_cache.get_many(list(prompts), self._text_rows))
                ready = torch.cuda.Event()
                ready.record(side)
            return TextRows(rows, ready)

    def _text_on_current_stream(self, text: TextRows) -> torch.Tensor:
        if text.ready is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(text.ready)
            text.rows.record_stream(current)  # its memory belongs to the side stream's pool
        return text.rows

    def embed_images(self, images: Sequence[np.ndarray], staged: Any = None) -> torch.Tensor:
        """Normalised image embeddings; `staged`: the image stage's output for `images`."""
        assert self.stage is not None
        if staged is None:
            staged = self.stage.prepare(images)
        return self._unit(self._encode_image(self.stage.pixels(staged)))

    def infer(self, images: Sequence[np.ndarray], prompts: Sequence[str],
              prepared: PreparedBatch | None = None) -> list[dict[str, Any]]:
        # `prepared`: what `prepare` returned for these images and prompts
        staged, text = (prepared.staged, prepared.text) if prepared is not None else (None, None)
        timer = _GpuTimer(self.device)
        with torch.inference_mode():
            if text is None:
                text = self._text(prompts)
            timer.start()
            img = self.embed_images(images, staged)
            timer.stop()
            # in the rows' dtype: float32, or the model's (cosine_dtype = "model", then cast once)
            cosine = (img * self._text_on_current_stream(text)).sum(dim=-1).float()
            raw = cosine * self._scale()
            out = [{"raw": float(r), "cosine": float(c)} for r, c in zip(raw.tolist(), cosine.tolist())]
        self.gpu_forward_s += timer.elapsed_s()  # the readback above synchronised: no wait here
        return out

    def stats(self) -> dict[str, Any]:
        pids = sorted(self.stage.pids) if self.stage is not None else []
        timing = {"gpu_forward_s": round(self.gpu_forward_s, 4)} if self.device.type == "cuda" else {}
        return {**self.text_cache.stats(), "preprocess_pids": pids, **timing}

    def close(self) -> None:
        if self.stage is not None:
            self.stage.close()

    def _finish(self, model: torch.nn.Module) -> torch.nn.Module:
        model = model.to(self.device, self.dtype).eval()
        model.requires_grad_(False)
        return model

    @abstractmethod
    def _build_model(self) -> torch.nn.Module:
        """The model from its files, as its library loads it (before `_finish`): `load` and a
        colocated head's wake (`reload_weights`) build it the same way."""

    # -- residency (heads/sleeping.py) ---------------------------------------------------------
    reloads_in_place = True

    def weight_modules(self) -> list[Any]:
        return [self.model] if getattr(self, "model", None) is not None else []

    def release_weights(self) -> None:
        # The tokenizer / processor, the image stage and the text cache stay: they hold no weights
        # (the cached text rows are a few KB per prompt, computed by the same weights a reload gives back).
        self.model = None

    def reload_weights(self) -> None:
        self.model = self._finish(self._build_model())

    def device_tensors_to(self, device: Any) -> None:
        self.text_cache.map_rows(lambda row: row.to(device, non_blocking=True))


# ---------------------------------------------------------------------------------------------
# open_clip (CLIP score via open_clip, HPSv2)
# ---------------------------------------------------------------------------------------------


def _register_model_config(path: str | None) -> None:
    if path:
        import open_clip

        p = Path(path)
        if not p.is_file():
            raise HeadLoadError(f"model_config_file {path!r} does not exist")
        open_clip.add_model_config(p)  # registered under the file's stem


class OpenClipHead(ClipFamilyHead):
    options: ClipOptions | HPSv2Options

    @property
    def reloads_in_place(self) -> bool:  # type: ignore[override]
        """Its weights come from files (a pretrained tag or path, or HPS's checkpoint): a reload
        gives them back bit for bit. Without either open_clip initialises them at random."""
        o = self.options
        return isinstance(o, HPSv2Options) or o.pretrained is not None

    def _build_model(self) -> torch.nn.Module:
        import open_clip

        o = self.options
        arch = o.model
        pretrained = o.pretrained if isinstance(o, ClipOptions) else None
        # Weights from files are loaded strictly over every parameter and persistent buffer (open_clip's
        # load_checkpoint for `pretrained`, load_state_dict for HPS's checkpoint), so the random
        # initialisation they overwrite is skipped: ~60% of a ViT-B/32's build on a CPU (a colocated
        # head's wake at level 2 builds it again). A random-weight model keeps its initialisation.
        with _random_init_skipped(self.reloads_in_place):
            try:
                model, _, _ = open_clip.create_model_and_transforms(arch, pretrained=pretrained)
            except Exception as exc:
                raise HeadLoadError(f"open_clip could not build {arch!r} (pretrained={pretrained!r}): {exc}") from exc
            if isinstance(o, HPSv2Options):
                model.load_state_dict(_hps_state_dict(o.checkpoint), strict=True)
        return model

    def load(self) -> dict[str, Any]:
        o = self.options
        _register_model_config(o.model_config_file)
        model = self._build_model()
        pretrained = o.pretrained if isinstance(o, ClipOptions) else None
        facts: dict[str, Any] = {"model": o.model, "pretrained": pretrained, "library": "open_clip"}
        self.pp_cfg = dict(model.visual.preprocess_cfg)
        if isinstance(o, HPSv2Options):
            facts["checkpoint"] = o.checkpoint
            # HPSv2's own eval transform: longest side to the input size, pad to square with black.
            self.pp_cfg["resize_mode"] = "longest"
            self.pp_cfg["fill_color"] = 0
            facts["preprocess"] = "resize_longest+pad_square_black"
        else:
            facts["preprocess"] = "resize_shortest+center_crop"
        self.model = self._finish(model)
        import open_clip

        self.tokenizer = open_clip.get_tokenizer(o.model)
        return facts | self._start_stage()

    def _reference(self) -> TransformSpec:
        if self.kind == "hpsv2":
            return TransformSpec("judge_gateway.heads.preprocess.reference:open_clip_image_transform", {
                "image_size": self.model.visual.image_size, "mean": self.pp_cfg.get("mean"),
                "std": self.pp_cfg.get("std"), "resize_mode": "longest", "fill_color": 0})
        return TransformSpec("judge_gateway.heads.preprocess.reference:open_clip_v2",
                             {"preprocess_cfg": self.pp_cfg})

    def _geometry(self) -> Geometry | None:
        cfg = self.pp_cfg
        size = cfg["size"]
        size = size if isinstance(size, int) else (size[0] if size[0] == size[1] else None)
        modes = {"shortest": "shortest_crop", "longest": "longest_pad"}
        if size is None or cfg.get("resize_mode", "shortest") not in modes \
                or cfg.get("interpolation", "bicubic") not in ("bicubic", "bilinear"):
            return None
        return Geometry(modes[cfg.get("resize_mode", "shortest")], size, tuple(cfg["mean"]), tuple(cfg["std"]),
                        cfg.get("interpolation", "bicubic"), crop_offset="round", fill=int(cfg.get("fill_color", 0)))

    def _encode_image(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.model.encode_image(pixels)

    def _encode_text(self, prompts: list[str]) -> torch.Tensor:
        return self.model.encode_text(self.tokenizer(prompts).to(self.device))


# torch.nn.init's in-place initialisers: a module's constructor calls them on weights a strict load
# then overwrites.
_INITIALISERS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "xavier_uniform_",
                 "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_")


@contextlib.contextmanager
def _random_init_skipped(skip: bool) -> Iterator[None]:
    """While building a model whose every weight a strict load will overwrite: torch.nn.init's
    initialisers leave their tensor as it is (uninitialised memory the load fills). Not thread-safe;
    a worker builds one model at a time."""
    if not skip:
        yield
        return
    saved = {name: getattr(torch.nn.init, name) for name in _INITIALISERS}
    for name in _INITIALISERS:
        setattr(torch.nn.init, name, lambda tensor, *args, **kwargs: tensor)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(torch.nn.init, name, fn)


def _hps_state_dict(checkpoint: str) -> dict[str, torch.Tensor]:
    """The HPS checkpoint's state dict: a local .pt/.pth ({"state_dict": ...} or plain) or
    safetensors file, or `repo_id/filename` on the Hugging Face hub."""
    path = resolve_model_file(checkpoint, "hpsv2", "checkpoint")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(path))
    else:
        state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise HeadLoadError(f"{path} holds no state dict")
    # Checkpoints saved from DistributedDataParallel prefix every key with "module.".
    return {k.removeprefix("module."): v for k, v in state.items()}


# ---------------------------------------------------------------------------------------------
# transformers (CLIP score via CLIPModel, PickScore)
# ---------------------------------------------------------------------------------------------


class HFClipHead(ClipFamilyHead):
    options: ClipOptions | PickScoreOptions

    def _build_model(self) -> torch.nn.Module:
        from transformers import CLIPModel

        return CLIPModel.from_pretrained(self.options.model, attn_implementation="sdpa")

    def load(self) -> dict[str, Any]:
        from transformers import AutoProcessor

        o = self.options
        model_id = o.model
        processor_id = o.processor or model_id
        try:
            model = self._build_model()
            self.processor = AutoProcessor.from_pretrained(processor_id)
        except Exception as exc:
            raise HeadLoadError(
                f"transformers could not load CLIPModel {model_id!r} / processor {processor_id!r}: {exc}"
            ) from exc
        self.model = self._finish(model)
        self.max_length = int(getattr(model.config.text_config, "max_position_embeddings", 77))
        self._logit_scale = float(self.model.logit_scale.float().exp()) if self.kind == "pickscore" else 1.0
        self.processor_id = processor_id
        facts = {"model": model_id, "processor": processor_id, "library": "transformers",
                 "preprocess": "processor (resize_shortest+center_crop)",
                 "attention": getattr(model.config, "_attn_implementation", None)}
        if self.kind == "pickscore":
            facts["logit_scale_exp"] = self._logit_scale
        return facts | self._start_stage()

    def _scale(self) -> float:
        return self._logit_scale

    def _reference(self) -> TransformSpec:
        return TransformSpec("judge_gateway.heads.preprocess.reference:hf_processor", {"processor": self.processor_id})

    def _geometry(self) -> Geometry | None:
        """CLIPImageProcessor's: shortest edge, centre crop at int((H - h) / 2), rescale, normalise."""
        ip = self.processor.image_processor

        def get(obj: Any, key: str) -> Any:
            return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)

        short, crop = get(ip.size, "shortest_edge"), ip.crop_size
        interpolation = {2: "bilinear", 3: "bicubic"}.get(int(getattr(ip, "resample", 3)))
        if not (short and ip.do_resize and ip.do_center_crop and ip.do_rescale and ip.do_normalize
                and get(crop, "height") == get(crop, "width") == short and interpolation
                and abs(float(ip.rescale_factor) - 1 / 255) < 1e-12):
            return None
        return Geometry("shortest_crop", int(short), tuple(ip.image_mean), tuple(ip.image_std), interpolation,
                        crop_offset="trunc")

    def _encode_image(self, pixels: torch.Tensor) -> torch.Tensor:
        return _features(self.model.get_image_features(pixel_values=pixels))

    def _encode_text(self, prompts: list[str]) -> torch.Tensor:
        tok = self.processor(text=prompts, padding=True, truncation=True, max_length=self.max_length,
                             return_tensors="pt")
        return _features(self.model.get_text_features(
            input_ids=tok["input_ids"].to(self.device), attention_mask=tok["attention_mask"].to(self.device)))


def build_clip_family(kind: str, options: ClipFamilyOptions) -> ClipFamilyHead:
    if options.threads:
        torch.set_num_threads(options.threads)
    if isinstance(options, HPSv2Options) or (isinstance(options, ClipOptions) and options.library == "open_clip"):
        return OpenClipHead(kind, options)
    return HFClipHead(kind, options)
