"""The Qwen3-VL-era judges on the real CPU vLLM serving a tiny Qwen3-VL (the session's
`vllm_qwen3vl`): the model's chat template places the image and the video (with its per-frame
timestamps), and a judge of each new kind scores through the native API and through a Flow-Factory
profile: yes/no (Cosmos-Reason2, image and video), multi-axis (UnifiedReward-2.0 and -Think, their
reply format held by vLLM's structured outputs: a tiny random model writes no prose; VideoScore2's
soft scores from the reply's logprobs, videoscore2@2 on this Qwen3-VL: VideoScore2 itself is a
Qwen2.5-VL, what is proven here is the logprobs path), answer
probability (GenEval 2's atoms, from the request and from a file) and a 10-probe checklist."""

from __future__ import annotations

import base64
import io
import json

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.support.media_files import write_video
from tests.support.served_gateway import ServedGateway

pytestmark = pytest.mark.integration

UR2_REGEX = r"Alignment Score \(1-5\): [1-5]\nCoherence Score \(1-5\): [1-5]\nStyle Score \(1-5\): [1-5]"
VS2_REGEX = r"visual quality: [1-5]; text-to-video alignment: [1-5], physical/common-sense consistency: [1-5]"
THINK_REGEX = r"<think>[a-z ]{1,40}</think>\n<answer>" + UR2_REGEX + "</answer>"
PROMPT = "two red apples on a table"
VQA = [["How many apples are in the image?", "two"], ["Are the apples red?", "Yes"],
       ["Are there any apples in the image?", "Yes"]]


def png_b64(seed: int, size: tuple[int, int] = (96, 80)) -> str:
    arr = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def video(seed: int, n: int = 8) -> dict:
    return {"frames": [png_b64(seed * 100 + i, (64, 64)) for i in range(n)], "fps": 8}


def qwen3_config(base_url: str, atoms_file: str) -> dict:
    def backend(model: str) -> dict:
        return {"model": model, "base_urls": [base_url], "timeout_s": 300, "max_concurrency": 16}
    return {
        "backends": {"cr2": backend("nvidia/Cosmos-Reason2-8B"), "ur2": backend("CodeGoat24/UnifiedReward-2.0-qwen3vl-8b"),
                     "urt": backend("CodeGoat24/UnifiedReward-Think-qwen3vl-8b"),
                     "q3": backend("Qwen/Qwen3-VL-8B-Instruct")},
        "judges": {
            "physics_video": {"kind": "yes_no", "backend": "cr2", "template": "cosmos_reason2_physics@1",
                              "video": {"num_frames": 8}},
            "physics_image": {"kind": "yes_no", "backend": "cr2", "template": "cosmos_reason2_physics_image@1"},
            "unified_reward_2": {"kind": "multi_axis", "backend": "ur2", "template": "unified_reward_2_pointwise@1",
                                 "options": {"guided_regex": UR2_REGEX}},
            "unified_reward_think": {"kind": "multi_axis", "backend": "urt",
                                     "template": "unified_reward_think_pointwise@1",
                                     "options": {"guided_regex": THINK_REGEX, "max_tokens": 128}},
            "videoscore2": {"kind": "multi_axis", "backend": "q3", "template": "videoscore2@2",
                            "video": {"num_frames": 8}, "options": {"guided_regex": VS2_REGEX, "max_tokens": 96}},
            # the tiny model puts the number words one..four some logits below Yes / No: a low floor
            "geneval2": {"kind": "answer_probability", "backend": "q3", "template": "geneval2_soft_tifa@1",
                         "options": {"min_answer_mass": 0.02, "atoms_file": atoms_file}},
            "checklist": {"kind": "checklist", "backend": "q3", "template": "image_checklist@1"},
        },
        "flow_factory": {"profiles": {
            "physics": {"judges": {"physics_image": 1.0}},
            "axes": {"judges": {"unified_reward_2": 1.0}},
            "soft_tifa": {"judges": {"geneval2": 1.0}},
            "checklist": {"judges": {"checklist": 1.0}},
        }},
    }


@pytest.fixture(scope="module")
def served(vllm_qwen3vl, tmp_path_factory):
    atoms = tmp_path_factory.mktemp("atoms") / "geneval2_data.jsonl"
    atoms.write_text(json.dumps({"prompt": PROMPT, "atom_count": 3, "vqa_list": VQA,
                                 "skills": ["count", "attribute", "object"]}) + "\n")
    s = ServedGateway(qwen3_config(vllm_qwen3vl.base_url, str(atoms)))
    yield s
    s.stop()


async def test_the_chat_template_places_the_image_and_the_video_with_timestamps(vllm_qwen3vl, tmp_path):
    mp4 = base64.b64encode(write_video(tmp_path / "clip.mp4", frames=8, fps=8).read_bytes()).decode()
    messages = [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + png_b64(1)}},
        {"type": "video_url", "video_url": {"url": "data:video/mp4;base64," + mp4}},
        {"type": "text", "text": "Does this video adhere to the physical laws?"}]}]
    async with httpx.AsyncClient(timeout=300) as http:
        r = await http.post(vllm_qwen3vl.base_url.removesuffix("/v1") + "/tokenize",
                            json={"model": "nvidia/Cosmos-Reason2-8B", "messages": messages,
                                  "add_generation_prompt": True, "return_token_strs": True})
    assert r.status_code == 200, r.text
    text = "".join(r.json()["token_strs"]).replace("\u0120", " ").replace("\u010a", "\n")  # byte-level BPE's space, newline
    assert text.startswith("<|im_start|>user\n<|vision_start|><|image_pad|>")  # no default system turn
    assert text.count("<|vision_start|>") >= 2 and "<|video_pad|>" in text
    assert "seconds><|vision_start|><|video_pad|>" in text  # Qwen3-VL's per-frame timestamps
    assert text.endswith("physical laws?<|im_end|>\n<|im_start|>assistant\n")


async def test_every_new_kind_scores_through_the_native_api(served):
    samples = [{"prompt": PROMPT, "image": png_b64(s), "video": video(s), "metadata": {"vqa_list": VQA}}
               for s in (1, 2)]
    judges = ["physics_video", "physics_image", "unified_reward_2", "unified_reward_think", "videoscore2", "geneval2",
              "checklist"]
    async with httpx.AsyncClient(base_url=served.url, timeout=600) as http:
        r = await http.post("/v1/rewards", json={"samples": samples, "judges": judges})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    for res in results:
        scores = res["scores"]
        for name in judges:
            assert scores[name]["valid"], (name, scores[name])
            assert 0.0 <= scores[name]["reward"] <= 1.0
        video_facts = scores["physics_video"]["details"]["video"]
        assert video_facts["num_frames"] == 8
        assert scores["physics_video"]["details"]["answer_mass"] > 0.5  # the logprobs path: Yes/No in the top-20
        axes = scores["unified_reward_2"]["details"]["axes"]
        assert set(axes) == {"Alignment", "Coherence", "Style"} and all(1 <= v <= 5 for v in axes.values())
        assert scores["unified_reward_think"]["details"]["reasoning_skipped"]
        vs2 = scores["videoscore2"]["details"]  # soft scores read at each score digit's token
        assert set(vs2["written_axes"]) == set(vs2["axes"]) == set(vs2["soft_scores"]) and vs2["soft_score"] == "score_token"
        for axis, soft in vs2["soft_scores"].items():
            assert soft["token_index"] is not None and soft["digit_logprobs"] and 0 < soft["value"] <= 5
            assert vs2["axes"][axis] == soft["value"] and 1 <= vs2["written_axes"][axis] <= 5
        atoms = scores["geneval2"]["details"]["atoms"]
        assert [a["answer_set"] for a in atoms] == ["count", "yes_no", "yes_no"]
        assert all(a["valid"] and 0 < a["probability"] < 1 for a in atoms)
        assert atoms[0]["matched"]  # "two" among the top-20 (the tiny model lists one..four)
        assert scores["geneval2"]["details"]["atoms_source"] == "metadata"
        probes = scores["checklist"]["details"]["probes"]
        assert len(probes) == 10 and all(p["valid"] for p in probes.values())
    # the split between Yes and No follows the input: two different images, two different scores
    assert results[0]["scores"]["physics_image"]["reward"] != results[1]["scores"]["physics_image"]["reward"]


@pytest.mark.parametrize("profile, judge", [("physics", "physics_image"), ("axes", "unified_reward_2"),
                                            ("soft_tifa", "geneval2"), ("checklist", "checklist")])
async def test_a_flow_factory_profile_of_each_kind(served, profile, judge):
    body = {"prompt": [PROMPT, PROMPT], "image": [png_b64(3), png_b64(4)], "video": None,
            "condition_images": None, "condition_videos": None}
    async with httpx.AsyncClient(base_url=served.url, timeout=600) as http:
        r = await http.post(f"/flow-factory/{profile}/compute", json=body)
        native = await http.post("/v1/rewards", json={"samples": [{"prompt": PROMPT, "image": png_b64(3)}],
                                                      "judges": [judge]})
    assert r.status_code == 200, r.text
    rewards = r.json()["rewards"]
    assert len(rewards) == 2 and all(isinstance(x, float) and 0.0 <= x <= 1.0 for x in rewards)
    # the same judge, the same image: the same number either way (GenEval 2's atoms from the file here)
    assert rewards[0] == pytest.approx(native.json()["results"][0]["scores"][judge]["reward"], abs=1e-6)
