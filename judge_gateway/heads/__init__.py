"""Local scorer heads (CLIP score, PickScore, HPSv2/v3, ImageReward, OCR, GenEval, VideoAlign): a
head judge on the gateway feeds a supervised worker process that holds the model.

Gateway side (no torch; `judge_factory.py` builds the judges):
  `judge` (HeadJudge, the Judge of a head kind), `supervisor` (HeadSupervisor: starts, feeds and
  restarts one worker), `protocol` (the head messages over the framing of `judge_gateway.workers`), `shm` (the
  shared-memory arena the pixels travel in, both sides), `pooling` (per-frame scores -> one),
  `ocr_text` (the OCR reward from the worker's lines); the kinds' options and which classes
  run each kind: `judge_gateway.config` (head_options.py, kinds.py).
Worker side (`python -m judge_gateway.heads.worker` under the head's interpreter: torch /
onnxruntime, possibly another venv):
  `worker` (the process), `factory` (`build_head`: kind -> HeadModel, beside its caller),
  `batcher` (micro-batching, prepare overlapping the forward), `models/` (HeadModel and the
  concrete heads), `preprocess/` (image preprocessing: on the device or in spawned processes).
Families with a judge of their own, each `judge` (gateway) + `model` (worker) + their shared rules:
  `geneval/` (judge, rules, model), `videoalign/` (judge, config, model).

This face imports nothing heavy (the gateway's venv has no torch); import the modules directly.
"""

from ..config import HEAD_KIND_OPTIONS, HEAD_KINDS

__all__ = ["HEAD_KIND_OPTIONS", "HEAD_KINDS"]
