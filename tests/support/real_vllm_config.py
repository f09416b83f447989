"""A gateway config on the session's real vLLM server (the tiny Qwen2.5-VL serves every model
name), with the guided regexes that keep its random replies parseable; optionally fault judges
on the fake OpenAI backend (tests/support/fake_openai.py)."""

from __future__ import annotations

from tests.support.fake_openai import free_port

RUBRIC_REGEX = (
    r"# Detailed Judgement\n"
    r"1\. Text Faithfulness:\n## Justification: [a-z ]{5,30}\n## Score: [1-4]\.[0-9]\n"
    r"2\. Physical and Visual Quality:\n## Justification: [a-z ]{5,30}\n## Score: [1-4]\.[0-9]\n"
    r"3\. Text Rendering:\n## Justification: [a-z ]{5,30}\n## Score: (N/A|[1-4]\.[0-9])\n"
)
FINAL_REGEX = r"[a-z ]{5,30}\nFinal Score: ([1-4]\.[0-9]|5\.0)"


def real_config(base_url: str, fake_url: str | None = None) -> dict:
    backends = {
        "qwen_vl": {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "base_urls": [base_url], "timeout_s": 120},
        "cosmos": {"model": "nvidia/Cosmos-Reason1-7B-Reward", "base_urls": [base_url], "timeout_s": 120},
        "rr": {"model": "RationalRewards-8B-T2I", "base_urls": [base_url], "timeout_s": 120},
        "unified": {"model": "CodeGoat24/UnifiedReward-qwen-7b", "base_urls": [base_url], "timeout_s": 120},
    }
    judges = {
        "image_quality": {"kind": "yes_no", "backend": "qwen_vl", "template": "image_quality@1"},
        "alignment": {"kind": "yes_no", "backend": "qwen_vl", "template": "vqa_alignment@1"},
        "cosmos_reason1": {"kind": "yes_no", "backend": "cosmos", "template": "cosmos_reason1@1",
                           "default": False, "video": {"max_frames": 16, "max_pixels": 12544}},
        "rubric": {"kind": "rubric", "backend": "rr", "template": "rational_rewards_t2i@1", "default": False,
                   "options": {"guided_regex": RUBRIC_REGEX, "max_tokens": 200}},
        "final": {"kind": "final_score", "backend": "unified", "template": "unified_reward@1", "default": False,
                  "options": {"guided_regex": FINAL_REGEX, "max_tokens": 60}},
    }
    if fake_url:
        dead = f"http://127.0.0.1:{free_port()}/v1"
        backends |= {
            "stall": {"model": "fake-stall", "base_urls": [fake_url]},
            "garbage": {"model": "fake-rubric-garbage", "base_urls": [fake_url]},
            "noanswer": {"model": "fake-no-answer", "base_urls": [fake_url]},
            "down": {"model": "x", "base_urls": [dead], "connect_timeout_s": 1, "max_retries": 1},
        }
        judges |= {
            "stalled": {"kind": "yes_no", "backend": "stall", "template": "image_quality@1",
                        "deadline_s": 1.0, "default": False},
            "rubric_garbage": {"kind": "rubric", "backend": "garbage", "template": "rational_rewards_t2i@1",
                               "default": False},
            "no_answer": {"kind": "yes_no", "backend": "noanswer", "template": "image_quality@1", "default": False},
            "down": {"kind": "yes_no", "backend": "down", "template": "image_quality@1", "default": False},
        }
    return {"backends": backends, "judges": judges}
