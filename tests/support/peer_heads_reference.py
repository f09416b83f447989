"""The peers' CLIP-family rewards computed the peers' way on the tiny models, as a script under
.venv-heads (torch, transformers, open_clip): the oracle of tests/integration/test_conformance_heads.py.

    .venv-heads/bin/python -m tests.support.peer_heads_reference SPEC.json OUT.json

SPEC: {"hf_clip": dir (CLIPModel + CLIPProcessor), "openclip": {"name", "config", "checkpoint"},
       "hpsv2_options": our hpsv2 head's options,
       "images": [png path], "prompts": [str], "videos": [[png path]], "video_prompts": [str],
       "group": [png path], "group_prompt": str}
Written from the peers' source, not from our heads (their processors and calls, in their order):
Flow-Factory src/flow_factory/rewards/pick_score.py 52-84 (scores), 86-116 (video: the mean over
all frames), 118-140 (/ 26), 218-244 (PickScore_Rank); clip.py 46-102 (video: the first frame; in
bfloat16, its default dtype, Flow-Factory's own __call__ from its mirror where there is one);
cosmos-rl reward_service/cosmos_rl_reward/model/pickscore.py 54-111 and hpsv2.py 31-92, 162-210.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image


def _features(out):
    return out if isinstance(out, torch.Tensor) else out.pooler_output


def ff_pickscore_raw(model, processor, prompts, images) -> torch.Tensor:
    """pick_score.py _compute_scores_batch: exp(logit_scale) x cosine, no / 26."""
    image_inputs = processor(images=images, padding=True, truncation=True, max_length=77, return_tensors="pt")
    text_inputs = processor(text=prompts, padding=True, truncation=True, max_length=77, return_tensors="pt")
    image_embs = _features(model.get_image_features(**image_inputs))
    image_embs = image_embs / image_embs.norm(p=2, dim=-1, keepdim=True)
    text_embs = _features(model.get_text_features(**text_inputs))
    text_embs = text_embs / text_embs.norm(p=2, dim=-1, keepdim=True)
    return model.logit_scale.exp() * (text_embs * image_embs).sum(dim=-1)


def ff_pickscore_video_raw(model, processor, prompts, videos, batch_size: int = 16) -> torch.Tensor:
    counts = [len(v) for v in videos]
    frames = [f for v in videos for f in v]
    flat_prompts = [p for p, n in zip(prompts, counts) for _ in range(n)]
    scores = torch.cat([ff_pickscore_raw(model, processor, flat_prompts[i:i + batch_size], frames[i:i + batch_size])
                        for i in range(0, len(frames), batch_size)])
    return torch.stack([s.mean() for s in scores.split(counts)])


def ff_clip(model, processor, prompts, images) -> torch.Tensor:
    inputs = processor(text=prompts, images=images, return_tensors="pt", padding=True, truncation=True)
    out = model(**inputs)
    return (F.normalize(out.image_embeds, p=2, dim=-1) * F.normalize(out.text_embeds, p=2, dim=-1)).sum(dim=-1)


def ff_clip_in_dtype(model, processor, prompts, images) -> tuple[list[float], str]:
    """Flow-Factory's own CLIPRewardModel.__call__ (clip.py 46-102 at a0b2bc5, read from its mirror by
    tests/support/peer_source.py) on a model already in its dtype (RewardArguments.dtype, bfloat16
    by default): everything after the towers in that dtype, `.float()` last. Without the mirror,
    ff_clip above (the same lines, written out). (values, "peer" | "oracle")."""
    import types
    from typing import List, Optional

    from tests.support import peer_source

    output = types.SimpleNamespace
    found = peer_source.peer_functions(
        peer_source.FLOW_FACTORY, "src/flow_factory/rewards/clip.py", ["CLIPRewardModel.__call__"],
        {"torch": torch, "F": F, "List": List, "Optional": Optional, "Image": Image,
         "RewardModelOutput": lambda rewards, extra_info: output(rewards=rewards, extra_info=extra_info)})
    if found is None:
        return ff_clip(model, processor, prompts, images).float().tolist(), "oracle"
    self = types.SimpleNamespace(model=model, processor=processor, device=torch.device("cpu"))
    return found["CLIPRewardModel.__call__"](self, prompts, image=images).rewards.tolist(), "peer"


def cosmos_pickscore(model, processor, prompts, images) -> torch.Tensor:
    """model/pickscore.py PickScoreScorer.forward: norms clamped at 1e-12, diag(text @ image.T) / 26."""
    image_inputs = processor(images=images, padding=True, truncation=True, max_length=77, return_tensors="pt")
    text_inputs = processor(text=prompts, padding=True, truncation=True, max_length=77, return_tensors="pt")
    image_embs = _features(model.get_image_features(**image_inputs))
    image_embs = image_embs / image_embs.norm(p=2, dim=-1, keepdim=True).clamp_min(1e-12)
    text_embs = _features(model.get_text_features(**text_inputs))
    text_embs = text_embs / text_embs.norm(p=2, dim=-1, keepdim=True).clamp_min(1e-12)
    return (model.logit_scale.exp() * (text_embs @ image_embs.T)).diag() / 26


def cosmos_hpsv2(spec: dict, prompts, arrays) -> torch.Tensor:
    """model/hpsv2.py: uint8 NHWC -> float / 255 -> ResizeMaxSize (longest side to the input size,
    bicubic on the tensor, padded with 0 around) -> Normalize -> model(x, text) -> diag(img @ txt.T)."""
    import open_clip
    from torchvision.transforms import InterpolationMode, Normalize
    from torchvision.transforms import functional as TF

    open_clip.add_model_config(spec["config"])
    model = open_clip.create_model(spec["name"], precision="amp", device="cpu", jit=False, output_dict=True)
    state = torch.load(spec["checkpoint"], map_location="cpu", weights_only=True)["state_dict"]
    model.load_state_dict({k.removeprefix("module."): v for k, v in state.items()})
    model.eval()
    size = model.visual.image_size
    size = size[0] if isinstance(size, tuple) else size
    mean = getattr(model.visual, "image_mean", None) or (0.48145466, 0.4578275, 0.40821073)
    std = getattr(model.visual, "image_std", None) or (0.26862954, 0.26130258, 0.27577711)
    out = []
    for arr in arrays:  # images of different sizes: one by one, as a batch of one
        x = torch.from_numpy(arr)[None].to(torch.float32).permute(0, 3, 1, 2).contiguous() / 255.0
        h, w = x.shape[-2:]
        scale = size / float(max(h, w))
        if scale != 1.0:
            new = (round(h * scale), round(w * scale))
            x = TF.resize(x, new, InterpolationMode.BICUBIC)
            ph, pw = size - new[0], size - new[1]
            x = TF.pad(x, padding=[pw // 2, ph // 2, pw - pw // 2, ph - ph // 2], fill=0)
        x = Normalize(mean=mean, std=std)(x)
        feats = model(x, open_clip.get_tokenizer(spec["name"])([prompts[len(out)]]))
        out.append((feats["image_features"] @ feats["text_features"].T).diagonal()[0])
    return torch.stack(out)


def hpsv2_on_our_embeddings(options: dict, prompts, arrays) -> list[float]:
    """model/hpsv2.py 207-210 (diag of image @ text features) on the embeddings our hpsv2 head
    computes: its formula on the same model outputs, apart from the pixels each side prepares."""
    from judge_gateway.heads.factory import build_head

    head = build_head("hpsv2", {k: v for k, v in options.items() if k != "kind"})
    head.load()
    try:
        with torch.inference_mode():
            image = head.embed_images(arrays)
            text = torch.stack(head._text_rows(list(prompts)))
        return (image @ text.T).diagonal().tolist()
    finally:
        head.close()


def main() -> int:
    from transformers import CLIPModel, CLIPProcessor

    spec = json.loads(Path(sys.argv[1]).read_text())
    load = lambda paths: [Image.open(p).convert("RGB") for p in paths]  # noqa: E731
    model = CLIPModel.from_pretrained(spec["hf_clip"]).eval()
    processor = CLIPProcessor.from_pretrained(spec["hf_clip"])
    images, prompts = load(spec["images"]), spec["prompts"]
    videos = [load(v) for v in spec["videos"]]
    group = load(spec["group"])
    with torch.no_grad():
        group_raw = ff_pickscore_raw(model, processor, [spec["group_prompt"]] * len(group), group)
        out = {
            "ff_pickscore": (ff_pickscore_raw(model, processor, prompts, images) / 26).tolist(),
            "ff_pickscore_video": (ff_pickscore_video_raw(model, processor, spec["video_prompts"], videos) / 26).tolist(),
            "ff_pickscore_rank": (group_raw.argsort().argsort().float() / len(group)).tolist(),
            "ff_clip": ff_clip(model, processor, prompts, images).tolist(),
            "ff_clip_video": ff_clip(model, processor, spec["video_prompts"], [v[0] for v in videos]).tolist(),
            "cosmos_pickscore": cosmos_pickscore(model, processor, prompts, images).tolist(),
            "logit_scale_exp": float(model.logit_scale.exp()),
            "cosmos_hpsv2": cosmos_hpsv2(spec["openclip"], prompts, [np.asarray(i) for i in images]).tolist(),
        }
    out["cosmos_hpsv2_on_our_embeddings"] = hpsv2_on_our_embeddings(spec["hpsv2_options"], prompts,
                                                                     [np.asarray(i) for i in images])
    # Flow-Factory's CLIP at its default dtype (RewardArguments.dtype: bfloat16), by its own code
    bf16 = CLIPModel.from_pretrained(spec["hf_clip"], torch_dtype=torch.bfloat16).eval()
    with torch.no_grad():
        out["ff_clip_bf16"], out["ff_clip_bf16_by"] = ff_clip_in_dtype(bf16, processor, prompts, images)
        out["ff_clip_bf16_video"], _ = ff_clip_in_dtype(bf16, processor, spec["video_prompts"],
                                                        [v[0] for v in videos])
    Path(sys.argv[2]).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
