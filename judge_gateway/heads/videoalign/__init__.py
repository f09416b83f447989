"""VideoAlign (`videoalign` kind, a Qwen2-VL video reward model): `judge` (gateway: samples a video's
frames, one job per video), `config` (checkpoint layout, frame sampling, chat text, normalisation;
torch-free), `model` (worker: the model). This face imports none of them: the gateway must not load
the model's side, nor the worker the judge's."""
