"""The one kind table (config/kinds.py): every name it gives resolves, a kind added as one row is
configurable and built, and a judge's options are its kind's typed model from config load on."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from judge_gateway import config as config_pkg
from judge_gateway import prompts
from judge_gateway.config import (
    HEAD_KIND_OPTIONS,
    HEAD_KINDS,
    KIND_OPTIONS,
    KINDS,
    VLM_KINDS,
    ClipOptions,
    ConfigError,
    CriticOptions,
    KindSpec,
    NormalizeConfig,
    PickScoreOptions,
    RubricOptions,
    YesNoOptions,
    validate_config,
)
from judge_gateway.config.kinds import import_named
from judge_gateway.judge_factory import build_judges, judge_class
from judge_gateway.judges import Judge

VLM = {"backends": {"vlm": {"model": "m", "base_urls": ["http://127.0.0.1:9/v1"]}}}


def _defines(ref: str) -> bool:
    """`module:Name` names a module of the package that defines Name (read, not imported: head
    models import torch)."""
    module, _, name = ref.partition(":")
    spec = importlib.util.find_spec(f"judge_gateway.{module}")
    if spec is None or spec.origin is None:
        return False
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    return any(isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name for n in tree.body)


def test_the_table_has_every_kind_once_with_its_views():
    assert tuple(KINDS) == ("yes_no", "rubric", "final_score", "critic", "comparative", "multi_axis",
                            "answer_probability", "checklist", "clip", "pickscore", "hpsv2",
                            "hpsv3", "ocr", "videoalign", "gen_eval", "image_reward",
                            "custom", "flow_factory_model", "cosmos_rl_handler")
    assert VLM_KINDS == ("yes_no", "rubric", "final_score", "critic", "comparative", "multi_axis",
                         "answer_probability", "checklist")
    assert set(HEAD_KINDS) == {"clip", "pickscore", "hpsv2", "hpsv3", "ocr", "videoalign", "gen_eval", "image_reward",
                               "custom", "flow_factory_model", "cosmos_rl_handler"}
    assert KIND_OPTIONS["critic"] is CriticOptions and HEAD_KIND_OPTIONS["pickscore"] is PickScoreOptions
    assert set(HEAD_KIND_OPTIONS) == set(HEAD_KINDS)
    # a VLM kind pins templates of its own kind: the template kinds are exactly the VLM kinds
    assert set(prompts.TEMPLATE_KINDS) == set(VLM_KINDS)
    assert all(KINDS[k].template_kind == k for k in VLM_KINDS)
    assert all(KINDS[k].template_kind is None and KINDS[k].media for k in HEAD_KINDS)
    assert KINDS["gen_eval"].media == ("image",) and KINDS["videoalign"].media == ("video",)
    assert KINDS["pickscore"].media == ("image", "video")
    # the classes you bring: one judge class, the media of each judge in its options
    assert {KINDS[k].judge for k in ("custom", "flow_factory_model", "cosmos_rl_handler")} == {"heads.custom.judge:CustomJudge"}


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_named_class_resolves(kind):
    spec = KINDS[kind]
    cls = import_named(spec.judge)
    assert isinstance(cls, type) and issubclass(cls, Judge)
    assert (spec.head_model is not None) == (spec.runs_on == "head")
    if spec.head_model is not None:
        assert _defines(spec.head_model), spec.head_model


def test_judges_get_their_kinds_class_and_typed_options():
    data = {**VLM, "judges": {
        "q": {"kind": "yes_no", "backend": "vlm", "template": "image_quality@1", "options": {"top_logprobs": 5}},
        "r": {"kind": "rubric", "backend": "vlm", "template": "rational_rewards_t2i@1"},
        "o": {"kind": "ocr"}, "g": {"kind": "gen_eval", "options": {"detector_checkpoint": "d.pth",
                                                               "clip_pretrained": "openai"}},
        "v": {"kind": "videoalign"}, "p": {"kind": "pickscore"}}}
    cfg = validate_config(data)
    assert isinstance(cfg.judges["q"].options, YesNoOptions) and cfg.judges["q"].options.top_logprobs == 5
    assert isinstance(cfg.judges["r"].options, RubricOptions) and cfg.judges["r"].options.na_policy == "skip"
    assert cfg.judge_options("q") is cfg.judges["q"].options  # validated once, kept
    judges = build_judges(cfg, {"vlm": SimpleNamespace(cfg=cfg.backends["vlm"])})  # type: ignore[dict-item]  # a pool stand-in: judges read its config
    assert {n: type(j).__name__ for n, j in judges.items()} == {
        "q": "YesNoJudge", "r": "RubricJudge", "o": "OcrJudge", "g": "GenEvalJudge",
        "v": "VideoAlignJudge", "p": "HeadJudge"}
    assert {n: j.kind for n, j in judges.items()} == {n: d["kind"] for n, d in data["judges"].items()}
    assert judges["q"].options is cfg.judges["q"].options
    assert (judges["g"].media, judges["v"].media, judges["p"].media) == (("image",), ("video",), ("image", "video"))
    assert judges["o"].info().kind == "ocr"


def test_pickscores_peer_scale_is_its_options_default_normalize():
    assert PickScoreOptions().default_normalize() == NormalizeConfig(kind="affine", scale=1.0 / 26.0)
    assert PickScoreOptions(peer_scale=False).default_normalize() is None
    assert ClipOptions().default_normalize() is None


def test_a_kind_is_one_row(monkeypatch):
    """A new kind: one row (here a second CLIP head) is enough for config load and the registry."""
    row = KindSpec("clip_b", ClipOptions, "head", "heads.judge:HeadJudge", ("image",),
                   "heads.models.clip:build_clip_family")
    monkeypatch.setitem(KINDS, "clip_b", row)
    cfg = validate_config({"judges": {"c": {"kind": "clip_b", "options": {"model": "m"}}}})
    assert isinstance(cfg.judges["c"].options, ClipOptions) and cfg.judges["c"].options.model == "m"
    assert judge_class(cfg.judges["c"]).__name__ == "HeadJudge"
    judge = build_judges(cfg, {})["c"]
    assert judge.kind == "clip_b" and judge.media == ("image",)
    with pytest.raises(ConfigError, match=r"judges\.c\.backend: not used by head kind 'clip_b'"):
        validate_config({**VLM, "judges": {"c": {"kind": "clip_b", "backend": "vlm"}}})


def test_load_errors_keep_their_text():
    with pytest.raises(ConfigError) as err:
        validate_config({"judges": {"x": {"kind": "psychic", "options": {"anything": 1}}}})
    assert str(err.value) == (
        "<config>: judges.x.kind: unknown kind 'psychic' (known: yes_no, rubric, final_score, critic, "
        "comparative, multi_axis, answer_probability, checklist, clip, pickscore, hpsv2, hpsv3, ocr, videoalign, "
        "gen_eval, image_reward, custom, flow_factory_model, "
        "cosmos_rl_handler)")
    with pytest.raises(ConfigError) as err:
        validate_config({"judges": {"h": {"kind": "hpsv3", "options": {"flash_attn": True, "dtype": "int8"}}}})
    assert str(err.value).startswith("<config>: judges.h.options.dtype: Input should be 'fp32', 'fp16' or 'bf16'")
    with pytest.raises(ConfigError, match=r"^<config>: judges\.q\.options\.top_logprobs: Input should be less than "
                                          r"or equal to 20$"):
        validate_config({**VLM, "judges": {"q": {"kind": "yes_no", "backend": "vlm", "template": "image_quality@1",
                                                 "options": {"top_logprobs": 50}}}})


def test_options_that_are_not_a_table_say_so_as_before():
    """Not the options model's class name ("... or instance of ClipOptions"): the TOML has tables."""
    for options in ("fast", 3, ["a"]):
        with pytest.raises(ConfigError) as err:
            validate_config({"judges": {"c": {"kind": "clip", "options": options}}})
        assert str(err.value) == "<config>: judges.c.options: Input should be a valid dictionary"


def test_the_dumped_config_has_the_options_as_written():
    """Run folders record the dumped config and compare it on resume; Ray ships it to replicas."""
    data = {**VLM, "judges": {
        "q": {"kind": "yes_no", "backend": "vlm", "template": "image_quality@1", "options": {"counting": "exact"}},
        "p": {"kind": "pickscore", "options": {"device": "cpu", "peer_scale": False}}, "c": {"kind": "clip"}}}
    cfg = validate_config(data)
    dumped = cfg.model_dump(mode="json")
    assert {n: j["options"] for n, j in dumped["judges"].items()} == {
        "q": {"counting": "exact"}, "p": {"device": "cpu", "peer_scale": False}, "c": {}}
    assert validate_config(dumped) == cfg


def test_the_package_face_names_each_section():
    from judge_gateway.config import loading, models, protocols, ray

    assert config_pkg.GatewayConfig is models.GatewayConfig and config_pkg.load_config is loading.load_config
    assert config_pkg.CosmosRLConfig is protocols.CosmosRLConfig and config_pkg.RayConfig is ray.RayConfig
    assert loading.DEFAULT_CONFIG_PATH.is_file()
