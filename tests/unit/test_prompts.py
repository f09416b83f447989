"""Prompt templates: the lock, loading and validation, and rendering to OpenAI messages."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from judge_gateway import prompts
from judge_gateway.prompts import (
    Aspect,
    Template,
    TemplateError,
    list_templates,
    load_template,
    lock_new_templates,
    parse_ref,
    verify_lock,
)
from judge_gateway.prompts import lock as template_lock
from judge_gateway.prompts import registry as template_registry
from tests.support.peer_formulas import VLLM_EVALUATE_PROMPT

# CI checks out `shared/` beside the repository root.
REFERENCE_DIR = next(
    (p / "shared" / "reference" / "prompts" for p in Path(__file__).resolve().parents[2].parents
     if (p / "shared" / "reference" / "prompts").is_dir()),
    Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "prompts",
)

SHIPPED = [
    "cosmos_reason1@1",
    "cosmos_reason1@2",
    "cosmos_reason1_critic@1",
    "cosmos_reason2_physics@1",
    "cosmos_reason2_physics_image@1",
    "edit_pairwise_yes_no@1",
    "flow_factory_beautiful@1",
    "flow_factory_quality@1",
    "geneval2_soft_tifa@1",
    "image_checklist@1",
    "image_quality@1",
    "pairwise_yes_no@1",
    "rational_rewards_edit@1",
    "rational_rewards_edit@2",
    "rational_rewards_t2i@1",
    "rational_rewards_t2i@2",
    "rational_rewards_t2i@3",
    "unified_reward@1",
    "unified_reward@2",
    "unified_reward@3",
    "unified_reward_2_pointwise@1",
    "unified_reward_2_pointwise_video@1",
    "unified_reward_think@1",
    "unified_reward_think_pointwise@1",
    "video_edit@1",
    "videoscore2@1",
    "videoscore2@2",
    "visionreward_video@1",
    "vqa_alignment@1",
    "vqa_alignment@2",
]

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
SOURCE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,SRC"}}
VIDEO = {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,BBBB"}}


def reference_sections(name: str) -> tuple[str, str]:
    """The `[system]` and `[user]` text of a reference prompt file, provenance lines dropped."""
    path = REFERENCE_DIR / name
    if not path.is_file():
        pytest.skip(f"reference prompts not found at {REFERENCE_DIR}")
    lines = path.read_text(encoding="utf-8").split("\n")
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    match = re.fullmatch(r"\s*\[system\]\n(.*?)\n\[user\]\n(.*)", "\n".join(lines), re.S)
    assert match, f"{path} has no [system]/[user] sections"
    return match.group(1).rstrip("\n"), match.group(2).rstrip("\n")


@pytest.fixture
def tmp_prompts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the shipped templates and lock, with the module pointed at it."""
    root = tmp_path / "prompts"
    shutil.copytree(
        template_registry.TEMPLATES_DIR, root, ignore=shutil.ignore_patterns("__pycache__", "*.py")
    )
    monkeypatch.setattr(template_registry, "TEMPLATES_DIR", root)
    monkeypatch.setattr(template_registry, "LOCK_PATH", root / "templates.lock")
    return root


def write_template(root: Path, family: str, version: str, text: str) -> Path:
    path = root / family / f"{version}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


YES_NO = """id = "{family}"
version = "{version}"
description = "test"
kind = "yes_no"
user = "<image>Is this a cat? Answer yes or no."

[answer]
positive = "yes"
"""


def fill(text: str, family: str, version: str) -> str:
    # Plain replace: the texts hold other braces ({prompt}) that must stay.
    return text.replace("{family}", family).replace("{version}", version)


# --------------------------------------------------------------------------- lock


def test_lock_is_clean() -> None:
    assert verify_lock() == []


def test_lock_is_sorted_json_of_every_shipped_template() -> None:
    text = template_registry.LOCK_PATH.read_text(encoding="utf-8")
    lock = json.loads(text)
    assert sorted(lock) == SHIPPED
    assert list(lock) == sorted(lock)
    assert text == json.dumps(lock, indent=2) + "\n"


def test_changed_byte_is_reported_and_refused(tmp_prompts: Path) -> None:
    path = tmp_prompts / "cosmos_reason1" / "1.toml"
    data = bytearray(path.read_bytes())
    index = data.index(b"Gravity")
    data[index] = ord("g")
    path.write_bytes(bytes(data))

    problems = verify_lock()
    assert len(problems) == 1
    assert "cosmos_reason1@1" in problems[0] and "changed" in problems[0]

    with pytest.raises(TemplateError) as err:
        load_template("cosmos_reason1@1")
    message = str(err.value)
    assert str(path) in message
    lock = json.loads((tmp_prompts / "templates.lock").read_text())
    assert lock["cosmos_reason1@1"] in message
    assert template_lock._sha256(bytes(data)) in message


def test_changed_byte_is_refused_even_after_a_cached_load(tmp_prompts: Path) -> None:
    assert load_template("image_quality@1").positive == "yes"
    path = tmp_prompts / "image_quality" / "1.toml"
    path.write_bytes(path.read_bytes().replace(b"sharp", b"Sharp"))
    with pytest.raises(TemplateError, match="changed"):
        load_template("image_quality@1")


def test_unlocked_file_is_reported_and_locking_adds_only_it(tmp_prompts: Path) -> None:
    write_template(tmp_prompts, "image_quality", "2", fill(YES_NO, "image_quality", "2"))
    problems = verify_lock()
    assert len(problems) == 1 and "unlocked" in problems[0] and "image_quality@2" in problems[0]
    # A draft still loads, so a new version can be tried before it is released.
    assert load_template("image_quality@2").version == "2"

    before = json.loads((tmp_prompts / "templates.lock").read_text())
    assert lock_new_templates() == ["image_quality@2"]
    after = json.loads((tmp_prompts / "templates.lock").read_text())
    assert {k: v for k, v in after.items() if k != "image_quality@2"} == before
    assert verify_lock() == []
    assert lock_new_templates() == []


def test_lock_new_templates_never_rewrites_a_changed_entry(tmp_prompts: Path) -> None:
    path = tmp_prompts / "vqa_alignment" / "1.toml"
    path.write_bytes(path.read_bytes() + b"\n")
    before = (tmp_prompts / "templates.lock").read_bytes()
    assert lock_new_templates() == []
    assert (tmp_prompts / "templates.lock").read_bytes() == before
    assert any("vqa_alignment@1" in p and "changed" in p for p in verify_lock())


def test_lock_new_templates_refuses_an_invalid_template(tmp_prompts: Path) -> None:
    write_template(tmp_prompts, "broken", "1", 'id = "broken"\nversion = "1"\n')
    with pytest.raises(TemplateError, match="broken"):
        lock_new_templates()
    assert "broken@1" not in json.loads((tmp_prompts / "templates.lock").read_text())


def test_dangling_entry_and_bad_file_name_are_reported(tmp_prompts: Path) -> None:
    shutil.rmtree(tmp_prompts / "unified_reward")
    write_template(tmp_prompts, "image_quality", "v2", fill(YES_NO, "image_quality", "v2"))
    problems = verify_lock()
    assert any("dangling" in p and "unified_reward@1" in p for p in problems)
    assert any("v2.toml" in p and "not named" in p for p in problems)


# --------------------------------------------------------------------------- refs and loading


def test_list_templates_loads_every_shipped_template_sorted() -> None:
    templates = list_templates()
    assert [t.ref for t in templates] == SHIPPED
    for template in templates:
        assert isinstance(template, Template)
        assert template.sha256 == json.loads(template_registry.LOCK_PATH.read_text())[template.ref]
        assert template.path.name == f"{template.version}.toml"


def test_list_sorts_versions_numerically(tmp_prompts: Path) -> None:
    for version in ("2", "10"):
        write_template(
            tmp_prompts, "image_quality", version, fill(YES_NO, "image_quality", version)
        )
    refs = [t.ref for t in list_templates() if t.id == "image_quality"]
    assert refs == ["image_quality@1", "image_quality@2", "image_quality@10"]


def test_load_is_cached() -> None:
    assert load_template("cosmos_reason1@1") is load_template("cosmos_reason1@1")


@pytest.mark.parametrize("ref", ["cosmos_reason1", "cosmos_reason1@", "cosmos_reason1@latest"])
def test_unpinned_ref_lists_available_versions(ref: str) -> None:
    with pytest.raises(TemplateError, match=r"available versions: cosmos_reason1@1"):
        load_template(ref)


def test_unknown_version_lists_available_versions() -> None:
    with pytest.raises(
        TemplateError, match=r"unknown template version.*available versions: cosmos_reason1@1"
    ):
        load_template("cosmos_reason1@99")


def test_unknown_family_lists_templates() -> None:
    with pytest.raises(TemplateError, match=r"unknown template family.*cosmos_reason1@1"):
        load_template("nope@1")


def test_parse_ref() -> None:
    assert parse_ref("rational_rewards_t2i@1") == ("rational_rewards_t2i", "1")
    for bad in ("", "@1", "../x@1", "Cosmos@1", 3):
        with pytest.raises(TemplateError):
            parse_ref(bad)  # type: ignore[arg-type]


def test_cosmos_reason1_uses_the_training_prompt_and_no_caption() -> None:
    system, user = reference_sections("cosmos_reason1_reward.txt")
    template = load_template("cosmos_reason1@1")
    assert template.kind == "yes_no"
    assert template.positive == "no"  # "Yes" means anomalies
    assert template.system == system
    assert template.media_slots == ("video",)
    assert "{prompt}" not in template.user

    messages = template.render("a red ball rolls", {"video": [VIDEO]})
    assert messages == [
        {"role": "system", "content": system},
        {"role": "user", "content": [VIDEO, {"type": "text", "text": user}]},
    ]
    assert "a red ball" not in json.dumps(messages)


@pytest.mark.parametrize(
    ("ref", "reference", "slots"),
    [
        ("rational_rewards_t2i@1", "rationalrewards_t2i.txt", ("image",)),
        ("rational_rewards_edit@1", "rationalrewards_edit.txt", ("condition_image", "image")),
    ],
)
def test_rational_rewards_match_the_reference(
    ref: str, reference: str, slots: tuple[str, ...]
) -> None:
    system, user = reference_sections(reference)
    template = load_template(ref)
    assert template.system == system
    mapped = user.replace("<image>", "<condition_image>", 1) if len(slots) == 2 else user
    assert template.user == mapped
    assert template.media_slots == slots
    assert template.kind == "rubric"
    assert template.scale == (1.0, 4.0)
    assert template.stop == ("# Summary",)
    assert template.max_tokens == 2048
    names = [a.name for a in template.aspects]
    expected = ["Text Faithfulness", "Physical and Visual Quality", "Text Rendering"]
    if len(slots) == 2:
        expected.insert(1, "Image Faithfulness")
    assert names == expected
    assert [a.name for a in template.aspects if a.na_allowed] == ["Text Rendering"]
    assert all(a.weight == 1.0 for a in template.aspects)


def test_edit_renders_source_image_before_edited_image() -> None:
    template = load_template("rational_rewards_edit@1")
    messages = template.render("make the sky red", {"image": [IMAGE], "condition_image": [SOURCE]})
    content = messages[1]["content"]
    media = [part for part in content if part["type"] != "text"]
    assert media == [SOURCE, IMAGE]
    assert content[0] == {
        "type": "text",
        "text": (
            "User Instruction: make the sky red\nYou are provided with two images:\n"
            "1. Source Image "
        ),
    }
    assert content[1] == SOURCE
    assert content[2] == {"type": "text", "text": "\n2. Edited Image "}
    assert content[3] == IMAGE
    assert content[4]["text"].startswith("\n\nGive your analysis")


def test_yes_no_and_final_score_templates() -> None:
    quality = load_template("image_quality@1")
    assert (quality.kind, quality.positive, quality.system) == ("yes_no", "yes", None)
    assert (quality.yes_words, quality.no_words) == (("yes",), ("no",))
    vqa = load_template("vqa_alignment@1")
    messages = vqa.render("a cat", {"image": [IMAGE]})
    assert messages == [
        {
            "role": "user",
            "content": [
                IMAGE,
                {"type": "text", "text": 'Does this figure show "a cat"? Please answer yes or no.'},
            ],
        }
    ]
    unified = load_template("unified_reward@1")
    assert (unified.kind, unified.scale, unified.label) == (
        "final_score",
        (1.0, 5.0),
        "Final Score",
    )
    assert unified.media_slots == ("image",)
    assert unified.render_text("a cat").rstrip().endswith("Final Score: <a number from 1 to 5>")


# --------------------------------------------------------------------------- rendering


def test_prompt_cannot_inject_media_or_recurse() -> None:
    template = load_template("rational_rewards_t2i@1")
    prompt = "a sign saying <image> and <video> and <condition_image> {prompt} {}"
    messages = template.render(prompt, {"image": [IMAGE]})
    content = messages[1]["content"]
    assert [part["type"] for part in content] == ["text", "image_url", "text"]
    assert (
        content[0]["text"]
        == f"User Instruction: {prompt}\nYou are provided with one image:\n1. Generated Image "
    )
    assert content[1] == IMAGE
    # The template's own braces and brackets survive (no str.format).
    assert "[ float score or N/A ]" in content[2]["text"]

    text = template.render_text(prompt)
    assert text.count("[image]") == 1
    assert prompt in text


def test_missing_media_part_names_the_slot() -> None:
    template = load_template("rational_rewards_edit@1")
    with pytest.raises(TemplateError, match="condition_image"):
        template.render("x", {"image": [IMAGE]})
    with pytest.raises(TemplateError, match="'video'"):
        load_template("cosmos_reason1@1").render("x", {})


def test_unused_or_unknown_media_is_refused() -> None:
    template = load_template("rational_rewards_t2i@1")
    with pytest.raises(TemplateError, match="unused"):
        template.render("x", {"image": [IMAGE, IMAGE]})
    with pytest.raises(TemplateError, match="unknown slot"):
        template.render("x", {"image": [IMAGE], "condition_image": [SOURCE]})
    with pytest.raises(TemplateError, match="content part"):
        template.render("x", {"image": ["data:..."]})  # type: ignore[list-item]
    with pytest.raises(TemplateError, match="text part"):
        template.render("x", {"image": [{"type": "text", "text": "hi"}]})


def test_render_does_not_alias_caller_parts() -> None:
    part = dict(IMAGE)
    content = load_template("image_quality@1").render("x", {"image": [part]})[0]["content"]
    assert content[0] == part and content[0] is not part


@pytest.mark.parametrize("ref", SHIPPED)
def test_render_output_is_valid_openai_messages(ref: str) -> None:
    template = load_template(ref)
    parts = {"image": IMAGE, "video": VIDEO, "condition_image": SOURCE, "condition_video": VIDEO}
    media: dict[str, list[dict]] = {}
    for slot in template.media_slots:
        media.setdefault(slot, []).append(parts[slot])
    messages = template.render("a dog on a skateboard", media)

    roles = [m["role"] for m in messages]
    assert roles == (["system", "user"] if template.system is not None else ["user"])
    for message in messages:
        assert set(message) == {"role", "content"}
    if template.system is not None:
        assert isinstance(messages[0]["content"], str) and messages[0]["content"]
    content = messages[-1]["content"]
    assert isinstance(content, list) and content
    previous = None
    for part in content:
        assert part["type"] in {"text", "image_url", "video_url"}
        if part["type"] == "text":
            assert set(part) == {"type", "text"} and part["text"]
            assert previous != "text"  # adjacent text is merged
        else:
            assert set(part) == {"type", part["type"]} and "url" in part[part["type"]]
        previous = part["type"]
    assert sum(part["type"] != "text" for part in content) == len(template.media_slots)
    json.dumps(messages)  # serialisable as a request body


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('extra = "x"\n' + YES_NO, "extra"),
        (YES_NO + 'extra = "x"\n', "answer.extra"),
        (YES_NO.replace('id = "{family}"', 'id = "other"'), "id"),
        (YES_NO.replace('version = "{version}"', 'version = "2"'), "version"),
        (YES_NO.replace('version = "{version}"', "version = 1"), "version"),
        (YES_NO.replace('kind = "yes_no"', 'kind = "score"'), "kind"),
        (YES_NO.replace('positive = "yes"', 'positive = "maybe"'), "answer.positive"),
        (
            YES_NO.replace('positive = "yes"', 'positive = "yes"\nyes_words = ["yes", "No"]'),
            "answer",
        ),
        (YES_NO.replace('[answer]\npositive = "yes"\n', ""), "answer"),
        (YES_NO.replace("<image>", "<img>"), "user"),
        (YES_NO.replace("<image>", ""), "user"),
        (YES_NO.replace("Is this a cat?", "Is this a cat? Or a dog?"), "user"),
        (YES_NO.replace("user = ", 'system = "<image> hi"\nuser = '), "system"),
        (YES_NO.replace("user = ", 'system = "about {prompt}"\nuser = '), "system"),
        (YES_NO.replace('kind = "yes_no"', 'kind = "yes_no"\nmax_tokens = 5'), "max_tokens"),
    ],
)
def test_invalid_yes_no_templates_name_file_and_field(
    tmp_prompts: Path, text: str, field: str
) -> None:
    path = write_template(tmp_prompts, "draft", "1", fill(text, "draft", "1"))
    with pytest.raises(TemplateError) as err:
        load_template("draft@1")
    assert str(path) in str(err.value)
    assert f"field {field!r}" in str(err.value)


RUBRIC = """id = "draft"
version = "1"
description = "test"
kind = "rubric"
user = "<image>Rate {prompt}. Sharpness: 1-4. Color: 1-4."
stop = ["# Summary"]
max_tokens = 100

[scale]
min = 1
max = 4

[[aspects]]
name = "Sharpness"

[[aspects]]
name = "Color"
weight = 0.5
na_allowed = true
"""


def test_valid_rubric_with_default_weight(tmp_prompts: Path) -> None:
    write_template(tmp_prompts, "draft", "1", RUBRIC)
    template = load_template("draft@1")
    assert template.aspects == (Aspect("Sharpness", 1.0, False), Aspect("Color", 0.5, True))


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("[scale]\nmin = 1\nmax = 4\n", "", "scale"),
        ("max = 4", "max = 1", "scale"),
        ("weight = 0.5", "weight = -1", "aspects[1].weight"),
        ("na_allowed = true", 'na_allowed = "yes"', "aspects[1].na_allowed"),
        ("na_allowed = true", "na_allowed = true\nscale = 3", "aspects[1].scale"),
        ('name = "Color"', 'name = "Sharpness"', "aspects"),
        ('name = "Color"', 'name = "Contrast"', "aspects"),
        ("max_tokens = 100", "max_tokens = 0", "max_tokens"),
        ('stop = ["# Summary"]', 'stop = "# Summary"', "stop"),
        ('stop = ["# Summary"]', 'label = "Score"', "label"),
    ],
)
def test_invalid_rubric_templates(tmp_prompts: Path, old: str, new: str, field: str) -> None:
    text = RUBRIC.replace(old, new)
    assert text != RUBRIC
    write_template(tmp_prompts, "draft", "1", text)
    with pytest.raises(TemplateError, match=re.escape(f"field {field!r}")):
        load_template("draft@1")


def test_rubric_needs_aspects(tmp_prompts: Path) -> None:
    write_template(tmp_prompts, "draft", "1", RUBRIC.split("\n[[aspects]]")[0])
    with pytest.raises(TemplateError, match="field 'aspects'.*at least one"):
        load_template("draft@1")


def test_final_score_needs_its_label_in_the_prompt(tmp_prompts: Path) -> None:
    text = (template_registry.TEMPLATES_DIR / "unified_reward" / "1.toml").read_text()
    text = text.replace('id = "unified_reward"', 'id = "draft"').replace(
        'label = "Final Score"', 'label = "Verdict"'
    )
    write_template(tmp_prompts, "draft", "1", text)
    with pytest.raises(TemplateError, match="field 'label'"):
        load_template("draft@1")


def test_show_template_is_file_text_plus_hash() -> None:
    template = load_template("image_quality@1")
    shown = prompts.show_template("image_quality@1")
    assert shown.startswith(template.path.read_text(encoding="utf-8"))
    assert shown.endswith(f"# sha256: {template.sha256}\n")


# --------------------------------------------------------------------------- Flow-Factory, condition video

# Flow-Factory vllm_evaluate.py, VLMEvaluateRewardModel.EVALUATE_PROMPT.
FF_EVALUATE_PROMPT = VLLM_EVALUATE_PROMPT


@pytest.mark.parametrize("ref, text", [("flow_factory_quality@1", FF_EVALUATE_PROMPT),
                                       ("flow_factory_beautiful@1", "Is it a beautiful image?")])
def test_flow_factory_templates_send_vllm_evaluate_message(ref: str, text: str) -> None:
    # One user turn, the image then the question, no system prompt, the caption not sent.
    template = load_template(ref)
    assert template.render("a caption that must not appear", {"image": [IMAGE]}) == [
        {"role": "user", "content": [IMAGE, {"type": "text", "text": text}]}
    ]
    assert (template.positive, template.yes_words, template.no_words) == ("yes", ("Yes",), ("No",))


def test_flow_factory_quality_matches_the_reference_file() -> None:
    path = REFERENCE_DIR / "flow_factory_vllm_evaluate.txt"
    if not path.is_file():
        pytest.skip(f"reference prompts not found at {REFERENCE_DIR}")
    body = path.read_text(encoding="utf-8").split("---- prompt text below this line ----\n", 1)[1]
    assert body.rstrip("\n") == FF_EVALUATE_PROMPT


def test_several_questions_need_verbatim_and_a_source(tmp_prompts: Path) -> None:
    two = YES_NO.replace("Is this a cat?", "Is this a cat? Is it sharp?")
    write_template(tmp_prompts, "two_q", "1", fill(two, "two_q", "1"))
    with pytest.raises(TemplateError, match="exactly one question"):
        load_template("two_q@1")
    write_template(tmp_prompts, "two_q", "2", fill(two.replace('kind = "yes_no"', 'kind = "yes_no"\nverbatim = true'),
                                                  "two_q", "2"))
    with pytest.raises(TemplateError, match="must name its `source`"):
        load_template("two_q@2")
    write_template(tmp_prompts, "two_q", "3", fill(two.replace('kind = "yes_no"', 'kind = "yes_no"\nverbatim = true\n'
                                                                'source = "a peer"'), "two_q", "3"))
    assert load_template("two_q@3").user.count("?") == 2


def test_condition_video_slot_renders_source_then_result() -> None:
    template = load_template("video_edit@1")
    assert template.media_slots == ("condition_video", "video")
    source = {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,SRC"}}
    content = template.render("make it snow", {"condition_video": [source], "video": [VIDEO]})[0]["content"]
    assert content[0] == source and content[2] == VIDEO
    assert content[1]["text"] == "This is the source video.\n"
    assert '"make it snow"' in content[3]["text"]


# --------------------------------------------------------------------------- critic templates

CRITIC = """
id = "{family}"
version = "{version}"
description = "test critic"
kind = "critic"
user = "<video>Critique the video as JSON."
violations_field = "violations"
json_schema = '''SCHEMA'''
"""
CRITIC_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["score", "violations"],
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "violations": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["label", "t_s"],
            "properties": {"label": {"type": "string"}, "t_s": {"type": ["number", "null"]}}}},
    },
}


def critic_text(schema: dict, **fields: str) -> str:
    text = fill(CRITIC, "crit", "1").replace("SCHEMA", json.dumps(schema))
    for key, value in fields.items():
        text = re.sub(rf"^{key} = .*$", f"{key} = {value}", text, flags=re.M)
    return text


def test_a_critic_template_loads_with_its_schema(tmp_prompts: Path) -> None:
    write_template(tmp_prompts, "crit", "1", critic_text(CRITIC_SCHEMA))
    template = load_template("crit@1")
    assert template.json_schema == CRITIC_SCHEMA and template.violations_field == "violations"


@pytest.mark.parametrize("change, message", [
    (lambda s: s.update(properties={**s["properties"], "x": {"type": "string", "pattern": "a+"}}),
     "unsupported keyword"),
    (lambda s: s.pop("additionalProperties"), "additionalProperties = false"),
    (lambda s: s["properties"]["violations"]["items"]["required"].remove("t_s"), "violations_field"),
    (lambda s: s["properties"]["violations"]["items"]["properties"]["t_s"].update(type="string"),
     "'t_s' a number"),
])
def test_a_critic_schema_this_gateway_cannot_check_is_refused(tmp_prompts: Path, change, message) -> None:
    schema = json.loads(json.dumps(CRITIC_SCHEMA))
    change(schema)
    write_template(tmp_prompts, "crit", "1", critic_text(schema))
    with pytest.raises(TemplateError, match=message):
        load_template("crit@1")


def test_a_critic_violations_field_must_name_an_array(tmp_prompts: Path) -> None:
    write_template(tmp_prompts, "crit", "1", critic_text(CRITIC_SCHEMA, violations_field='"score"'))
    with pytest.raises(TemplateError, match="violations_field"):
        load_template("crit@1")
