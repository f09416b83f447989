"""The worker's head models (torch / onnxruntime; only a worker process imports these):

`base` (HeadModel, HeadLoadError, the preprocess options), `hub` (a checkpoint path or hub id ->
a local file), `text_cache` (prompt embeddings reused across batches), `clip` (CLIP score,
PickScore, HPSv2), `hpsv3`, `image_reward`, `ocr` (RapidOCR). The worker builds them with
`heads.factory.build_head`; this face imports none of them, so a base class never imports its
subclasses back.
"""
