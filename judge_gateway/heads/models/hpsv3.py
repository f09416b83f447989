"""Worker side of the `hpsv3` head: HPSv3 (MizzenAI) through the `hpsv3` package's own loader.

Runs under .venv-hpsv3 (scripts/setup_hpsv3.sh): hpsv3 1.0 pins transformers 4.45.2.

Loading is `hpsv3.HPSv3RewardInferencer(config_path, checkpoint_path, device)`, unchanged: it
parses the yaml, builds `Qwen2VLRewardModelBT` from the base model with the `<|Reward|>` token
added and the ranknet head, and strictly loads the checkpoint. Its interface has no dtype, so the
yaml it reads is a temporary copy of the configured one whose `torch_dtype` says the dtype (with
the `bf16`/`fp16` training flags off: they would cast the same way, but TrainingArguments refuses
fp16 without a GPU) and whose `disable_flash_attn2` follows `flash_attn`.

Scoring is the body of `HPSv3RewardInferencer.reward` (its `prepare_batch`, then the model's
forward) without autograd, with one check in between: exactly one `<|Reward|>` token per row
(the package would otherwise mix rows up silently). One change of speed, not of numbers: with
SDPA or eager attention, transformers 4.45's Qwen2-VL vision tower attends over the whole batch's
patches at once under a block-diagonal mask (a [S, S] mask, S = 1024 patches x batch), so its cost
grows with the square of the batch; the head runs the vision tower image by image instead (the
same attention blocks, so the same outputs), as flash-attention's varlen kernel does by itself. Images go in as PIL images, which its
`fetch_image` takes like file paths (convert to RGB, bicubic resize to 448x448-equivalent pixels).
The head's two outputs are (mu, log sigma): the training loss uses sigma = exp(output 1).
"""

from __future__ import annotations

import math
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...config.head_options import TORCH_DTYPE_NAMES, HPSv3Options
from .base import HeadLoadError, HeadModel
from .hub import resolve_model_file

# HPSv3RewardInferencer.prepare_batch resizes every image to this many pixels (min = max),
# whatever the config's max_pixels says.
IMAGE_PIXELS = 256 * 28 * 28
IMAGE_FACTOR = 28  # its fetch_image's size factor: Qwen2-VL's patch (14) x merge (2)


def inference_yaml(source: dict[str, Any], dtype: str, flash_attn: bool, base_model: str | None) -> dict[str, Any]:
    """The yaml the package reads: the configured one with dtype / attention / base model set."""
    cfg = dict(source)
    if base_model is not None:
        cfg["model_name_or_path"] = base_model
    if not cfg.get("model_name_or_path"):
        raise HeadLoadError("hpsv3: options.config has no model_name_or_path and options.base_model is unset")
    cfg.update(torch_dtype=TORCH_DTYPE_NAMES[dtype], bf16=False, fp16=False, disable_flash_attn2=not flash_attn)
    cfg.pop("deepspeed", None)  # a training file; the package drops it for inference too
    return cfg


def vision_per_image(visual: Any) -> None:
    """Make a Qwen2-VL vision tower encode a batch image by image (see the module docstring):
    its input is every image's patches concatenated, `grid_thw` one row per image."""
    import torch

    whole_batch = visual.forward

    def forward(hidden_states: Any, grid_thw: Any) -> Any:
        if grid_thw.shape[0] == 1:
            return whole_batch(hidden_states, grid_thw=grid_thw)
        sizes = grid_thw.prod(-1).tolist()
        return torch.cat([whole_batch(chunk, grid_thw=thw[None])
                          for chunk, thw in zip(hidden_states.split(sizes), grid_thw)])

    visual.forward = forward


class HPSv3Head(HeadModel):
    """One item = one image + its prompt -> {"raw": mu, "details": {"sigma", "log_sigma"}}."""

    options: HPSv3Options

    def load(self) -> dict[str, Any]:
        o = self.options
        try:
            from importlib.metadata import version

            import torch
            import yaml
            from hpsv3 import HPSv3RewardInferencer
            from hpsv3.dataset.data_collator_qwen import INSTRUCTION, prompt_with_special_token
            from hpsv3.dataset.utils import smart_resize
        except ImportError as exc:
            raise HeadLoadError(f"hpsv3 head: cannot import the hpsv3 package ({exc}); run scripts/setup_hpsv3.sh "
                                "and set options.python = \".venv-hpsv3/bin/python\"") from None
        if o.threads:
            torch.set_num_threads(o.threads)
        device = o.device
        dtype = o.dtype
        if device == "cpu":  # the package's head runs under torch.autocast("cuda"): a no-op here
            warnings.filterwarnings("ignore", message="CUDA is not available or torch_xla is imported")

        import hpsv3

        shipped = Path(hpsv3.__file__).parent / "config" / "HPSv3_7B.yaml"
        config_path = Path(o.config).expanduser() if o.config else shipped
        if not config_path.is_file():
            raise HeadLoadError(f"hpsv3: options.config {str(config_path)!r} does not exist")
        try:
            source = yaml.safe_load(config_path.read_text())
        except yaml.YAMLError as exc:
            raise HeadLoadError(f"hpsv3: options.config {str(config_path)!r} is not valid yaml: {exc}") from None
        if not isinstance(source, dict):
            raise HeadLoadError(f"hpsv3: options.config {str(config_path)!r} is not a yaml mapping")
        cfg = inference_yaml(source, dtype, o.flash_attn, o.base_model)
        base = str(cfg["model_name_or_path"])
        base_path = Path(base).expanduser()
        if (base_path.is_absolute() or base.startswith(".")) and not (base_path / "config.json").is_file():
            key = "options.base_model" if o.base_model else f"model_name_or_path of {config_path}"
            raise HeadLoadError(f"hpsv3: {key}: {base!r} is not a model directory (no config.json)")
        ckpt = resolve_model_file(o.checkpoint, "hpsv3", "checkpoint")

        with tempfile.TemporaryDirectory(prefix="jg-hpsv3-") as tmp:
            tmp_cfg = Path(tmp) / "hpsv3_inference.yaml"
            tmp_cfg.write_text(yaml.safe_dump(cfg, sort_keys=False))
            try:
                self.inferencer = HPSv3RewardInferencer(config_path=str(tmp_cfg), checkpoint_path=str(ckpt),
                                                        device=device)
            except Exception as exc:  # noqa: BLE001 - the base model, the checkpoint or their fit
                msg = str(exc).strip().splitlines()
                raise HeadLoadError(
                    f"hpsv3: HPSv3RewardInferencer could not load checkpoint {str(ckpt)!r} on base model {base!r}: "
                    f"{type(exc).__name__}: {' '.join(msg[:6])[:1500]}") from None
        model = self.inferencer.model
        tok = self.inferencer.processor.tokenizer
        if not self.inferencer.use_special_tokens or model.special_token_ids is None:
            raise HeadLoadError("hpsv3: the config's use_special_tokens is false; this head reads the <|Reward|> token")
        self.reward_ids = list(model.special_token_ids)
        # Text the tokenizer would turn into special tokens must not come from a prompt.
        # (all_special_tokens misses <|image_pad|> & co once hpsv3 has replaced the additional ones.)
        self.special_texts = sorted({t.content for t in tok.added_tokens_decoder.values() if t.special})
        # The head's forward runs under torch.autocast("cuda", float32), which casts its bf16/fp16
        # input to fp32 on a GPU and does nothing elsewhere: cast explicitly so every device
        # computes the head in fp32 the same way.
        model.rm_head.register_forward_pre_hook(lambda _m, args: tuple(a.float() for a in args))
        attn = getattr(model.config, "_attn_implementation", None)
        if attn != "flash_attention_2":
            vision_per_image(model.visual)
        self.torch = torch
        self.items = 0
        self.preprocess_mode = o.preprocess_mode()
        self.device_images = None
        if self.preprocess_mode == "device":
            from ..preprocess.qwen2_vl import PatchLayout, Qwen2VLImages, check_processor

            image_processor = self.inferencer.processor.image_processor
            why = check_processor(image_processor, IMAGE_FACTOR, IMAGE_PIXELS)
            if why:
                raise HeadLoadError(f"hpsv3: preprocess = \"device\" cannot reproduce this model's processor: {why}; "
                                    "set preprocess = \"reference\"")
            self.device_images = Qwen2VLImages(PatchLayout.of(image_processor), torch.device(device))
            self.smart_resize = smart_resize
            self.instruction = INSTRUCTION
            self.reward_suffix = prompt_with_special_token
        params = dict(model.named_parameters())
        return {"model": o.checkpoint, "checkpoint_path": str(ckpt), "base_model": base,
                "config": str(config_path), "hpsv3_version": version("hpsv3"),
                "transformers_version": version("transformers"),
                "attn_implementation": attn,
                "weights_dtype": str(params["lm_head.weight"].dtype).removeprefix("torch."),
                "rm_head_dtype": str(next(model.rm_head.parameters()).dtype).removeprefix("torch."),
                "image_pixels": IMAGE_PIXELS, "padding_side": tok.padding_side,
                "vision_per_image": attn != "flash_attention_2",
                "preprocess_mode": self.preprocess_mode,
                "reward": "mu", "sigma": "exp(log_sigma)"}

    def _check_prompts(self, prompts: Sequence[str]) -> None:
        for p in prompts:
            found = [t for t in self.special_texts if t in p]
            if found:
                raise ValueError(f"the prompt contains the tokenizer's special token(s) {found}")

    def reference_batch(self, images: Sequence[np.ndarray], prompts: Sequence[str]) -> dict[str, Any]:
        """`preprocess = "reference"`: the package's own prepare_batch on PIL images."""
        from PIL import Image

        pil = [Image.fromarray(np.ascontiguousarray(img)) for img in images]
        return self.inferencer.prepare_batch(pil, list(prompts))

    def device_batch(self, images: Sequence[np.ndarray], prompts: Sequence[str]) -> dict[str, Any]:
        """`preprocess = "device"`: prepare_batch's tensors, the pixels made on the model's device.
        The chat text is the one prepare_batch writes (same messages, template and tokenizer)."""
        from ..preprocess.qwen2_vl import expand_image_pads

        assert self.device_images is not None
        sizes = [self.smart_resize(int(im.shape[0]), int(im.shape[1]), factor=IMAGE_FACTOR, min_pixels=IMAGE_PIXELS,
                                   max_pixels=IMAGE_PIXELS) for im in images]
        pixel_values, grid_thw = self.device_images(images, sizes)
        processor = self.inferencer.processor
        messages = [[{"role": "user", "content": [
            {"type": "image", "image": "", "min_pixels": IMAGE_PIXELS, "max_pixels": IMAGE_PIXELS},
            {"type": "text", "text": self.instruction.format(text_prompt=p) + self.reward_suffix}]}]
            for p in prompts]
        texts = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        texts = expand_image_pads(texts, grid_thw, self.device_images.layout.merge_size)
        tokens = processor.tokenizer(texts, padding=True, return_tensors="pt")
        self._check_reward_tokens(tokens["input_ids"])  # on the host: no wait for the device
        device = self.device_images.device
        return {"input_ids": tokens["input_ids"].to(device), "attention_mask": tokens["attention_mask"].to(device),
                "pixel_values": pixel_values, "image_grid_thw": grid_thw.to(device)}

    def _check_reward_tokens(self, ids: Any) -> None:
        """Exactly one `<|Reward|>` token per row (the package would otherwise mix rows up)."""
        counts = sum((ids == t).sum(1) for t in self.reward_ids)
        if not bool((counts == 1).all()):
            raise RuntimeError(f"expected one <|Reward|> token per item, found {counts.tolist()}")

    def infer(self, images: Sequence[np.ndarray], prompts: Sequence[str]) -> list[dict[str, Any]]:
        torch = self.torch
        self._check_prompts(prompts)
        with torch.inference_mode():
            if self.device_images is not None:
                batch = self.device_batch(images, prompts)
            else:
                batch = self.reference_batch(images, prompts)
                self._check_reward_tokens(batch["input_ids"])
            logits = self.inferencer.model(return_dict=True, **batch)["logits"].float().cpu()
        if tuple(logits.shape) != (len(images), 2):
            raise RuntimeError(f"HPSv3 returned logits of shape {tuple(logits.shape)} for {len(images)} images")
        outs = []
        for mu, log_sigma in logits.tolist():
            sigma = math.exp(log_sigma) if log_sigma < 700 else math.inf
            if not (math.isfinite(mu) and math.isfinite(sigma)):
                raise RuntimeError(f"HPSv3 gave a non-finite output (mu={mu}, log_sigma={log_sigma})")
            outs.append({"raw": mu, "details": {"sigma": sigma, "log_sigma": log_sigma}})
        self.items += len(outs)
        return outs

    def stats(self) -> dict[str, Any]:
        return {"images": self.items}


__all__ = ["IMAGE_PIXELS", "HPSv3Head", "inference_yaml"]
