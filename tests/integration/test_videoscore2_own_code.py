"""VideoScore2's soft scores beside its own code: TIGER-AI-Lab/VideoScore2's `vs2_inference.py` (at
commit e6abe26, from a copy outside this repository and never copied here) runs its
`find_score_token_index_by_prompt` and `ll_based_soft_score_normed` on scripted logits with a real
Qwen tokenizer (the tiny Qwen2.5-VL's, tests/support/videoscore2_own_code.py); the gateway's
videoscore2@2 judge reads the top-20 logprobs a vLLM server lists for the same logits. Per axis the
score token and the soft score agree, and the reward is their mean.

The copy is looked for under $JG_PEER_MIRRORS (default /work/.mirror, where this project's sessions
keep them): a clone `TIGER-AI-Lab+VideoScore2/repo` read at the commit, or the file itself,
`TIGER-AI-Lab+VideoScore2/vs2_inference.py`, checked against the commit's sha256. Without it the
test is skipped, and tests/unit/test_score_token.py still checks the numbers worked out by hand.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from judge_gateway.media import VideoMedia
from judge_gateway.parsers import soft_score, token_logprobs_of
from judge_gateway.schema import SampleInput
from tests.support.scripted_chat import score_scripted
from tests.support.vllm_server import vllm_python

pytestmark = pytest.mark.integration

COMMIT = "e6abe26bf694c293023cb3863bd6c657128766ac"
FILE_SHA256 = "de501317a64d4752cbc995da86dcf5be294715d138ce212bcbaf20c5167149fe"
ROOT = Path(__file__).resolve().parents[2]
LABELS = ["visual quality:", "text-to-video alignment:", "physical/common-sense consistency:"]
AXES = ["visual_quality", "text_alignment", "physical_consistency"]


def digits(*logits: float) -> dict[str, float]:
    """Logits of the scores 1-5 at a score token (all high enough to be among the top-20 listed)."""
    return {str(score): value for score, value in zip(range(1, 6), logits)}


def case(reply: str, temperature: float, tables: list[dict[str, float]], after: str = "") -> dict:
    """Each table at the first digit after the next label (as the reference finds it)."""
    logits, start = {}, reply.lower().find(after.lower()) if after else 0
    for label, table in zip(LABELS, tables):
        at = reply.lower().index(label, start) + len(label)
        digit = next(i for i in range(at, len(reply)) if reply[i].isdigit())
        logits[str(digit)] = table
    return {"reply": reply, "temperature": temperature, "labels": LABELS, "logits": logits}


PUBLISHED = "visual quality: 4; \ntext-to-video alignment: 3, \nphysical/common-sense consistency: 5\n"
CASES = [
    case(PUBLISHED, 0.7, [digits(4.0, 5.0, 6.5, 8.0, 6.0), digits(4.5, 7.0, 7.2, 5.0, 4.0),
                          digits(4.0, 4.0, 4.0, 5.0, 9.0)]),
    case(PUBLISHED, 1.0, [digits(4.0, 5.0, 6.5, 8.0, 6.0), digits(7.0, 7.0, 5.0, 4.0, 4.0),  # a tie: the lower
                          digits(4.0, 4.0, 4.0, 5.0, 9.0)]),
    # the labels first appear in reasoning: the reference reads the first digit after the first
    # occurrence, wherever it is (here "2" of "2 seconds"); so does the judge
    case("The visual quality: after 2 seconds it blurs. text-to-video alignment: in 3 ways. "
         "physical/common-sense consistency: ok.\nvisual quality: 2; text-to-video alignment: 4, "
         "physical/common-sense consistency: 3", 0.7,
         [digits(8.0, 7.5, 4.0, 4.0, 4.0), digits(4.0, 6.0, 7.5, 7.0, 4.0), digits(5.0, 6.0, 8.5, 6.0, 5.0)]),
]


def reference_source() -> str | None:
    base = Path(os.environ.get("JG_PEER_MIRRORS", "/work/.mirror")) / "TIGER-AI-Lab+VideoScore2"
    if (base / "repo").exists():
        done = subprocess.run(["git", "--git-dir", str(base / "repo"), "show", f"{COMMIT}:vs2_inference.py"],
                              capture_output=True, text=True, check=False)
        return done.stdout if done.returncode == 0 else None
    copy = base / "vs2_inference.py"
    if copy.is_file():
        text = copy.read_text(encoding="utf-8")
        assert hashlib.sha256(text.encode()).hexdigest() == FILE_SHA256, f"{copy} is not vs2_inference.py at {COMMIT[:7]}"
        return text
    return None


def test_soft_scores_equal_videoscore2s_own_code(tiny_model_dir, tmp_path):
    source = reference_source()
    if source is None:
        pytest.skip("no copy of TIGER-AI-Lab/VideoScore2 under $JG_PEER_MIRRORS")
    (tmp_path / "vs2_inference.py").write_text(source, encoding="utf-8")
    (tmp_path / "cases.json").write_text(json.dumps(CASES))
    subprocess.run([str(vllm_python()), "-m", "tests.support.videoscore2_own_code", str(tmp_path / "vs2_inference.py"),
                    str(tiny_model_dir), str(tmp_path / "cases.json"), str(tmp_path / "out.json")],
                   cwd=ROOT, check=True, timeout=300)
    results = json.loads((tmp_path / "out.json").read_text())
    cfg = {"backends": {"vs2": {"model": "TIGER-Lab/VideoScore2", "base_urls": ["http://127.0.0.1:9/v1"]}},
           "judges": {"vs2": {"kind": "multi_axis", "backend": "vs2", "template": "videoscore2@2",
                              "options": {}}}}
    video = VideoMedia.from_array(np.zeros((8, 48, 64, 3), dtype=np.uint8), fps=8)
    for spec, result in zip(CASES, results):
        tokens = token_logprobs_of(result["content"])
        reference = [result["reference"][label] for label in LABELS]
        for label, ref in zip(LABELS, reference):
            ours = soft_score(tokens, label, (1, 5), spec["temperature"])
            assert ours.token_index == ref["token_index"] and ref["soft"] is not None
            assert ours.value == pytest.approx(ref["soft"], abs=1e-4), (label, ours, ref)
        # the judge on the same reply, as vLLM would list it (videoscore2@2 at the case's temperature)
        cfg["judges"]["vs2"]["options"] = {"temperature": spec["temperature"]}
        completion = {"choices": [{"message": {"role": "assistant", "content": spec["reply"]}, "finish_reason": "stop",
                                   "logprobs": {"content": result["content"]}}]}
        scored, calls = score_scripted(cfg, "vs2", SampleInput(prompt="a dog surfing", video=video),
                                       lambda _question, c=completion: c)
        assert scored.valid and calls[0]["logprobs"] is True
        assert [scored.details["axes"][a] for a in AXES] == pytest.approx([r["soft"] for r in reference], abs=1e-4)
        assert scored.raw == pytest.approx(sum(r["soft"] for r in reference) / 3, abs=1e-4)
        print(f"\n[videoscore2] T={spec['temperature']}: reference {[r['soft'] for r in reference]}, "
              f"ours {[scored.details['axes'][a] for a in AXES]}, written {list(scored.details['written_axes'].values())}")
