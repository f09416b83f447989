"""RationalRewards as shipped (configs/default.toml) reproduces the model README's reference code:
its messages byte for byte, its request (temperature 0.1, max_tokens 2048, no stop) and its
aggregation (a missing aspect left out of the mean) - except that no aspect number at all is
invalid here, where the README returns 0.0."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import pytest

from judge_gateway.config import load_config
from judge_gateway.gateway import Gateway
from judge_gateway.judges import ScoreContext
from judge_gateway.media import ImageMedia, MediaCache
from judge_gateway.prompts import load_template
from judge_gateway.schema import SampleInput
from tests.conftest import png_bytes

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "A red vintage car parked beside a lake at sunset"
IMAGE_PNG = png_bytes(7)
SOURCE_PNG = png_bytes(8)


def find_reference_dir() -> Path | None:
    for parent in ROOT.parents:
        candidate = parent / "shared" / "reference" / "prompts"
        if candidate.is_dir():
            return candidate
    return None


def reference_dir() -> Path:
    found = find_reference_dir()
    if found is None:
        pytest.skip("the reference prompts (shared/reference/prompts) are not on this machine")
    return found


def reference_messages(name: str, prompt: str, images: list[str]) -> list[dict[str, Any]]:
    """The messages the RationalRewards README builds: its instruction with the prompt put in,
    split at each `<image>`, a PNG data URL per image, the text pieces around them."""
    lines = (reference_dir() / name).read_text(encoding="utf-8").split("\n")
    while lines and lines[0].startswith("#"):  # provenance lines of the reference file
        lines.pop(0)
    match = re.fullmatch(r"\s*\[system\]\n(.*?)\n\[user\]\n(.*)", "\n".join(lines), re.S)
    assert match
    system, user = match.group(1).rstrip("\n"), match.group(2).rstrip("\n")
    pieces = user.replace("{prompt}", prompt).split("<image>")
    assert len(pieces) == len(images) + 1
    content: list[dict[str, Any]] = [{"type": "text", "text": pieces[0]}]
    for data, text in zip(images, pieces[1:]):
        content.append({"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}})
        if text:
            content.append({"type": "text", "text": text})
    return [{"role": "system", "content": system}, {"role": "user", "content": content}]


T2I_MISSING_ASPECT = """# User Request Analysis
A red vintage car by a lake at sunset.
# Detailed Judgement
1. Text Faithfulness:
## Justification: Car, lake and sunset are all there.
## Score: 3.5
3. Text Rendering:
## Justification: No text was requested.
## Score: N/A
# Summary: Faithful.

# User Request Refinement:
## Refinement Comments: none
## Refined Request: A red vintage car parked beside a calm lake at golden-hour sunset
"""

EDIT_MISSING_SCORE = """# User Request Analysis
Replace the sky.
# Detailed Judgement
1. Text Faithfulness:
## Justification: The sky is a sunset now.
## Score: 3.0
2. Image Faithfulness:
## Justification: The buildings are kept, though I cannot settle on a number.
3. Physical and Visual Quality:
## Justification: Slight halo around the roofs.
## Score: 2.5
4. Text Rendering:
## Justification: No text.
## Score: N/A
# Summary: Good edit.
"""

NO_NUMBER = """# Detailed Judgement
1. Text Faithfulness:
## Justification: Hard to say.
## Score: N/A
2. Physical and Visual Quality:
## Justification: Hard to say.
## Score: N/A
3. Text Rendering:
## Justification: No text.
## Score: N/A
"""


class Recorder:
    """Stands in for the backend pool's `chat`: keeps the call, answers with a fixed reply."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.calls: list[dict[str, Any]] = []

    async def chat(self, **kwargs: Any) -> dict[str, Any]:
        # `affinity` routes the call to a replica (backends.py); the rest is the request
        self.calls.append(kwargs)
        return {"choices": [{"message": {"role": "assistant", "content": self.reply}, "finish_reason": "stop"}],
                "usage": {"completion_tokens": 900}}


async def score_with_default_config(judge_name: str, reply: str, monkeypatch: pytest.MonkeyPatch):
    gateway = Gateway(load_config(None))  # the embedded default, as `judge-gateway serve` runs it
    judge = gateway.judges[judge_name]
    recorder = Recorder(reply)
    monkeypatch.setattr(judge.pool, "chat", recorder.chat)
    sample = SampleInput(prompt=PROMPT, image=ImageMedia.validate(base64.b64encode(IMAGE_PNG).decode()),
                         condition_images=[ImageMedia.validate(base64.b64encode(SOURCE_PNG).decode())]
                         if judge_name.endswith("edit") else [])
    try:
        score = await judge.score(sample, ScoreContext(media=MediaCache(), request_id="rr-test"))
    finally:
        await gateway.aclose()
    return score, recorder.calls


@pytest.mark.parametrize(("ref", "reference", "images"), [
    ("rational_rewards_t2i@2", "rationalrewards_t2i.txt", ["IMG"]),
    ("rational_rewards_edit@2", "rationalrewards_edit.txt", ["SRC", "IMG"]),
])
def test_v2_renders_exactly_the_readme_messages(ref, reference, images):
    template = load_template(ref)
    parts = {"IMG": {"type": "image_url", "image_url": {"url": "data:image/png;base64,IMG"}},
             "SRC": {"type": "image_url", "image_url": {"url": "data:image/png;base64,SRC"}}}
    media = {"image": [parts["IMG"]]}
    if "SRC" in images:
        media["condition_image"] = [parts["SRC"]]
    assert template.render(PROMPT, media) == reference_messages(reference, PROMPT, images)
    # @1 has the same text; what @2 changes is the request and the aggregation.
    assert load_template(ref.replace("@2", "@1")).render(PROMPT, media) == template.render(PROMPT, media)
    assert (template.temperature, template.stop, template.max_tokens, template.missing_policy) == \
        (0.1, (), 2048, "skip")


async def test_shipped_t2i_request_and_missing_aspect_match_the_readme(monkeypatch):
    score, calls = await score_with_default_config("rational_rewards_t2i", T2I_MISSING_ASPECT, monkeypatch)
    assert score.template.version == "2"
    [call] = calls
    assert {k: v for k, v in call.items() if k not in ("messages", "affinity")} == {"max_tokens": 2048, "temperature": 0.1}
    image_url = call["messages"][1]["content"][1]["image_url"]["url"]
    assert image_url == "data:image/png;base64," + base64.b64encode(IMAGE_PNG).decode()  # the PNG as sent
    if find_reference_dir() is not None:
        expected = reference_messages("rationalrewards_t2i.txt", PROMPT, [base64.b64encode(IMAGE_PNG).decode()])
        assert call["messages"] == expected
    # The README: Physical and Visual Quality is missing, Text Rendering N/A -> mean of [3.5].
    assert score.valid, score.error
    assert score.raw == pytest.approx(3.5)
    assert score.reward == pytest.approx((3.5 - 1.0) / 3.0)  # 0.8333
    assert score.details["missing"] == ["Physical and Visual Quality"]
    assert score.details["missing_policy"] == "skip" and score.details["temperature"] == 0.1


async def test_shipped_edit_request_and_missing_score_line_match_the_readme(monkeypatch):
    score, calls = await score_with_default_config("rational_rewards_edit", EDIT_MISSING_SCORE, monkeypatch)
    [call] = calls
    assert {k: v for k, v in call.items() if k not in ("messages", "affinity")} == {"max_tokens": 2048, "temperature": 0.1}
    sent = [p["image_url"]["url"] for p in call["messages"][1]["content"] if p["type"] == "image_url"]
    assert sent == ["data:image/png;base64," + base64.b64encode(b).decode() for b in (SOURCE_PNG, IMAGE_PNG)]
    # The README: Image Faithfulness has no Score line (None), Text Rendering N/A -> mean(3.0, 2.5).
    assert score.valid, score.error
    assert score.raw == pytest.approx(2.75)
    assert score.reward == pytest.approx((2.75 - 1.0) / 3.0)  # 0.5833
    assert score.details["missing"] == ["Image Faithfulness"]


async def test_no_aspect_number_is_invalid_not_the_readmes_zero(monkeypatch):
    score, _ = await score_with_default_config("rational_rewards_t2i", NO_NUMBER, monkeypatch)
    assert not score.valid and score.reward is None
    assert score.error.code.value == "parse_error"
    score, _ = await score_with_default_config("rational_rewards_t2i", "I cannot judge this image.", monkeypatch)
    assert not score.valid and score.reward is None and score.error.code.value == "parse_error"


async def test_the_old_behaviour_stays_available_as_options(monkeypatch):
    """@1, or @2 with options: stop at the summary, temperature 0, a missing aspect invalid."""
    config = load_config(None)
    judge_cfg = config.judges["rational_rewards_t2i"]
    judge_cfg.options = judge_cfg.options.model_copy(
        update={"stop": ["# Summary"], "temperature": 0.0, "missing_policy": "invalid"})
    gateway = Gateway(config)
    judge = gateway.judges["rational_rewards_t2i"]
    recorder = Recorder(T2I_MISSING_ASPECT)
    monkeypatch.setattr(judge.pool, "chat", recorder.chat)
    sample = SampleInput(prompt=PROMPT, image=ImageMedia.validate(base64.b64encode(IMAGE_PNG).decode()))
    try:
        score = await judge.score(sample, ScoreContext(media=MediaCache(), request_id="rr-old"))
    finally:
        await gateway.aclose()
    assert {k: v for k, v in recorder.calls[0].items() if k not in ("messages", "affinity")} == \
        {"max_tokens": 2048, "temperature": 0.0, "stop": ["# Summary"]}
    assert not score.valid and score.error.code.value == "parse_error"
    assert "Physical and Visual Quality" in score.error.message
