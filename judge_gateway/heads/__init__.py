"""Local scorer heads: CLIP score, PickScore, HPSv2, OCR, run in supervised worker processes.

Gateway side (no torch): `protocol` (framed IPC), `supervisor` (the worker process), `judge`
(the Judge kind), `ocr_text` (target text and the OCR reward), `pooling`; their config options are
`judge_gateway.config` (head_options.py; which kind runs which classes: kinds.py), and `registry.py`
builds the judges.
Worker side (torch / onnxruntime, possibly another venv): `worker`, `factory` (kind -> HeadModel),
`models` (the HeadModel interface), `batcher`, `text_cache`, `clip_models`, `ocr_model`.
"""

from ..config import HEAD_KIND_OPTIONS, HEAD_KINDS

__all__ = ["HEAD_KIND_OPTIONS", "HEAD_KINDS"]
