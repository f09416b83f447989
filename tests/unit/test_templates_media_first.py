"""Shipped templates put their media before the question, and the image yes/no templates send no
system prompt: the requests of k judges over one image then share every token up to their
question, which vLLM's prefix cache computes once (docs/guides/vlm-performance.md)."""

from __future__ import annotations

from judge_gateway.prompts import list_templates

# The models' own formats, kept byte for byte: their text comes before the images.
OWN_FORMAT = {"rational_rewards_t2i", "rational_rewards_edit"}
# Image yes/no templates whose model's guidance sets a system prompt: Cosmos-Reason2 is asked with
# Qwen3-VL's "You are a helpful assistant." (cosmos-cookbook's video_reward.yaml); its requests
# share their prefix with every other request that sends the same system prompt.
MODEL_SYSTEM_PROMPT = {"cosmos_reason2_physics_image"}


def test_media_come_first_and_image_questions_share_their_prefix() -> None:
    checked = 0
    for t in list_templates():
        if t.id in OWN_FORMAT or not t.media_slots:
            continue
        parts = t.render("a prompt", {slot: [{"type": "marker", "slot": slot}] * t.media_slots.count(slot)
                                      for slot in set(t.media_slots)})
        first = parts[-1]["content"][0]
        assert first.get("type") == "marker", f"{t.ref}: its user turn starts with text, not its media"
        if t.kind == "yes_no" and t.media_slots == ("image",) and t.id not in MODEL_SYSTEM_PROMPT:
            assert t.system is None, f"{t.ref}: a system prompt of its own keeps its image out of the shared prefix"
        checked += 1
    assert checked >= 8
