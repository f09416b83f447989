"""GenEval (`gen_eval` kind): `judge` (gateway: GenEval's rules over the worker's detections),
`rules` (the tags, colours, counting and position checks; torch-free), `model` (worker: the mmdet
detector + open_clip colour classifier). This face imports none of them: the gateway must not
load the model's side, nor the worker the judge's."""
