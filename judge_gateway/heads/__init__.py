"""Local scorer heads: CLIP score, PickScore, HPSv2, OCR, run in supervised worker processes.

Gateway side (no torch): `options` (config), `protocol` (framed IPC), `supervisor` (the worker
process), `judge` (the Judge kind), `ocr_text` (target text and the OCR reward), `pooling`.
Worker side (torch / onnxruntime, possibly another venv): `worker`, `batcher`, `text_cache`,
`clip_models`, `ocr_model`.
"""

from .options import HEAD_KIND_OPTIONS, HEAD_KINDS

__all__ = ["HEAD_KIND_OPTIONS", "HEAD_KINDS"]
