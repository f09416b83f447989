"""Run VideoScore2's own soft-score functions (TIGER-AI-Lab/VideoScore2 `vs2_inference.py`, read
from a copy outside this repository, never copied into it) on scripted logits, under the vLLM venv
(torch, transformers):

    .venv-vllm/bin/python -m tests.support.videoscore2_own_code VS2_INFERENCE_PY TOKENIZER_DIR CASES_JSON OUT_JSON

`find_score_token_index_by_prompt` and `ll_based_soft_score_normed` run exactly as written (the
module's other code loads a model, OpenCV and qwen_vl_utils: not run). They get what `generate`
would give them: the reply's token ids (the real tokenizer's encoding of the scripted reply) and,
per generated token, the processed scores, the raw logits divided by the sampling temperature
(HF's temperature warper; at temperature 0, greedy, the raw logits). The hard value they are
given only gates None (the reference passes its regex's integer).

CASES_JSON: [{"reply", "temperature", "labels": [..], "logits": {"<char offset of a digit>": {token: logit}}}].
Every other position gets a fixed random background, the generated token well above it.
OUT_JSON: per case, per label, the reference's token index and soft score; and the reply's tokens
as a vLLM server lists them (token text, bytes, logprob, top-20 raw logprobs).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

FUNCTIONS = ("ll_based_soft_score_normed", "find_score_token_index_by_prompt")


def reference_functions(source: str) -> dict:
    import re

    import numpy as np
    import torch

    tree = ast.parse(source)
    chunks = [ast.get_source_segment(source, node) for node in tree.body
              if isinstance(node, ast.FunctionDef) and node.name in FUNCTIONS]
    if len(chunks) != len(FUNCTIONS):
        raise LookupError(f"{FUNCTIONS} not all in the source")
    namespace = {"re": re, "np": np, "torch": torch}
    exec(compile("\n\n".join(chunks), "vs2_inference.py", "exec"), namespace)  # noqa: S102 - the peer's code, on purpose
    return {name: namespace[name] for name in FUNCTIONS}


def run_case(case: dict, tokenizer, functions: dict) -> dict:
    import torch

    ids = tokenizer.encode(case["reply"], add_special_tokens=False)
    vocab = len(tokenizer)
    generator = torch.Generator().manual_seed(0)
    raw = []
    offset = 0
    scripted = {int(k): v for k, v in case["logits"].items()}
    for token_id in ids:
        text = tokenizer.decode([token_id])
        logits = torch.randn(vocab, generator=generator, dtype=torch.float32)
        logits[token_id] = 8.0
        end = offset + len(text)
        for at, table in scripted.items():
            if offset <= at < end:  # the token that holds this digit
                for token, value in table.items():
                    (tid,) = tokenizer.encode(token, add_special_tokens=False)
                    logits[tid] = value
        offset = end
        raw.append(logits)
    temperature = case["temperature"]
    processed = tuple((r / temperature if temperature > 0 else r).unsqueeze(0) for r in raw)
    out = {"reference": {}, "content": []}
    for label in case["labels"]:
        index = functions["find_score_token_index_by_prompt"](label, tokenizer, ids)
        soft = functions["ll_based_soft_score_normed"](1, index, processed, tokenizer)
        out["reference"][label] = {"token_index": index, "soft": soft}
    for token_id, logits in zip(ids, raw):
        logprobs = torch.log_softmax(logits.double(), dim=-1)
        values, top_ids = torch.topk(logprobs, 20)
        text = tokenizer.decode([token_id])
        out["content"].append({
            "token": text, "bytes": list(text.encode("utf-8")), "logprob": float(logprobs[token_id]),
            "top_logprobs": [{"token": tokenizer.decode([int(t)]), "logprob": float(v)}
                             for v, t in zip(values.tolist(), top_ids.tolist())]})
    return out


def main(argv: list[str]) -> int:
    from transformers import AutoTokenizer

    source_path, tokenizer_dir, cases_path, out_path = argv
    functions = reference_functions(Path(source_path).read_text(encoding="utf-8"))
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    cases = json.loads(Path(cases_path).read_text())
    Path(out_path).write_text(json.dumps([run_case(c, tokenizer, functions) for c in cases]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
