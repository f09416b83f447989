"""Multi-axis replies (parsers/axes.py) and the multi_axis judge: UnifiedReward-2.0 / -Think and
VideoScore2 replies in their published formats and malformed ones, against the peers' own
parsers (tests/support/peer_judges.py) where those read a number; each axis a details entry, the
reward the aggregation over the axes, a missing axis never a 0."""

from __future__ import annotations

import pytest

from judge_gateway.config import ConfigError, validate_config
from judge_gateway.media import ImageMedia
from judge_gateway.parsers import Axis, ParseError, parse_axes
from judge_gateway.prompts import load_template
from judge_gateway.schema import SampleInput
from tests.conftest import png_bytes
from tests.support import peer_judges
from tests.support.scripted_chat import score_scripted

UR2 = [Axis("Alignment", "Alignment Score (1-5)"), Axis("Coherence", "Coherence Score (1-5)"),
       Axis("Style", "Style Score (1-5)")]
VS2 = [Axis("visual_quality", "visual quality"), Axis("text_alignment", "text-to-video alignment"),
       Axis("physical_consistency", "physical/common-sense consistency")]

# CodeGoat24/UnifiedReward @ ff6f520 inference_qwen/UnifiedReward-2.0-inference: the example outputs
# at the end of point_score_ACS_image_generation.py and point_score_APS_video_generation.py.
UR2_PUBLISHED = "Alignment Score (1-5): 2.694700002670288\nCoherence Score (1-5): 2.371500015258789\n" \
                "Style Score (1-5): 2.802500009536743"
# TIGER-AI-Lab/VideoScore2 @ e6abe26 vs2_inference.py: the format its prompt asks for.
VS2_PUBLISHED = "visual quality: 4; \ntext-to-video alignment: 3, \nphysical/common-sense consistency: 2"


@pytest.mark.parametrize("reply", [
    UR2_PUBLISHED,
    "Alignment Score (1-5): 4\nCoherence Score (1-5): 5\nStyle Score (1-5): 3\n",
    "Alignment Score (1-5): 1.5\r\nCoherence Score (1-5): 2\r\nStyle Score (1-5): 0.5",  # 0.5: theirs reads 0-5
])
def test_unified_reward_2_replies_read_as_pref_grpo_reads_them(reply):
    ours = parse_axes(reply, UR2, scale=(1, 5))
    theirs = peer_judges.unified_reward_2_axes(reply)
    for axis in UR2:
        expected = min(max(theirs[axis.name], 1.0), 5.0)  # ours clamps onto the scale and says so
        assert ours.scores[axis.name] == pytest.approx(expected)
    assert ours.clamped == ({"Style": 0.5} if "0.5" in reply else {})


def test_videoscore2_reply_reads_as_its_regex_on_one_line_or_three():
    markdown = "visual quality: **4**;\ntext-to-video alignment: 3,\nphysical/common-sense consistency: 2\n(brief: minor flicker)"
    markdown = ("visual quality: **4**;\ntext-to-video alignment: 3,\nphysical/common-sense consistency: 2\n"
                "(brief: minor flicker)")
    for reply in (VS2_PUBLISHED, VS2_PUBLISHED.replace("\n", " "), markdown):
        ours = parse_axes(reply, VS2, scale=(1, 5), occurrence="first")
        assert tuple(ours.scores.values()) == tuple(float(x) for x in peer_judges.videoscore2_axes(
            reply.replace("**", "")))


def test_markdown_na_and_repeated_labels():
    reply = "**Alignment Score (1-5):** 4\n- Coherence Score (1-5): N/A\nStyle Score (1-5): 2\nStyle Score (1-5): 3"
    axes = [UR2[0], Axis("Coherence", "Coherence Score (1-5)", na_allowed=True), UR2[2]]
    last = parse_axes(reply, axes, occurrence="last")
    assert last.scores == {"Alignment": 4.0, "Coherence": None, "Style": 3.0}
    assert last.occurrences["Style"] == 2
    assert parse_axes(reply, axes, occurrence="first").scores["Style"] == 2.0
    # N/A where the axis may not be N/A is not a number: the axis is unreadable, hence missing
    strict = parse_axes(reply, UR2)
    assert strict.missing == ["Coherence"] and strict.unreadable == {"Coherence": "N/A"}


@pytest.mark.parametrize("reply, missing, unreadable", [
    ("Alignment Score (1-5): 4\nStyle Score (1-5): 3", ["Coherence"], {}),  # an axis left out
    ("Alignment Score (1-5): X\nCoherence Score (1-5): 4\nStyle Score (1-5): 3", ["Alignment"], {"Alignment": "X"}),
    ("Alignment Score (1-5): 4/10\nCoherence Score (1-5): 4\nStyle Score (1-5): 3", ["Alignment"],
     {"Alignment": "4/10"}),  # another scale: not guessed into 1-5
    ("The alignment score is 4. Coherence Score (1-5): 4\nStyle Score (1-5): 3", ["Alignment"], {}),  # prose
])
def test_malformed_axes_are_missing_not_zero(reply, missing, unreadable):
    result = parse_axes(reply, UR2)
    assert result.missing == missing and result.unreadable == unreadable
    assert all(v is not None and v >= 1 for v in result.scores.values())


def test_a_longer_label_is_not_read_as_a_shorter_one():
    axes = [Axis("alignment", "alignment"), Axis("t2v", "text-to-video alignment")]
    result = parse_axes("text-to-video alignment: 2\nalignment: 5", axes)
    assert result.scores == {"alignment": 5.0, "t2v": 2.0}
    only_long = parse_axes("text-to-video alignment: 2", axes)
    assert only_long.missing == ["alignment"]


@pytest.mark.parametrize("reply, message", [
    ("", "no axis score found"),
    ("I cannot rate this image.", "no axis score found"),
    ("<think>Alignment Score (1-5): 5 ... still thinking", "opens <think> and never closes it"),
])
def test_a_reply_with_no_axis_is_a_parse_error(reply, message):
    with pytest.raises(ParseError, match=message):
        parse_axes(reply, UR2)


def test_scores_inside_the_reasoning_are_never_read():
    reply = ("<think>Alignment Score (1-5): 1\nCoherence Score (1-5): 1\nStyle Score (1-5): 1 (draft)</think>\n"
             "<answer>Alignment Score (1-5): 4\nCoherence Score (1-5): 5\nStyle Score (1-5): 3</answer>")
    result = parse_axes(reply, UR2)
    assert result.scores == {"Alignment": 4.0, "Coherence": 5.0, "Style": 3.0} and result.reasoning_skipped
    # a chat template that opened <think> in the prompt: everything before </think> is reasoning
    assert parse_axes(reply.removeprefix("<think>"), UR2).scores["Alignment"] == 4.0
    with pytest.raises(ParseError):  # the verdict only in the reasoning
        parse_axes(reply.split("<answer>")[0], UR2)


# --------------------------------------------------------------------------- the judge


def config(template: str, **options) -> dict:
    return {"backends": {"q": {"model": "CodeGoat24/UnifiedReward-2.0-qwen3vl-8b", "base_urls": ["http://127.0.0.1:9/v1"]}},
            "judges": {"ur": {"kind": "multi_axis", "backend": "q", "template": template, "options": options}}}


def score(cfg: dict, reply: str):
    sample = SampleInput(prompt="a red fox in the snow", image=ImageMedia.validate(png_bytes(3)))
    return score_scripted(cfg, "ur", sample, lambda _question: reply)


def test_the_judge_reports_each_axis_and_the_weighted_mean_on_the_scale():
    result, calls = score(config("unified_reward_2_pointwise@1"), UR2_PUBLISHED)
    assert result.valid and result.details["axes"] == pytest.approx(
        {"Alignment": 2.694700002670288, "Coherence": 2.371500015258789, "Style": 2.802500009536743})
    raw = (2.694700002670288 + 2.371500015258789 + 2.802500009536743) / 3
    assert result.raw == pytest.approx(raw) and result.reward == pytest.approx((raw - 1) / 4)
    request = calls[0]
    assert (request["max_tokens"], request["temperature"]) == (256, 0.0)  # the template's defaults
    content = request["messages"][0]["content"]
    assert content[0]["type"] == "image_url" and content[1]["text"].endswith("Text Caption: [a red fox in the snow]")


def test_weights_are_data_and_a_missing_axis_follows_the_policy():
    reply = "Alignment Score (1-5): 5\nStyle Score (1-5): 1"
    invalid, _ = score(config("unified_reward_2_pointwise@1"), reply)
    assert not invalid.valid and invalid.error.code == "parse_error" and "Coherence" in invalid.error.message
    assert invalid.details["axes"] == {"Alignment": 5.0, "Style": 1.0}  # what was read stays visible
    skipped, _ = score(config("unified_reward_2_pointwise@1", missing_policy="skip",
                               aspect_weights={"Alignment": 3.0, "Coherence": 1.0, "Style": 1.0}), reply)
    assert skipped.valid and skipped.raw == pytest.approx((3 * 5 + 1 * 1) / 4)
    assert skipped.details["missing"] == ["Coherence"] and skipped.details["weights"] == {"Alignment": 3.0, "Style": 1.0}


def test_unknown_axis_weights_are_refused_at_load():
    with pytest.raises(ConfigError, match="not an aspect of unified_reward_2_pointwise@1"):
        validate_config(config("unified_reward_2_pointwise@1", aspect_weights={"Beauty": 1.0}))


def test_think_template_reads_the_answer_after_the_reasoning():
    reply = ("<think>1. Alignment: the fox is there... Alignment Score (1-5): 2</think>\n<answer>Alignment Score (1-5): 4\n"
             "Coherence Score (1-5): 4\nStyle Score (1-5): 5</answer>")
    result, calls = score(config("unified_reward_think_pointwise@1"), reply)
    assert result.valid and result.details["axes"]["Alignment"] == 4.0 and result.details["reasoning_skipped"]
    assert "strictly inside <think> and </think> tags" in calls[0]["messages"][0]["content"][1]["text"]


def test_videoscore2_template_is_its_query_byte_for_byte():
    template = load_template("videoscore2@1")
    text = template.render("a dog surfing", {"video": [{"type": "video_url"}]})[0]["content"][1]["text"]
    # vs2_inference.py @ e6abe26: VS2_QUERY_TEMPLATE.substitute(t2v_prompt=...)
    assert text == (
        "\n    You are an expert for evaluating AI-generated videos from three dimensions:\n"
        "    (1) visual quality \u2013 clarity, smoothness, artifacts;\n"
        "    (2) text-to-video alignment \u2013 fidelity to the prompt;\n"
        "    (3) physical/common-sense consistency \u2013 naturalness and physics plausibility.\n\n"
        "    Video prompt: a dog surfing\n\n"
        "    Please output in this format:\n"
        "    visual quality: <v_score>; \n"
        "    text-to-video alignment: <t_score>, \n"
        "    physical/common-sense consistency: <p_score>\n    ")
    assert (template.temperature, template.max_tokens, template.occurrence) == (0.7, 1024, "first")
