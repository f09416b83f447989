"""Worker side of the `image_reward` head: ImageReward-v1.0 (BLIP ViT-L/16 + med BERT with
cross-attention to the image + a 5-layer MLP), run by the `image-reward` package's own model code.

Runs under .venv-imagereward (scripts/setup_imagereward.sh: the package needs transformers 4.45,
timm 0.6.13, fairscale, ...). Loading follows the package's `ImageReward.load`: its `ImageReward`
class built from `med_config`, then the checkpoint's state dict; unlike it, the checkpoint is read
with `weights_only=True` and a weight the checkpoint lacks is an error (the package loads with
strict=False and ignores what is missing, which would score with random layers).

Two construction-time redirects, both explicit and both undone right after construction:
- the tokenizer: the package's `init_tokenizer` always calls
  `BertTokenizer.from_pretrained('bert-base-uncased')`; with `options.tokenizer` set to anything
  else, that name in the package's `blip` module is swapped for a loader of the configured one
  (the package itself then adds its `[DEC]` / `[ENC]` tokens as usual);
- the vision tower, only with `options.vit` set (tiny test checkpoints): `ImageReward.__init__`
  hard-codes `vit='large'`; `create_vit` in the package's `blip_pretrain` module is swapped for one
  that builds the package's own `VisionTransformer` with the configured sizes.

Scoring is the package's `ImageReward.score` for one pair, batched over pairs (never the B x B
prompts x images cosmos-rl computes): the package's image transform, its tokenizer call
(padding to max_length 35, truncation), the visual encoder once per batch, the text encoder with
cross-attention to each item's own image embeddings, the [CLS] feature in fp32 through the MLP,
then (r - mean) / std with the package's constants.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ...config.head_options import ImageRewardOptions
from .base import HeadLoadError, HeadModel
from .hub import resolve_model_file

PACKAGE_TOKENIZER = "bert-base-uncased"  # the name the package hard-codes
MAX_LENGTH = 35  # ImageReward.score's tokenizer call
# The package's `_transform(224)`: Resize(224, bicubic) (shortest side), CenterCrop(224), ToTensor,
# Normalize with CLIP's mean/std.
IMAGE_SIZE = 224
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
# Buffers the package's model registers that hold no learned values (BertEmbeddings' arange).
_DERIVED_BUFFERS = ("blip.text_encoder.embeddings.position_ids",)
_SETUP_HINT = "run scripts/setup_imagereward.sh and set python = \".venv-imagereward/bin/python\""


@contextlib.contextmanager
def package_redirects(tokenizer: str, vit: dict[str, int] | None) -> Iterator[None]:
    """Point the package's hard-coded tokenizer name and (optionally) ViT size elsewhere while
    its model is constructed; restore both afterwards."""
    from ImageReward.models.BLIP import blip, blip_pretrain

    original_tokenizer = blip.BertTokenizer
    original_create_vit = blip_pretrain.create_vit
    if tokenizer != PACKAGE_TOKENIZER:
        # init_tokenizer() calls BertTokenizer.from_pretrained('bert-base-uncased'): load ours instead.
        blip.BertTokenizer = types.SimpleNamespace(
            from_pretrained=lambda _name, *a, **kw: original_tokenizer.from_pretrained(tokenizer, *a, **kw))
    if vit is not None:
        def create_vit(_vit: str, image_size: int, use_grad_checkpointing: bool = False,
                       ckpt_layer: int = 0, drop_path_rate: float = 0) -> tuple[Any, int]:
            # The package's own VisionTransformer, at the configured size instead of 'large'.
            encoder = blip.VisionTransformer(
                img_size=image_size, patch_size=vit["patch_size"], embed_dim=vit["embed_dim"],
                depth=vit["depth"], num_heads=vit["num_heads"], use_grad_checkpointing=use_grad_checkpointing,
                ckpt_layer=ckpt_layer, drop_path_rate=drop_path_rate)
            return encoder, vit["embed_dim"]

        blip_pretrain.create_vit = create_vit
    try:
        yield
    finally:
        blip.BertTokenizer = original_tokenizer
        blip_pretrain.create_vit = original_create_vit


class ImageRewardHead(HeadModel):
    """One item = one (image, prompt) pair -> {"raw": z-normalised ImageReward score}."""

    options: ImageRewardOptions

    def load(self) -> dict[str, Any]:
        o = self.options
        # Files first: a wrong path fails in a second, before the package's slow import.
        checkpoint = resolve_model_file(o.checkpoint, "image_reward", "checkpoint")
        med_config = resolve_model_file(o.med_config, "image_reward", "med_config")
        try:
            import importlib

            import torch

            # The package's __init__ imports clip, diffusers, datasets ... (all in its venv); its
            # `ImageReward` attribute is the class, so the module is fetched by name.
            image_reward_module = importlib.import_module("ImageReward.ImageReward")
        except Exception as exc:  # noqa: BLE001 - ImportError, or a broken stack (e.g. transformers 5)
            raise HeadLoadError(f"image_reward needs the image-reward package ({_SETUP_HINT}): "
                                f"{type(exc).__name__}: {exc}") from None
        if o.threads:
            torch.set_num_threads(o.threads)
        self.torch = torch
        self.device = torch.device(o.device)
        self.dtype = getattr(torch, o.torch_dtype_name())
        tokenizer = o.tokenizer
        vit = o.vit.model_dump() if o.vit is not None else None

        try:
            state = torch.load(checkpoint, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - unreadable, not a torch file, unsafe pickle ...
            raise HeadLoadError(f"image_reward: cannot read checkpoint {checkpoint}: {type(exc).__name__}: {exc}") from None
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise HeadLoadError(f"image_reward: {checkpoint} holds no state dict of tensors")
        try:
            with package_redirects(tokenizer, vit):
                model = image_reward_module.ImageReward(med_config=str(med_config), device=str(self.device))
        except Exception as exc:  # noqa: BLE001 - bad med_config, tokenizer not found offline ...
            raise HeadLoadError(f"image_reward: cannot build the model (med_config {med_config}, tokenizer "
                                f"{tokenizer!r}): {type(exc).__name__}: {exc}") from None
        try:
            result = model.load_state_dict(state, strict=False)  # as the package; checked below
        except RuntimeError as exc:  # shape mismatches (e.g. a ViT-L checkpoint on a tiny tower)
            raise HeadLoadError(f"image_reward: checkpoint {checkpoint} does not fit the model"
                                f"{' (options.vit ' + str(vit) + ')' if vit else ' (ViT-L/16)'}: {exc}") from None
        missing = [k for k in result.missing_keys if k not in _DERIVED_BUFFERS]
        if missing:
            raise HeadLoadError(f"image_reward: checkpoint {checkpoint} lacks {len(missing)} weights of the model, "
                                f"e.g. {missing[:5]}")
        model = model.to(self.device, self.dtype).eval()
        model.mlp.float()  # the package runs the MLP on fp32 features
        model.requires_grad_(False)
        self.model = model
        self.mean, self.std = float(model.mean), float(model.std)
        self.tokenizer = model.blip.tokenizer
        self.items = 0
        visual = model.blip.visual_encoder
        stage = self._start_stage()
        return stage | {
            "model": o.checkpoint, "library": "image-reward",
            "med_config": o.med_config, "tokenizer": tokenizer,
            "vit": dict(vit) if vit else "large",
            "vision": {"embed_dim": int(visual.embed_dim), "depth": len(visual.blocks),
                       "patch_size": int(visual.patch_embed.patch_size[0])},
            "text_layers": int(model.blip.text_encoder.config.num_hidden_layers),
            "image_size": 224, "max_length": MAX_LENGTH, "norm": {"mean": self.mean, "std": self.std},
            "preprocess": "resize_shortest(bicubic)+center_crop 224, CLIP mean/std",
            "unused_checkpoint_keys": len(result.unexpected_keys),
        }

    def _start_stage(self) -> dict[str, Any]:
        from ..preprocess.device import Geometry
        from ..preprocess.pool import TransformSpec
        from ..preprocess.stage import ImageStage

        self.stage = ImageStage(
            self.options.preprocess_mode(), self.device, self.dtype,
            Geometry("shortest_crop", IMAGE_SIZE, CLIP_MEAN, CLIP_STD, "bicubic", crop_offset="round"),
            TransformSpec("judge_gateway.heads.preprocess.reference:image_reward", {"n_px": IMAGE_SIZE}),
            self.options.preprocess_process_count())
        return self.stage.facts()

    def prepare(self, images: Sequence[np.ndarray], prompts: Sequence[str] = ()) -> Any:
        """The batch's pixels: the package's own transform in the preprocessing processes, or its
        geometry on the device (preprocess/stage.py)."""
        return self.stage.prepare(images)

    def close(self) -> None:
        if getattr(self, "stage", None) is not None:
            self.stage.close()

    def infer(self, images: Sequence[np.ndarray], prompts: Sequence[str], prepared: Any = None) -> list[dict[str, Any]]:
        torch = self.torch
        if len(images) != len(prompts):
            raise ValueError(f"{len(images)} images for {len(prompts)} prompts")
        blip = self.model.blip
        pixels = self.stage.pixels(prepared if prepared is not None else self.prepare(images))
        with torch.inference_mode():
            text = self.tokenizer(list(prompts), padding="max_length", truncation=True, max_length=MAX_LENGTH,
                                  return_tensors="pt")
            image_embeds = blip.visual_encoder(pixels)
            image_atts = torch.ones(image_embeds.shape[:-1], dtype=torch.long, device=self.device)
            out = blip.text_encoder(text.input_ids.to(self.device), attention_mask=text.attention_mask.to(self.device),
                                    encoder_hidden_states=image_embeds, encoder_attention_mask=image_atts,
                                    return_dict=True)
            features = out.last_hidden_state[:, 0, :].float()
            rewards = (self.model.mlp(features) - self.mean) / self.std
        self.items += len(prompts)
        return [{"raw": float(r)} for r in rewards[:, 0].cpu().tolist()]

    def stats(self) -> dict[str, Any]:
        return {"pairs": self.items, "preprocess_pids": sorted(self.stage.pids)}


__all__ = ["ImageRewardHead", "package_redirects"]
