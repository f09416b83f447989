"""The reference image transforms, built inside the preprocessing processes (pool.py).

Each builder returns `transform(list of uint8 [H, W, 3] arrays) -> [n, 3, H, W] float32 tensor`:
the library's own transform applied image by image to PIL images, exactly as the heads did in
process before (and as the references score).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from PIL import Image

Transform = Callable[[list[np.ndarray]], torch.Tensor]


def _per_image(one: Callable[[Image.Image], torch.Tensor]) -> Transform:
    torch.set_num_threads(1)  # one process per core: no intra-op threads on top

    def run(images: list[np.ndarray]) -> torch.Tensor:
        return torch.stack([one(Image.fromarray(np.ascontiguousarray(im))) for im in images])

    return run


def hf_processor(processor: str) -> Transform:
    """transformers' CLIPProcessor (AutoProcessor of `processor`), one image per call."""
    from transformers import AutoProcessor

    proc = AutoProcessor.from_pretrained(processor)
    return _per_image(lambda im: proc(images=[im], return_tensors="pt")["pixel_values"][0])


def open_clip_v2(preprocess_cfg: dict[str, Any]) -> Transform:
    """open_clip's eval transform of a model (what create_model_and_transforms returns)."""
    from open_clip.transform import PreprocessCfg, image_transform_v2

    return _per_image(image_transform_v2(PreprocessCfg(**preprocess_cfg), is_train=False))


def open_clip_image_transform(**kwargs: Any) -> Transform:
    """open_clip.image_transform(**kwargs, is_train=False) (HPSv2: resize_mode="longest", fill 0)."""
    import open_clip

    return _per_image(open_clip.image_transform(is_train=False, **kwargs))


def image_reward(n_px: int = 224) -> Transform:
    """The image-reward package's own `_transform(224)` (ImageReward.preprocess)."""
    from ImageReward.ImageReward import _transform

    return _per_image(_transform(n_px))
