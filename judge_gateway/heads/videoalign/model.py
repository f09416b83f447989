"""Worker side of the `videoalign` head: loads a VideoAlign / VideoReward checkpoint with
transformers' Qwen2VLForConditionalGeneration and scores whole videos.

Loading (no peft needed): the base model's config + processor (`model_name_or_path`, or the
`base_model` option), the reward tokens added to the tokenizer, then `checkpoint-STEP/model.pth`
(weights_only): PEFT LoRA pairs are merged into their base weights (W + scale * B @ A),
`modules_to_save` copies win over the originals, and transformers-4.x Qwen2-VL key names
(`visual.*`, `model.layers.*`) are mapped onto 5.x's (`model.visual.*`, `model.language_model.*`).
Every tensor of the model must be covered by the checkpoint, and every checkpoint tensor used.

Preprocessing (`options.preprocess`): the frames are resized to Qwen-VL's smart size (bicubic,
antialiased, rounded to uint8 levels) and the processor rescales, normalises and patches them;
`device` (the default on cuda) runs all of it on the model's device (the uint8 frames are what
crosses to it, and the processor's torchvision backend takes its `device`), `reference` on the CPU.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...config.head_options import VideoAlignOptions
from ..batcher import Job, MicroBatcher, Staged
from ..models.base import HeadLoadError, HeadModel
from .config import (DIMS, VideoAlignConfigError, build_chat_text, find_checkpoint,
                                load_model_config, normalize, smart_frame_size)

_LORA_RE = re.compile(r"^(?P<mod>.+)\.lora_(?P<ab>[AB])\.(?P<adapter>[^.]+)\.weight$")


def _resolve_dir(path_or_id: str) -> Path:
    p = Path(path_or_id).expanduser()
    if p.is_dir():
        return p
    if p.is_absolute() or path_or_id.startswith("."):
        raise HeadLoadError(f"videoalign: checkpoint directory {path_or_id!r} not found")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(path_or_id))
    except Exception as exc:  # offline, unknown repo ...
        raise HeadLoadError(f"videoalign: cannot get checkpoint {path_or_id!r}: {type(exc).__name__}: {exc}") from None


def _canonical_key(key: str) -> str:
    """A checkpoint key (PEFT-wrapped or not, transformers 4.x or 5.x names) -> 5.x model key."""
    for prefix in ("base_model.model.", "module."):
        if key.startswith(prefix):
            key = key[len(prefix):]
    if key.startswith("visual."):
        return "model." + key
    if key.startswith("model.") and not key.startswith(("model.visual.", "model.language_model.")):
        return "model.language_model." + key[len("model."):]
    return key


def merge_peft_state_dict(state: dict[str, Any], lora_scale: float | None) -> dict[str, Any]:
    """PEFT state dict -> plain state dict of the merged model (canonical 5.x keys)."""
    import torch

    lora: dict[str, dict[str, Any]] = {}
    plain: dict[str, Any] = {}
    saved: dict[str, Any] = {}
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise HeadLoadError(f"videoalign: checkpoint entry {key!r} is not a tensor")
        m = _LORA_RE.match(key)
        if m:
            lora.setdefault(m["mod"], {})[m["ab"]] = value
            continue
        if ".modules_to_save." in key:
            mod, rest = key.split(".modules_to_save.", 1)
            saved[mod + "." + rest.split(".", 1)[1]] = value
            continue
        if ".original_module." in key:
            continue  # superseded by the modules_to_save copy
        plain[key.replace(".base_layer.", ".")] = value
    plain.update(saved)
    for mod, ab in lora.items():
        if set(ab) != {"A", "B"}:
            raise HeadLoadError(f"videoalign: LoRA module {mod!r} lacks lora_{'B' if 'A' in ab else 'A'}")
        if lora_scale is None:
            raise HeadLoadError("videoalign: the checkpoint has LoRA weights but peft_lora_config.lora_enable is false")
        wkey = mod + ".weight"
        if wkey not in plain:
            raise HeadLoadError(f"videoalign: LoRA module {mod!r} has no base weight in the checkpoint")
        base = plain[wkey]
        delta = (ab["B"].float() @ ab["A"].float()) * lora_scale
        plain[wkey] = (base.float() + delta).to(base.dtype)
    return {_canonical_key(k): v for k, v in plain.items()}


def _mm_types(batch: dict[str, Any], device: Any) -> dict[str, Any]:
    """transformers >= 5 computes M-RoPE from the processor's `mm_token_type_ids`."""
    t = batch.get("mm_token_type_ids")
    return {} if t is None else {"mm_token_type_ids": t.to(device)}


class VideoAlignHead(HeadModel):
    """One item = one video (all its sampled frames) + its prompt -> VQ/MQ/TA/Overall."""

    options: VideoAlignOptions

    def load(self) -> dict[str, Any]:
        try:
            import torch
            from transformers import AutoConfig, AutoProcessor, Qwen2VLForConditionalGeneration
        except ImportError as exc:
            raise HeadLoadError(f"videoalign needs torch + transformers: {exc}") from None
        o = self.options
        if o.threads:
            torch.set_num_threads(o.threads)
        self.device = torch.device(o.device)
        self.dtype = getattr(torch, o.torch_dtype_name())
        self.use_norm = o.normalize
        root = _resolve_dir(o.checkpoint)
        try:
            self.spec = load_model_config(root, base_model=o.base_model)
            ckpt = find_checkpoint(root, o.checkpoint_step)
        except VideoAlignConfigError as exc:
            raise HeadLoadError(f"videoalign: {exc}") from None
        base = self.spec.base_model
        try:
            self.processor = AutoProcessor.from_pretrained(base)
            config = AutoConfig.from_pretrained(base)
        except Exception as exc:
            raise HeadLoadError(f"videoalign: cannot load the base model {base!r} config/processor: "
                                f"{type(exc).__name__}: {exc}") from None
        tok = self.processor.tokenizer
        tok.add_special_tokens({"additional_special_tokens": list(self.spec.special_tokens)})
        self.reward_ids = [tok.convert_tokens_to_ids(t) for t in self.spec.special_tokens]
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.convert_tokens_to_ids("<|endoftext|>")

        weights = ckpt / "model.pth"
        if not weights.is_file():
            raise HeadLoadError(f"videoalign: {weights} not found")
        state = torch.load(weights, map_location="cpu", weights_only=True)
        if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
            state = state["state_dict"]
        merged = merge_peft_state_dict(state, self.spec.lora_scale)
        head = merged.pop("rm_head.weight", None)
        head_bias = merged.pop("rm_head.bias", None)
        if head is None:
            raise HeadLoadError(f"videoalign: {weights} has no rm_head weights")
        if head.shape[0] != self.spec.output_dim:
            raise HeadLoadError(f"videoalign: rm_head has {head.shape[0]} outputs, model_config says {self.spec.output_dim}")
        emb = merged.get("model.language_model.embed_tokens.weight")
        if emb is None:
            raise HeadLoadError(f"videoalign: {weights} has no token embeddings")
        if len(tok) > emb.shape[0]:
            raise HeadLoadError(f"videoalign: tokenizer has {len(tok)} tokens (with the reward tokens), "
                                f"the checkpoint's embeddings {emb.shape[0]}")
        text_cfg = getattr(config, "text_config", config)
        text_cfg.vocab_size = emb.shape[0]
        config.vocab_size = emb.shape[0]
        model = Qwen2VLForConditionalGeneration(config)
        expected = set(model.state_dict())
        missing = sorted(expected - set(merged) - {"lm_head.weight"})  # the reward model never uses lm_head
        unused = sorted(set(merged) - expected)
        if missing or unused:
            raise HeadLoadError(f"videoalign: checkpoint/model mismatch: missing {missing[:5]} "
                                f"({len(missing)}), unused {unused[:5]} ({len(unused)})")
        model.load_state_dict(merged, strict=False)
        self.model = model.model.to(self.device, self.dtype).eval()  # backbone only: the head reads hidden states
        self.rm_head = torch.nn.Linear(head.shape[1], head.shape[0], bias=head_bias is not None)
        with torch.no_grad():
            self.rm_head.weight.copy_(head)
            if head_bias is not None:
                self.rm_head.bias.copy_(head_bias)
        self.rm_head = self.rm_head.to(self.device, torch.float32).eval()
        self.model_name = o.checkpoint
        self.items = 0
        self.preprocess_mode = o.preprocess_mode()
        self.prep_device = self.device if self.preprocess_mode == "device" else torch.device("cpu")
        return {"model": self.model_name, "checkpoint_step": ckpt.name.split("-", 1)[1],
                "base_model": base, "sampling": self.spec.sampling(),
                "prompt_template": self.spec.prompt_template_type, "normalized": self.use_norm and self.spec.norm is not None,
                "norm": {k: list(v) for k, v in self.spec.norm.items()} if self.spec.norm else None,
                "lora_merged": self.spec.lora_scale is not None, "preprocess_mode": self.preprocess_mode}

    # -- preprocessing --------------------------------------------------------------------------

    def frame_size(self, height: int, width: int) -> tuple[int, int]:
        return smart_frame_size(height, width, self.spec.min_frame_pixels, self.spec.max_frame_pixels)

    def _video_tensor(self, frames: np.ndarray) -> Any:
        """uint8 [T,H,W,3] -> float [T,3,h,w] at Qwen-VL's smart size (bicubic, antialiased), on
        the preprocessing device. The published pipeline resizes the uint8 tensor (torchvision
        rounds and clamps to 0..255) and then casts to float: the same values here."""
        import torch

        from ..preprocess.device import resize_uint8_levels

        # one video's frames are one array already: no stacking copy, one copy to the device
        t = torch.from_numpy(np.ascontiguousarray(frames)).to(self.prep_device).permute(0, 3, 1, 2).float()
        return resize_uint8_levels(t, self.frame_size(t.shape[2], t.shape[3]))

    def prepare(self, videos: Sequence[np.ndarray], prompts: Sequence[str]) -> dict[str, Any]:
        texts = [build_chat_text(p, self.spec.prompt_template_type) for p in prompts]
        tensors = [self._video_tensor(v) for v in videos]
        tok = self.processor.tokenizer
        tok.padding_side = "right"
        return self.processor(text=texts, videos=tensors, padding=True, return_tensors="pt",
                              do_resize=False, do_rescale=True, do_sample_frames=False,
                              device=str(self.prep_device))

    # -- inference ------------------------------------------------------------------------------

    def reward_logits(self, batch: dict[str, Any]) -> Any:
        import torch

        ids = batch["input_ids"].to(self.device)
        with torch.inference_mode():
            out = self.model(input_ids=ids, attention_mask=batch["attention_mask"].to(self.device),
                             pixel_values_videos=batch["pixel_values_videos"].to(self.device, self.dtype),
                             video_grid_thw=batch["video_grid_thw"].to(self.device), use_cache=False,
                             **_mm_types(batch, self.device))
            hidden = out.last_hidden_state
            mask = torch.zeros_like(ids, dtype=torch.bool)
            for tid in self.reward_ids:
                mask |= ids == tid
            counts = mask.sum(1)
            if not bool((counts == len(self.reward_ids)).all()):
                raise RuntimeError(f"expected {len(self.reward_ids)} reward tokens per sample, found {counts.tolist()}")
            picked = self.rm_head(hidden[mask].float()).view(ids.shape[0], len(self.reward_ids), -1)
            if picked.shape[-1] == len(self.reward_ids):
                picked = picked.diagonal(dim1=1, dim2=2)  # reward token i -> output i
            return picked.reshape(ids.shape[0], -1)

    def score_videos(self, videos: Sequence[np.ndarray], prompts: Sequence[str]) -> list[dict[str, Any]]:
        logits = self.reward_logits(self.prepare(videos, prompts)).cpu().tolist()
        outs = []
        for row, video in zip(logits, videos):
            raw = dict(zip(DIMS, (float(x) for x in row)))
            scores = normalize(raw, self.spec.norm if self.use_norm else None)
            h, w = self.frame_size(video.shape[1], video.shape[2])
            outs.append({"vq": scores["VQ"], "mq": scores["MQ"], "ta": scores["TA"], "overall": scores["Overall"],
                         "raw_vq": raw["VQ"], "raw_mq": raw["MQ"], "raw_ta": raw["TA"],
                         "frames": int(video.shape[0]), "height": h, "width": w})
        self.items += len(outs)
        return outs

    def infer(self, images: Sequence[np.ndarray], prompts: Sequence[str]) -> list[dict[str, Any]]:
        raise RuntimeError("videoalign scores whole videos (VideoBatcher), not single frames")

    def make_batcher(self, max_batch_size: int, max_wait_ms: float) -> "VideoBatcher":
        return VideoBatcher(self.score_videos, max_batch_size, max_wait_ms)

    def stats(self) -> dict[str, Any]:
        return {"videos": self.items}


class VideoBatcher(MicroBatcher):
    """MicroBatcher where an item is a whole job (one video): up to `max_batch_size` videos per
    forward pass. Each job gets one output per frame it sent (the video's result, repeated), so
    the gateway's per-frame reply check holds."""

    def job_size(self, job: Job) -> int:
        return 1

    def run(self, jobs: list[Job], staged: Staged | None = None) -> dict[int, list[dict[str, Any]] | Exception]:
        result: dict[int, list[dict[str, Any]] | Exception] = {}
        for i in range(0, len(jobs), self.max_batch_size):
            chunk = jobs[i:i + self.max_batch_size]
            try:
                t0 = time.perf_counter()
                outs = self.infer([j.frames for j in chunk], [j.prompt for j in chunk])
                self.infer_s += time.perf_counter() - t0
                if len(outs) != len(chunk):
                    raise RuntimeError(f"head returned {len(outs)} outputs for {len(chunk)} videos")
            except Exception as exc:
                if len(chunk) == 1:
                    result[chunk[0].msg_id] = exc
                else:  # retry one by one: one bad video must not fail its neighbours
                    for job in chunk:
                        result.update(self.run([job]))
                continue
            self.record(len(chunk))
            for job, out in zip(chunk, outs):
                result[job.msg_id] = [out] * len(job.frames)
        return result


__all__ = ["VideoAlignHead", "VideoBatcher", "merge_peft_state_dict"]
