"""A gateway config whose judges each hit one fault of the fake OpenAI backend
(tests/support/fake_openai.py): no answer, no logprobs, garbage, stalls, a dead address, 400s..."""

from __future__ import annotations

from tests.support.fake_openai import free_port


def fault_config(base_url: str, **combine) -> dict:
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there

    def backend(model: str, url: str = base_url, **kw) -> dict:
        return {"model": model, "base_urls": [url], "timeout_s": 10, "max_retries": 1, **kw}

    return {
        "combine": combine or {"policy": "weighted_mean", "on_invalid": "skip"},
        "backends": {
            "yes": backend("fake-yes"),
            "noanswer": backend("fake-no-answer"),
            "nologprobs": backend("fake-no-logprobs"),
            "garbage": backend("fake-rubric-garbage"),
            "rubric": backend("fake-rubric-ok"),
            "final": backend("fake-final-4"),
            "stall": backend("fake-stall"),
            "down": backend("fake-yes", url=dead, connect_timeout_s=1),
            "flaky": backend("fake-flaky"),
            "bad": backend("fake-400"),
        },
        "judges": {
            "quality": {"kind": "yes_no", "backend": "yes", "template": "image_quality@1", "weight": 2.0},
            "no_answer": {"kind": "yes_no", "backend": "noanswer", "template": "image_quality@1"},
            "no_logprobs": {"kind": "yes_no", "backend": "nologprobs", "template": "image_quality@1"},
            "rubric_bad": {"kind": "rubric", "backend": "garbage", "template": "rational_rewards_t2i@1"},
            "rubric_ok": {"kind": "rubric", "backend": "rubric", "template": "rational_rewards_t2i@1"},
            "final": {"kind": "final_score", "backend": "final", "template": "unified_reward@1"},
            "stalled": {"kind": "yes_no", "backend": "stall", "template": "image_quality@1", "deadline_s": 0.5},
            "down": {"kind": "yes_no", "backend": "down", "template": "image_quality@1"},
            "flaky": {"kind": "yes_no", "backend": "flaky", "template": "image_quality@1"},
            "refused": {"kind": "yes_no", "backend": "bad", "template": "image_quality@1"},
        },
    }
