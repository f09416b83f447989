"""Run GenEval 2's own evaluation.py (facebookresearch/GenEval2, read from a mirror, never copied
into this repository) on scripted next-token distributions, under the vLLM venv (torch,
transformers with Qwen3-VL):

    .venv-vllm/bin/python -m tests.support.geneval2_own_code EVALUATION_PY TOKENIZER_DIR CASES_JSON OUT_JSON

What is replaced, and only that: the module-level loading of Qwen/Qwen3-VL-8B-Instruct (its
`qwen_processor` is the tiny Qwen3-VL's processor instead, a real Qwen3VLProcessor with a Qwen2
tokenizer; its `qwen_model` answers `generate` with the scripted distribution of the question in
the prompt), scipy, which the vLLM venv lacks: `scipy.stats.gmean` is scipy's formula
(`exp(mean(log(a)))`, scipy/stats/_stats_py.py), and transformers' reading of an image file, done
with PIL (that venv's torchvision has no image decoder). Everything else is GenEval 2's code as written:
the chat template call, `soft_tifa`, `return_numeric_string` and `main` with its AM / GM.

CASES_JSON: {"image": path, "prompts": [{"prompt", "vqa_list", "dist": {question: {token: p}}}]}.
OUT_JSON: per method (soft_tifa_am, soft_tifa_gm) GenEval 2's printed score and score lists, and
per question the top-20 (token text, logprob) a vLLM server would list for that distribution.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import math
import sys
import types
from pathlib import Path

LOADERS = {"qwen_processor", "qwen_model"}


def geneval2_module(source: str, processor, model) -> types.ModuleType:
    """evaluation.py without its two model loads and its 'Loading Qwen' print; the given processor and model instead."""
    tree = ast.parse(source)
    body = []
    for node in tree.body:
        targets = {t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)}
        if targets & LOADERS:
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "print":
            continue
        body.append(node)
    tree.body = body
    module = types.ModuleType("geneval2_evaluation")
    module.__dict__.update(qwen_processor=processor, qwen_model=model)
    exec(compile(tree, "geneval2/evaluation.py", "exec"), module.__dict__)  # noqa: S102 - the peer's code, on purpose
    return module


def image_files_read_with_pil() -> None:
    """transformers' load_image_as_tensor for a file path, with PIL: the same [C, H, W] uint8 RGB tensor."""
    import numpy as np
    import torch
    import transformers.image_processing_backends as backends
    from PIL import Image

    original = backends.load_image_as_tensor

    def load(image, *args, **kwargs):
        if isinstance(image, str) and Path(image).is_file():
            return torch.from_numpy(np.array(Image.open(image).convert("RGB"))).permute(2, 0, 1).contiguous()
        return original(image, *args, **kwargs)

    backends.load_image_as_tensor = load


def scipy_stand_in() -> None:
    """Installed after transformers has imported what evaluation.py takes from it (transformers
    probes for scipy while it loads)."""
    import importlib.machinery

    import numpy as np

    scipy = types.ModuleType("scipy")
    stats = types.ModuleType("scipy.stats")
    scipy.__spec__ = importlib.machinery.ModuleSpec("scipy", None)
    stats.__spec__ = importlib.machinery.ModuleSpec("scipy.stats", None)
    stats.gmean = lambda a: float(np.exp(np.mean(np.log(np.asarray(a, dtype=float)))))
    scipy.stats = stats
    sys.modules.update({"scipy": scipy, "scipy.stats": stats})


class ScriptedModel:
    """`generate` returns the scripted distribution of the question found in the prompt as logits
    (log p for the listed tokens, -1e4 for every other token: the softmax is the distribution)."""

    device = "cpu"

    def __init__(self, tokenizer, dists: dict[str, dict[str, float]]) -> None:
        self.tokenizer = tokenizer
        self.dists = dists

    def token_id(self, text: str) -> int:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if len(ids) != 1:
            raise ValueError(f"{text!r} is not one token of the tiny tokenizer: {ids}")
        return ids[0]

    def logits(self, question: str):
        import torch

        logits = torch.full((len(self.tokenizer),), -1e4, dtype=torch.float32)
        for text, p in self.dists[question].items():
            logits[self.token_id(text)] = math.log(p)
        return logits

    def generate(self, input_ids=None, **_kwargs):
        import torch

        prompt = self.tokenizer.decode(input_ids[0])
        question = next(q for q in self.dists if q in prompt)
        return types.SimpleNamespace(scores=[self.logits(question)[None, :]], sequences=torch.zeros(1, 1))

    def top20(self, question: str) -> list[tuple[str, float]]:
        import torch

        logprobs = torch.log_softmax(self.logits(question), dim=-1)
        values, ids = torch.topk(logprobs, 20)
        return [(self.tokenizer.decode([int(i)]), float(v)) for v, i in zip(values, ids)]


def main(argv: list[str]) -> int:
    evaluation_py, tokenizer_dir, cases_json, out_json = argv
    cases = json.loads(Path(cases_json).read_text())
    from transformers import (  # what evaluation.py imports, loaded before scipy's stand-in
        AutoModelForCausalLM,  # noqa: F401
        AutoProcessor,
        AutoTokenizer,  # noqa: F401
        GenerationConfig,  # noqa: F401
        Qwen3VLForConditionalGeneration,  # noqa: F401
    )

    scipy_stand_in()
    image_files_read_with_pil()
    processor = AutoProcessor.from_pretrained(tokenizer_dir)
    dists = {q: d for case in cases["prompts"] for q, d in case["dist"].items()}
    model = ScriptedModel(processor.tokenizer, dists)
    module = geneval2_module(Path(evaluation_py).read_text(), processor, model)
    work = Path(out_json).parent
    bench = work / "bench.jsonl"
    bench.write_text("".join(json.dumps({"prompt": c["prompt"], "vqa_list": c["vqa_list"]}) + "\n"
                             for c in cases["prompts"]))
    images = work / "images.json"
    images.write_text(json.dumps({c["prompt"]: cases["image"] for c in cases["prompts"]}))
    out: dict = {"top20": {q: model.top20(q) for q in dists}}
    for method in ("soft_tifa_am", "soft_tifa_gm"):
        scores = work / f"{method}.json"
        sys.argv = ["evaluation.py", "--benchmark_data", str(bench), "--image_filepath_data", str(images),
                    "--method", method, "--output_file", str(scores)]
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
            module.main()
        line = next(x for x in printed.getvalue().splitlines() if x.startswith("Score: "))
        out[method] = {"score": float(line.removeprefix("Score: ")), "score_lists": json.loads(scores.read_text())}
    Path(out_json).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
