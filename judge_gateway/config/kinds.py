"""The one table of judge kinds: adding a kind is one row here (plus its options model and its
judge / head classes). A new VLM kind also needs its template kind, a model of its template
file in `prompts/parse.py` (`TEMPLATE_FILES`), and a parser of its replies in `parsers/`.

A row names the kind's typed options (validated at config load), where it runs (a VLM backend
through a prompt template of the same kind, or a local head worker), the media a head takes, and
the classes that score it. The classes are named as `module:Name` under `judge_gateway`, not
imported: config sits below judges/ and heads/, and a gateway without head judges never loads
the head side. `registry.build_judges` imports a configured kind's judge class; the head worker
(`heads.factory.build_head`) imports its model class; `tests/unit/test_kinds.py` checks that
every name resolves, and `tests/unit/test_import_rules.py` reads each name as an import by its caller.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Literal

from .comparative_options import ComparativeOptions
from .custom_heads import CosmosRLHandlerOptions, CustomHeadOptions, FlowFactoryModelOptions
from .head_options import (
    ClipOptions,
    GenEvalOptions,
    HeadOptions,
    HPSv2Options,
    HPSv3Options,
    ImageRewardOptions,
    OcrOptions,
    PickScoreOptions,
    VideoAlignOptions,
)
from .vlm_options import (
    AnswerProbabilityOptions,
    ChecklistOptions,
    CriticOptions,
    FinalScoreOptions,
    MultiAxisOptions,
    RubricOptions,
    VLMOptions,
    YesNoOptions,
)

# The typed options of any kind (JudgeConfig.options).
JudgeOptions = VLMOptions | HeadOptions


@dataclass(frozen=True)
class KindSpec:
    name: str
    options: type[VLMOptions | HeadOptions]
    runs_on: Literal["vlm", "head"]
    judge: str  # its Judge class, `module:Name` under judge_gateway
    # Head kinds: the media it scores and the worker's model (a `(kind, options dict)` callable).
    media: tuple[str, ...] = ()
    head_model: str | None = None
    # Head kinds: the pip extra that installs its libraries into the worker's interpreter
    # (`pip install 'judge-gateway[EXTRA]'`); None where they need their own set-up script.
    extra: str | None = None
    # Head kinds: the frames sampled uniformly from a video when the judge sets no `video` table
    # (None: the table's defaults, every frame up to max_frames).
    video_frames: int | None = None
    # A judge that scores a group of samples together (by comparing them): a caller must send a
    # group's samples in one request, never one sample per call (cli/score.py).
    scores_groups: bool = False

    @property
    def template_kind(self) -> str | None:
        """A VLM kind pins a prompt template of its own kind; heads take none."""
        return self.name if self.runs_on == "vlm" else None


def _vlm(name: str, options: type[VLMOptions], judge: str, *, scores_groups: bool = False) -> KindSpec:
    # A VLM kind's media are its template's slots (VLMJudge.media), not the kind's.
    return KindSpec(name, options, "vlm", judge, scores_groups=scores_groups)


def _head(name: str, options: type[HeadOptions], head_model: str, *, judge: str = "heads.judge:HeadJudge",
          media: tuple[str, ...] = ("image", "video"), extra: str | None = "heads",
          video_frames: int | None = None) -> KindSpec:
    return KindSpec(name, options, "head", judge, media, head_model, extra, video_frames)


_CLIP_FAMILY = "heads.models.clip:build_clip_family"

# In this order in "unknown kind" errors.
KINDS: dict[str, KindSpec] = {k.name: k for k in (
    _vlm("yes_no", YesNoOptions, "judges.yes_no:YesNoJudge"),
    _vlm("rubric", RubricOptions, "judges.generative:RubricJudge"),
    _vlm("final_score", FinalScoreOptions, "judges.generative:FinalScoreJudge"),
    _vlm("critic", CriticOptions, "judges.critic:CriticJudge"),
    # A group judged by comparing its samples (docs/judges/comparative.md).
    _vlm("comparative", ComparativeOptions, "judges.comparative:ComparativeJudge", scores_groups=True),
    _vlm("multi_axis", MultiAxisOptions, "judges.multi_axis:MultiAxisJudge"),
    _vlm("answer_probability", AnswerProbabilityOptions, "judges.answer_probability:AnswerProbabilityJudge"),
    _vlm("checklist", ChecklistOptions, "judges.checklist:ChecklistJudge"),
    _head("clip", ClipOptions, _CLIP_FAMILY),
    _head("pickscore", PickScoreOptions, _CLIP_FAMILY),
    _head("hpsv2", HPSv2Options, _CLIP_FAMILY),
    _head("hpsv3", HPSv3Options, "heads.models.hpsv3:HPSv3Head", extra=None),  # scripts/setup_hpsv3.sh
    # OCR reads ~1 image a second on a CPU: 8 frames of a video, not all of them (text on screen
    # changes slowly; `video = { max_frames = N }` reads up to N, as Flow-Factory's mean over frames).
    _head("ocr", OcrOptions, "heads.models.ocr:RapidOcrHead", judge="heads.judge:OcrJudge", extra="ocr",
          video_frames=8),
    _head("videoalign", VideoAlignOptions, "heads.videoalign.model:VideoAlignHead",
          judge="heads.videoalign.judge:VideoAlignJudge", media=("video",)),
    # GenEval's rules run on the gateway side over the detector's output.
    _head("gen_eval", GenEvalOptions, "heads.geneval.model:GenEvalDetectorHead",
          judge="heads.geneval.judge:GenEvalJudge", media=("image",), extra=None),  # scripts/setup_geneval.sh
    _head("image_reward", ImageRewardOptions, "heads.models.image_reward:ImageRewardHead",
          extra=None),  # scripts/setup_imagereward.sh
    # Classes you bring, named in the judge's options (config/custom_heads.py); the media a judge of
    # these kinds takes is its `options.media`; their libraries are the user's (no extra of ours).
    _head("custom", CustomHeadOptions, "heads.custom.model:build_custom_head",
          judge="heads.custom.judge:CustomJudge", extra=None),
    _head("flow_factory_model", FlowFactoryModelOptions, "heads.custom.flow_factory:build_flow_factory_head",
          judge="heads.custom.judge:CustomJudge", extra=None),
    _head("cosmos_rl_handler", CosmosRLHandlerOptions, "heads.custom.cosmos_rl:build_cosmos_rl_head",
          judge="heads.custom.judge:CustomJudge", extra=None),
)}

# Views of the table, by the names callers use.
VLM_KINDS: tuple[str, ...] = tuple(k for k, s in KINDS.items() if s.runs_on == "vlm")
HEAD_KINDS: tuple[str, ...] = tuple(k for k, s in KINDS.items() if s.runs_on == "head")
KIND_OPTIONS: dict[str, type[VLMOptions | HeadOptions]] = {k: s.options for k, s in KINDS.items()}
HEAD_KIND_OPTIONS: dict[str, type[HeadOptions]] = {
    k: s.options for k, s in KINDS.items() if issubclass(s.options, HeadOptions)}


def import_named(ref: str) -> Any:
    """The object a row names (`module:Name` under judge_gateway), imported now. Called by the
    floors that own those modules (registry, the head worker), never at config load."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(f"judge_gateway.{module}"), name)
