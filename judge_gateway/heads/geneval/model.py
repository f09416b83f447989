"""Worker side of the `gen_eval` head: mmdet detector + open_clip colour zero-shot.

Runs in the worker process under an interpreter with mmdet 3.3 / mmcv 2.1 / mmengine / open_clip
(`.venv-geneval`, scripts/setup_geneval.sh). The gateway sends, as the item's prompt, a JSON
request `{"color_classes": [...], "threshold": float}`; per image the worker answers
    {"detections": {class: {"boxes": [[x1, y1, x2, y2], ...], "scores": [...], "colors": [...]}}}
with, per class, the objects scoring above `threshold`, best first, at most 16
(rules.MAX_OBJECTS), and for the classes in `color_classes` the colour of each object:
CLIP zero-shot over rules.COLORS ("a photo of a {color} {class}") on the object's box crop
with the pixels outside its mask set to grey (GenEval's recipe). The rules run on the gateway.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...config.head_options import ClipOptions, GenEvalOptions
from ..models.base import HeadLoadError, HeadModel
from ..models.hub import resolve_model_file
from .rules import BOX_THRESHOLD, COLORS, MAX_OBJECTS

log = logging.getLogger(__name__)
GREY = 153  # GenEval's background for the masked crop (#999999)


def resolve_detector_config(name: str) -> str:
    """A config file path, or a path inside the configs mmdet's wheel ships (mmdet/.mim/configs)."""
    p = Path(name)
    if p.is_file():
        return str(p)
    import mmdet

    shipped = Path(mmdet.__file__).parent / ".mim" / "configs" / name
    if shipped.is_file():
        return str(shipped)
    raise HeadLoadError(f"detector_config {name!r} is neither a file nor a config shipped with mmdet "
                        f"(looked in {shipped.parent})")


def masked_crop(image: np.ndarray, box: Sequence[float], mask: np.ndarray | None) -> np.ndarray:
    """The box's crop of an RGB uint8 image, pixels outside the object's mask set to grey."""
    h, w = image.shape[:2]
    x1, y1 = max(0, int(np.floor(box[0]))), max(0, int(np.floor(box[1])))
    x2, y2 = min(w, int(np.ceil(box[2]))), min(h, int(np.ceil(box[3])))
    if x2 <= x1:
        x1, x2 = min(x1, w - 1), min(x1, w - 1) + 1
    if y2 <= y1:
        y1, y2 = min(y1, h - 1), min(y1, h - 1) + 1
    crop = image[y1:y2, x1:x2].copy()
    if mask is not None:
        m = np.asarray(mask[y1:y2, x1:x2], dtype=bool)
        crop[~m] = GREY
    return crop


class GenEvalDetectorHead(HeadModel):
    options: GenEvalOptions

    def load(self) -> dict[str, Any]:
        o = self.options
        try:
            import torch
            from mmdet.apis import init_detector
        except Exception as exc:  # ImportError, or mmcv's compiled ops not loading
            raise HeadLoadError(f"mmdet / mmcv are not usable in the worker's interpreter: "
                                f"{type(exc).__name__}: {exc} (scripts/setup_geneval.sh sets up .venv-geneval)") from exc
        if o.threads:
            torch.set_num_threads(o.threads)
        self.torch = torch
        device = o.device
        config = resolve_detector_config(o.detector_config)
        checkpoint = o.detector_checkpoint
        # An http(s) URL (OpenMMLab's model zoo) is fetched by mmengine into torch's hub cache on first use.
        if not checkpoint.startswith(("https://", "http://")):
            checkpoint = str(resolve_model_file(checkpoint, "gen_eval", "detector_checkpoint"))
        try:
            self.detector = init_detector(config, checkpoint, device=device)
        except Exception as exc:
            raise HeadLoadError(f"mmdet init_detector({config!r}, {checkpoint!r}) failed: "
                                f"{type(exc).__name__}: {exc}") from exc
        self.classes = list(self.detector.dataset_meta.get("classes", ()))
        if not self.classes:
            raise HeadLoadError("the detector has no class names (dataset_meta.classes)")
        # The colour classifier: open_clip through the CLIP head's own loader.
        from ..models.clip import OpenClipHead

        self.clip = OpenClipHead("clip", ClipOptions(
            library="open_clip", model=o.clip_model, pretrained=o.clip_pretrained,
            model_config_file=o.clip_model_config_file, device=device, dtype=o.dtype))
        clip_facts = self.clip.load()
        self._classifiers: dict[str, Any] = {}  # class -> its colour classifier
        import mmcv
        import mmdet

        return {"model": f"mmdet {Path(config).stem}", "detector_config": config,
                "detector_checkpoint": checkpoint, "classes": len(self.classes),
                "mmdet": mmdet.__version__, "mmcv": mmcv.__version__,
                "color_model": clip_facts.get("model"), "color_pretrained": clip_facts.get("pretrained")}

    def _colors(self, image: np.ndarray, cls: str, boxes: list[list[float]],
                masks: list[np.ndarray | None]) -> list[str]:
        crops = [masked_crop(image, b, m) for b, m in zip(boxes, masks)]
        torch = self.torch
        with torch.inference_mode():
            text = self._color_classifier(cls)
            img = self.clip.embed_images(crops)
            best = (img @ text.T).argmax(dim=-1).tolist()
        return [COLORS[i] for i in best]

    def _color_classifier(self, cls: str) -> Any:
        """GenEval's zero-shot colour classifier for a class: per colour, the mean of the
        normalised embeddings of its three templates, normalised again ([len(COLORS), D])."""
        cached = self._classifiers.get(cls)
        if cached is not None:
            return cached
        rows = []
        for c in COLORS:
            prompts = [f"a photo of a {c} {cls}", f"a photo of a {c}-colored {cls}", f"a photo of a {c} object"]
            emb = self.torch.stack(self.clip.text_cache.get_many(prompts, self.clip._text_rows)).mean(dim=0)
            rows.append(emb / emb.norm())
        self._classifiers[cls] = self.torch.stack(rows)
        return self._classifiers[cls]

    def _detect(self, image: np.ndarray, request: dict[str, Any]) -> dict[str, Any]:
        from mmdet.apis import inference_detector

        threshold = float(request.get("threshold", BOX_THRESHOLD))
        color_classes = set(request.get("color_classes") or ())
        # mmdet reads an ndarray as BGR (OpenCV order); ours are RGB.
        result = inference_detector(self.detector, np.ascontiguousarray(image[..., ::-1]))
        inst = result.pred_instances
        scores = inst.scores.detach().cpu().float().numpy()
        labels = inst.labels.detach().cpu().numpy()
        boxes = inst.bboxes.detach().cpu().float().numpy()
        masks = inst.masks.detach().cpu().numpy() if "masks" in inst else None
        out: dict[str, Any] = {}
        for label in np.unique(labels):
            idx = np.nonzero((labels == label) & (scores > threshold))[0]
            if not len(idx):
                continue
            idx = idx[np.argsort(-scores[idx], kind="stable")][:MAX_OBJECTS]
            cls = self.classes[int(label)] if int(label) < len(self.classes) else f"class_{int(label)}"
            det: dict[str, Any] = {"boxes": boxes[idx].round(2).tolist(), "scores": scores[idx].tolist()}
            if cls in color_classes:
                det["colors"] = self._colors(image, cls, det["boxes"],
                                             [masks[i] if masks is not None else None for i in idx])
            out[cls] = det
        return out

    def infer(self, images: Sequence[np.ndarray], prompts: Sequence[str]) -> list[dict[str, Any]]:
        outputs = []
        for image, prompt in zip(images, prompts):
            try:
                request = json.loads(prompt) if prompt else {}
            except ValueError:
                request = {}
            with self.torch.inference_mode():
                outputs.append({"detections": self._detect(image, request)})
        return outputs

