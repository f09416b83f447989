"""A template file's TOML, validated into a `Template` (cached by content hash).

One pydantic model per template kind (`TEMPLATE_FILES`) says which keys a file of that kind
holds, their types and defaults, and what is checked across keys (the media markers of the user
text, the aspects or label the prompt must ask for, the critic's reply schema). A file is
validated once, by its kind's model; `TemplateError` lists every problem, each naming the file
and the key (`answer.positive`, `aspects[1].weight`).

Over 500 lines: a model per template kind (eight) beside the one set of error messages that name
a file's keys; a kind's model needs the shared base tables and checks defined here, so a kind
moved to a module of its own would import this one back through TEMPLATE_FILES (and the docs'
table of template keys is generated from this one module).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from ..parsers.json_schema import SchemaError, check_schema, subschema
from .template import (
    MEDIA_SLOTS,
    PROMPT_PLACEHOLDER,
    QUESTION_PLACEHOLDER,
    AnswerSet,
    Aspect,
    ComparativeVerdict,
    Template,
    TemplateError,
    marker_like,
    split_at_markers,
)


class _KeyProblem(ValueError):
    """A check across keys failed at `key`, a key of the table that ran the check."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class _FilePlace(NamedTuple):
    """Where the file lies: `<family>/<version>.toml`; its `id` and `version` must say the same."""

    family: str
    version: str


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


Text = Annotated[str, AfterValidator(_not_blank)]  # a string with more than whitespace in it
FiniteNumber = Annotated[float, Field(allow_inf_nan=False)]  # an integer or float, not nan / inf


class _Table(BaseModel):
    """A TOML table: known keys only, and TOML's own types (no coercion: "1" is not a number)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# --------------------------------------------------------------------------- the inner tables


class AnswerTable(_Table):
    """`[answer]` of a yes_no template: which answer is the good one, and the words of each."""

    positive: Literal["yes", "no"] = Field(
        description='the good answer, whose probability is the score: "yes" or "no"')
    # The defaults are the yes/no parser's; it sums every case and space variant of each word.
    yes_words: list[Text] = Field(
        default_factory=lambda: ["yes"], min_length=1,
        description="the answer words read as yes (the parser counts their case and space variants)")
    no_words: list[Text] = Field(
        default_factory=lambda: ["no"], min_length=1, description="the answer words read as no")

    @model_validator(mode="after")
    def _words_apart(self) -> AnswerTable:
        def folded(words: list[str]) -> set[str]:
            return {w.strip().casefold() for w in words}

        overlap = folded(self.yes_words) & folded(self.no_words)
        if overlap:
            raise ValueError(f"yes_words and no_words overlap: {sorted(overlap)}")
        return self


class ScaleTable(_Table):
    """`[scale]` of a rubric or final_score template: the range of the scores the reply gives."""

    min: FiniteNumber = Field(description="the lowest score the prompt asks for")
    max: FiniteNumber = Field(description="the highest score the prompt asks for")

    @model_validator(mode="after")
    def _ordered(self) -> ScaleTable:
        if self.min >= self.max:
            raise ValueError(f"min {self.min} must be below max {self.max}")
        return self


class AspectTable(_Table):
    """One `[[aspects]]` entry of a rubric template."""

    name: Text = Field(description="the aspect's name, as the user text asks for it")
    weight: FiniteNumber = Field(1.0, ge=0, description="its weight in the mean of the aspects")
    na_allowed: bool = Field(False, description="whether the reply may rate it N/A")


class AxisTable(_Table):
    """One `[[axes]]` entry of a multi_axis template."""

    name: Text = Field(description="the axis's name (its key in details and in aggregation profiles)")
    label: Text = Field(description="the text before the axis's number in the reply, as the user text asks "
                        "for it (`Alignment Score (1-5)`)")
    weight: FiniteNumber = Field(1.0, ge=0, description="its weight in the mean of the axes")
    na_allowed: bool = Field(False, description="whether the reply may rate it N/A")


class ProbeTable(_Table):
    """One `[[probes]]` entry of a checklist template."""

    name: Text = Field(description="the probe's name (its key in details and in aggregation profiles)")
    question: Text = Field(description="the yes/no question, put at {question}; it may hold {prompt}")
    weight: FiniteNumber = Field(1.0, ge=0, description="its weight in the weighted mean of the probes")
    positive: Literal["yes", "no"] | None = Field(
        None, description="the good answer of this probe (default: the template's answer.positive)")


class AnswerSetTable(_Table):
    """One `[[answer_sets]]` entry of an answer_probability template."""

    name: Text = Field(description="the set's name, reported with each atom")
    words: list[Text] = Field(min_length=1, description="the answers a question of this set admits")
    question_prefix: Text | None = Field(
        None, description="the questions this set reads: those starting with it (unset: every other question)")
    numerals: bool = Field(False, description="a number word and its digits are one answer (four, 4)")


# --------------------------------------------------------------------------- the template kinds


class TemplateFile(_Table):
    """The keys of every template file; each kind's model adds its own."""

    id: Text = Field(description="the family: the name of the template's folder")
    version: Text = Field(description="the version: the stem of the file's name")
    description: Text = Field(description="one line on what the template asks")
    kind: str = Field(description="the template kind: yes_no, rubric, final_score, critic, comparative, "
                      "multi_axis, answer_probability or checklist; it says which other keys the file takes")
    system: Text | None = Field(None, description="the system message (no media, no {prompt})")
    user: Text = Field(
        description="the user message: text with {prompt} and media markers "
        + ", ".join(f"<{slot}>" for slot in MEDIA_SLOTS))
    source: Text | None = Field(None, description="where the wording comes from")

    @field_validator("id", "version")
    @classmethod
    def _named_as_the_file(cls, value: str, info: ValidationInfo) -> str:
        if isinstance(place := info.context, _FilePlace):
            expected, what = ((place.family, "the folder name") if info.field_name == "id"
                              else (place.version, "the file name's stem"))
            if value != expected:
                raise ValueError(f"{value!r} must equal {what} {expected!r}")
        return value

    @field_validator("system")
    @classmethod
    def _system_is_text_only(cls, value: str) -> str:
        markers = marker_like(value)
        if markers:
            raise ValueError(f"media markers belong in 'user', found {markers[0]!r}")
        if PROMPT_PLACEHOLDER in value:
            raise ValueError(f"{PROMPT_PLACEHOLDER} is only substituted in 'user'")
        return value

    @field_validator("user")
    @classmethod
    def _user_shows_the_sample(cls, value: str) -> str:
        unknown = [marker for marker in marker_like(value) if marker[1:-1] not in MEDIA_SLOTS]
        if unknown:
            raise ValueError(f"unknown media marker {unknown[0]!r}; "
                             f"known: {', '.join(f'<{s}>' for s in MEDIA_SLOTS)}")
        if not any(is_media for is_media, _ in split_at_markers(value)):
            raise ValueError("has no media marker: a judge template must show the sample")
        return value

    def template(self, path: Path, sha256: str) -> Template:
        """The loaded template of this file, which lies at `path` and hashes to `sha256`."""
        raise NotImplementedError  # each kind's model builds its own

    def _template(self, path: Path, sha256: str, **kind_fields: Any) -> Template:
        return Template(id=self.id, version=self.version, sha256=sha256, kind=self.kind,
                        description=self.description, system=self.system, user=self.user,
                        source=self.source, path=path, **kind_fields)


class YesNoFile(TemplateFile):
    """A yes_no template: one question, read from the logprobs of the reply's first token."""

    answer: AnswerTable = Field(
        description='the [answer] table: positive = "yes" | "no", optionally yes_words, no_words')
    verbatim: bool = Field(
        False, description="a peer's prompt copied byte for byte: it may ask several questions")

    @model_validator(mode="after")
    def _one_question(self) -> YesNoFile:
        # The judge reads the first answer token, so the question must be unambiguous; a peer's
        # prompt copied byte for byte (to reproduce its numbers) keeps its wording.
        text = "".join(value for is_media, value in split_at_markers(self.user) if not is_media)
        if not text.strip():
            raise _KeyProblem("user", "a yes_no template needs a question in the user text")
        if self.verbatim and self.source is None:
            raise _KeyProblem("verbatim", "a verbatim template must name its `source`")
        if not self.verbatim and text.count("?") != 1:
            raise _KeyProblem(
                "user", f"a yes_no template must ask exactly one question, found {text.count('?')} "
                "'?' (a peer's prompt reproduced byte for byte may set verbatim = true)")
        return self

    def template(self, path: Path, sha256: str) -> Template:
        return self._template(path, sha256, positive=self.answer.positive,
                              yes_words=tuple(self.answer.yes_words),
                              no_words=tuple(self.answer.no_words))


class _GenerativeFile(TemplateFile):
    """A template whose reply is generated text: the request's defaults (a judge's options win)."""

    stop: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list, description="stop sequences of the request")
    max_tokens: int | None = Field(None, gt=0, description="the request's max_tokens")
    send_max_tokens: bool = Field(
        True, description="false: the request carries no max_tokens unless the judge's options set one "
        "(the server's own limit), as a peer that sends none")
    temperature: FiniteNumber | None = Field(
        None, ge=0, le=2, description="the request's sampling temperature, in [0, 2]")

    @model_validator(mode="after")
    def _one_limit(self) -> "_GenerativeFile":
        if not self.send_max_tokens and self.max_tokens is not None:
            raise ValueError("max_tokens with send_max_tokens = false: keep one")
        return self

    def _template(self, path: Path, sha256: str, **kind_fields: Any) -> Template:
        return super()._template(path, sha256, stop=tuple(self.stop), max_tokens=self.max_tokens,
                                 send_max_tokens=self.send_max_tokens, temperature=self.temperature, **kind_fields)


class _ScoredFile(_GenerativeFile):
    """A template whose reply gives scores on a scale."""

    scale: ScaleTable = Field(description="the [scale] table: min and max of the scores asked for")

    def _template(self, path: Path, sha256: str, **kind_fields: Any) -> Template:
        return super()._template(path, sha256, scale=(self.scale.min, self.scale.max),
                                 **kind_fields)


class RubricFile(_ScoredFile):
    """A rubric template: the reply scores each aspect on the scale; the reward is their mean."""

    aspects: list[AspectTable] = Field(
        min_length=1, description="at least one [[aspects]] entry: name, weight, na_allowed")
    missing_policy: Literal["invalid", "skip"] | None = Field(
        None, description="an aspect absent from the reply: the score is invalid, or it is "
        "left out of the mean")

    @model_validator(mode="after")
    def _aspects_asked(self) -> RubricFile:
        names = [aspect.name for aspect in self.aspects]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise _KeyProblem("aspects", f"duplicate aspect names {duplicates}")
        if not any(aspect.weight > 0 for aspect in self.aspects):
            raise _KeyProblem("aspects", "at least one aspect needs a weight above 0")
        for name in names:
            # The parser finds aspects by name; a name the prompt never asks for is a typo.
            if name not in self.user:
                raise _KeyProblem("aspects", f"aspect {name!r} does not appear in the user text")
        return self

    def template(self, path: Path, sha256: str) -> Template:
        aspects = tuple(Aspect(a.name, a.weight, a.na_allowed) for a in self.aspects)
        return self._template(path, sha256, aspects=aspects, missing_policy=self.missing_policy)


class FinalScoreFile(_ScoredFile):
    """A final_score template: the reply ends in `<label>: <score>` on the scale."""

    label: Text = Field(description="the label the score follows, as the user text asks for it")

    @model_validator(mode="after")
    def _label_asked(self) -> FinalScoreFile:
        if self.label not in self.user:
            raise _KeyProblem("label", f"{self.label!r} does not appear in the user text")
        return self

    def template(self, path: Path, sha256: str) -> Template:
        return self._template(path, sha256, label=self.label)


class CriticFile(_GenerativeFile):
    """A critic template: the reply is one JSON object, held to `json_schema` (vLLM's structured
    outputs enforce it, and the reply is checked against it), with a list of violations."""

    json_schema: Text = Field(
        description="the reply's JSON schema, as JSON text: an object, in the subset this "
        "gateway checks")
    violations_field: Text = Field(
        description="the dotted path of the reply's list of {label, t_s} violations")

    @field_validator("json_schema")
    @classmethod
    def _a_schema_of_an_object(cls, value: str) -> str:
        try:
            schema = json.loads(value)
            check_schema(schema)
        except (json.JSONDecodeError, SchemaError) as exc:
            raise ValueError(str(exc)) from None
        if schema.get("type") != "object":
            raise ValueError("the reply must be a JSON object (type = object)")
        return value

    @model_validator(mode="after")
    def _violations_are_listed(self) -> CriticFile:
        path = self.violations_field
        node = subschema(self.reply_schema(), path)
        item = node.get("items") if node is not None and node.get("type") == "array" else None
        props = (item or {}).get("properties") or {}
        needed = {"label", "t_s"}
        if item is None or not needed <= set(props) or not needed <= set(item.get("required", [])):
            raise _KeyProblem("violations_field", f"{path!r} must be an array of objects with "
                              "required 'label' (string) and 't_s' (seconds) fields")
        if props["label"].get("type") != "string" or "number" not in _schema_types(props["t_s"]):
            raise _KeyProblem("violations_field",
                              "'label' must be a string and 't_s' a number (or null)")
        return self

    def reply_schema(self) -> dict[str, Any]:
        """The reply's JSON schema, parsed."""
        schema: dict[str, Any] = json.loads(self.json_schema)
        return schema

    def template(self, path: Path, sha256: str) -> Template:
        return self._template(path, sha256, json_schema=self.reply_schema(),
                              violations_field=self.violations_field)


class VerdictTable(_Table):
    """`[verdict]` of a comparative template: how its reply says which image is better."""

    read: Literal["answer", "logprobs"] = Field(
        description="answer: a generated reply whose answer tag names the better image; logprobs: "
        "one token, P(yes) read from its logprobs as the yes_no kind reads its answer")
    tag: Text = Field("answer", description="read = answer: the tag the verdict is written in, <tag>...</tag>")
    first: list[Text] = Field(
        default_factory=list, description="read = answer: phrases of an answer that names the first image")
    second: list[Text] = Field(
        default_factory=list, description="read = answer: phrases of an answer that names the second image")
    tie: list[Text] = Field(
        default_factory=list, description="read = answer: phrases of an answer that calls a tie (none: the "
        "template allows no tie)")
    yes_means: Literal["first", "second"] | None = Field(
        None, description="read = logprobs: which image a yes says is the better one")
    yes_words: list[Text] = Field(
        default_factory=lambda: ["yes"], min_length=1,
        description="read = logprobs: the answer words read as yes (case and space variants counted)")
    no_words: list[Text] = Field(
        default_factory=lambda: ["no"], min_length=1, description="read = logprobs: the answer words read as no")

    @model_validator(mode="after")
    def _one_way_to_read(self) -> VerdictTable:
        if self.read == "answer":
            if not self.first or not self.second:
                raise ValueError("read = 'answer' needs the phrases `first` and `second`")
            if self.yes_means is not None:
                raise ValueError("yes_means is for read = 'logprobs'")
            phrases = [*self.first, *self.second, *self.tie]
            shared = sorted({p for p in phrases if phrases.count(p) > 1})
            if shared:
                raise ValueError(f"a phrase names two verdicts: {shared}")
        else:
            if self.yes_means is None:
                raise ValueError("read = 'logprobs' needs yes_means = 'first' or 'second'")
            if self.first or self.second or self.tie:
                raise ValueError("first, second and tie are phrases of read = 'answer'")
            folded = {w.strip().casefold() for w in self.yes_words} & {w.strip().casefold() for w in self.no_words}
            if folded:
                raise ValueError(f"yes_words and no_words overlap: {sorted(folded)}")
        return self


class ComparativeFile(_GenerativeFile):
    """A comparative template: two images of one prompt (two `<image>` markers, in the order they
    are shown), optionally the condition images a group shares (an edit's source); the reply says
    which image is better. `stop`, `max_tokens` and `temperature` apply to read = answer."""

    verdict: VerdictTable = Field(
        description="the [verdict] table: read = answer (phrases first, second, tie in the answer tag) "
        "or logprobs (yes_means, yes_words, no_words)")

    @model_validator(mode="after")
    def _two_images_one_verdict(self) -> ComparativeFile:
        slots = [slot for is_media, slot in split_at_markers(self.user) if is_media]
        if slots.count("image") != 2:
            raise _KeyProblem("user", f"a comparative template shows exactly two <image> markers (the pair), "
                              f"found {slots.count('image')}")
        other = sorted(set(slots) - {"image", "condition_image"})
        if other:
            raise _KeyProblem("user", f"a comparative template compares images: no <{other[0]}> marker")
        text = "".join(value for is_media, value in split_at_markers(self.user) if not is_media)
        if self.verdict.read == "logprobs":
            for key in ("stop", "max_tokens", "send_max_tokens", "temperature"):
                if key in self.model_fields_set:
                    raise _KeyProblem(key, "a logprobs verdict is one token at temperature 0: no request defaults")
            if text.count("?") != 1:
                raise _KeyProblem("user", f"a logprobs verdict reads the answer to one question, found "
                                  f"{text.count('?')} '?'")
        else:
            said = text + (self.system or "")
            for phrase in [*self.verdict.first, *self.verdict.second, *self.verdict.tie]:
                # the reply can only be read by phrases the prompt asks for: a typo is refused here
                if phrase not in said:
                    raise _KeyProblem("verdict", f"phrase {phrase!r} does not appear in the prompt")
        return self

    def template(self, path: Path, sha256: str) -> Template:
        v = self.verdict
        verdict = ComparativeVerdict(read=v.read, tag=v.tag, first=tuple(v.first), second=tuple(v.second),
                                     tie=tuple(v.tie), yes_means=v.yes_means)
        words = {"yes_words": tuple(v.yes_words), "no_words": tuple(v.no_words)} if v.read == "logprobs" else {}
        return self._template(path, sha256, verdict=verdict, **words)


class MultiAxisFile(_ScoredFile):
    """A multi_axis template: the reply writes one `label: score` line per axis (UnifiedReward-2.0,
    VideoScore2); the reward is the weighted mean of the axes."""

    axes: list[AxisTable] = Field(min_length=1, description="at least one [[axes]] entry: name, label, "
                                  "weight, na_allowed")
    missing_policy: Literal["invalid", "skip"] | None = Field(
        None, description="an axis absent from the reply: the score is invalid, or it is left out of the mean")
    occurrence: Literal["first", "last"] = Field(
        "last", description="which of several `label:` lines of one axis counts")
    soft_score: Literal["none", "score_token"] = Field(
        "none", description="an axis's value: the number written (none), or VideoScore2's soft score, the "
        "most probable score digit at that number's token times its share of the scale's probability "
        "(score_token; the request then asks for logprobs)")

    @model_validator(mode="after")
    def _axes_asked(self) -> MultiAxisFile:
        names = [axis.name for axis in self.axes]
        labels = [axis.label.casefold() for axis in self.axes]
        if len(set(names)) != len(names) or len(set(labels)) != len(labels):
            raise _KeyProblem("axes", "axis names and labels must be unique")
        if not any(axis.weight > 0 for axis in self.axes):
            raise _KeyProblem("axes", "at least one axis needs a weight above 0")
        for axis in self.axes:
            if axis.label.casefold() not in self.user.casefold():
                raise _KeyProblem("axes", f"label {axis.label!r} does not appear in the user text")
        return self

    def template(self, path: Path, sha256: str) -> Template:
        aspects = tuple(Aspect(a.name, a.weight, a.na_allowed, label=a.label) for a in self.axes)
        return self._template(path, sha256, aspects=aspects, missing_policy=self.missing_policy,
                              occurrence=self.occurrence, soft_score=self.soft_score)


class _QuestionsFile(TemplateFile):
    """A template that asks one question per request (an atom, a probe), put at {question}."""

    @field_validator("user")
    @classmethod
    def _user_asks(cls, value: str) -> str:
        if QUESTION_PLACEHOLDER not in value:
            raise ValueError(f"needs {QUESTION_PLACEHOLDER}, where each question goes")
        return value


class AnswerProbabilityFile(_QuestionsFile):
    """An answer_probability template: one request per question (an atom: question and expected
    answer, from the request or a file); the score is the probability of the expected answer at the
    reply's first token (GenEval 2's Soft-TIFA)."""

    answer_sets: list[AnswerSetTable] = Field(
        min_length=1, description="the [[answer_sets]]: which answers each kind of question admits")
    normalize: Literal["none", "answer_set"] = Field(
        "none", description="none: the expected answer's probability as it is (GenEval 2); answer_set: "
        "divided by the probability of the question's whole answer set")
    counting: Literal["variants", "exact"] = Field(
        "variants", description="variants: every case/space variant (and numeral twin) of the answer; exact: "
        "the answer, Capitalised, each with a leading space, and its digits (GenEval 2's list)")
    mean: Literal["arithmetic", "geometric"] = Field(
        "geometric", description="the prompt score over its atoms: arithmetic (Soft-TIFA AM, atom level) or "
        "geometric (Soft-TIFA GM, prompt level)")

    @model_validator(mode="after")
    def _one_default_set(self) -> AnswerProbabilityFile:
        defaults = [s.name for s in self.answer_sets if s.question_prefix is None]
        if len(defaults) > 1:
            raise _KeyProblem("answer_sets", f"only one set may leave question_prefix unset, found {defaults}")
        return self

    def template(self, path: Path, sha256: str) -> Template:
        sets = tuple(AnswerSet(s.name, tuple(s.words), s.question_prefix, s.numerals) for s in self.answer_sets)
        return self._template(path, sha256, answer_sets=sets, normalize=self.normalize, counting=self.counting,
                              mean=self.mean)


class ChecklistFile(_QuestionsFile):
    """A checklist template: N yes/no probes on one medium, one one-token request each (the medium
    first, so vLLM computes it once for all of them); the reward is the weighted mean of P(good)."""

    answer: AnswerTable = Field(
        description='the [answer] table: positive = "yes" | "no" (a probe may set its own), yes_words, no_words')
    probes: list[ProbeTable] = Field(min_length=1, description="the [[probes]]: name, question, weight, positive")

    @model_validator(mode="after")
    def _probes_ask_one_question(self) -> ChecklistFile:
        names = [probe.name for probe in self.probes]
        if len(set(names)) != len(names):
            raise _KeyProblem("probes", f"duplicate probe names {sorted({n for n in names if names.count(n) > 1})}")
        if not any(probe.weight > 0 for probe in self.probes):
            raise _KeyProblem("probes", "at least one probe needs a weight above 0")
        outside = "".join(v for is_media, v in split_at_markers(self.user) if not is_media)
        if "?" in outside:
            raise _KeyProblem("user", "the user text around {question} asks none: the questions are the probes'")
        for probe in self.probes:
            if probe.question.count("?") != 1 or marker_like(probe.question):
                raise _KeyProblem("probes", f"probe {probe.name!r} must ask exactly one question, with no media marker")
        return self

    def template(self, path: Path, sha256: str) -> Template:
        aspects = tuple(Aspect(p.name, p.weight, question=p.question.strip(), positive=p.positive or self.answer.positive)
                        for p in self.probes)
        return self._template(path, sha256, aspects=aspects, positive=self.answer.positive,
                              yes_words=tuple(self.answer.yes_words), no_words=tuple(self.answer.no_words),
                              scale=(0.0, 1.0))


def _schema_types(schema: dict[str, Any]) -> list[str]:
    t = schema.get("type")
    return [t] if isinstance(t, str) else list(t or [])


# The model of each template kind, by the value of the file's `kind`; a VLM judge kind pins a
# template of its own kind.
TEMPLATE_FILES: dict[str, type[TemplateFile]] = {
    "yes_no": YesNoFile,
    "rubric": RubricFile,
    "final_score": FinalScoreFile,
    "critic": CriticFile,
    "comparative": ComparativeFile,
    "multi_axis": MultiAxisFile,
    "answer_probability": AnswerProbabilityFile,
    "checklist": ChecklistFile,
}
TEMPLATE_KINDS = tuple(TEMPLATE_FILES)


# --------------------------------------------------------------------------- parsing

_TEMPLATE_CACHE: dict[tuple[str, str], Template] = {}


def parse_template(path: str | Path, family: str, version: str, digest: str,
                   data: bytes) -> Template:
    """The template in `data`, the bytes of `path` (`<family>/<version>.toml`, sha256 `digest`).

    Validated by its kind's model; `TemplateError` names the file and every key at fault.
    Cached by (path, digest), so an edited file is parsed anew.
    """
    key = (str(path), digest)
    template = _TEMPLATE_CACHE.get(key)
    if template is None:
        template = read_template_file(Path(path), family, version, data).template(Path(path), digest)
        _TEMPLATE_CACHE[key] = template
    return template


def read_template_file(path: Path, family: str, version: str, data: bytes) -> TemplateFile:
    """The validated model of the bytes of `path` (`<family>/<version>.toml`: its `id` and
    `version` must say the same); `TemplateError` names the file and every key at fault."""
    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TemplateError(f"template {path} is not valid UTF-8 TOML: {exc}") from None
    kind = raw.get("kind")
    model = TEMPLATE_FILES.get(kind) if isinstance(kind, str) else None
    if model is None:
        kinds = f"one of {list(TEMPLATE_KINDS)}"
        problem = f"is required: {kinds}" if kind is None else f"must be {kinds}, got {_shown(kind)}"
        raise TemplateError(f"template {path}: field 'kind': {problem}")
    try:
        return model.model_validate(raw, context=_FilePlace(family, version))
    except ValidationError as err:
        problems = [_problem(error, model, kind) for error in err.errors()]
        raise TemplateError(f"template {path}: " + "; ".join(problems)) from None


# --------------------------------------------------------------------------- error messages

# What pydantic's error type says about a key, in the words of a TOML file.
_MUST_BE = {
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "finite_number": "must be a finite number",
    "list_type": "must be a list",
    "model_type": "must be a table",
    "too_short": "must not be empty",
    "string_too_short": "must not be empty",
    "greater_than": "must be above {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than_equal": "must be at most {le}",
    "literal_error": "must be {expected}",
}


def _problem(error: ErrorDetails, model: type[TemplateFile], kind: str) -> str:
    """`field 'KEY': what is wrong` for one validation error of a file of `model`."""
    loc = tuple(error["loc"])
    ctx = error.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, _KeyProblem):
        loc += (cause.key,)
    if error["type"] == "missing":
        field = _table_at(model, loc).model_fields[str(loc[-1])]
        message = f"is required: {field.description}"
    elif error["type"] == "extra_forbidden":
        allowed = sorted(_table_at(model, loc).model_fields)
        where = f" for kind {kind!r}" if len(loc) == 1 else ""
        message = f"unknown{where}; allowed: {allowed}"
        if len(loc) > 1 and loc[-1] in model.model_fields:
            message += (f" ({loc[-1]!r} is a top-level key: in TOML the keys below a [table] header "
                        "belong to that table, so put it above the first table)")
    elif isinstance(cause, ValueError):
        message = str(cause)
    elif error["type"] in _MUST_BE:
        message = _MUST_BE[error["type"]].format(**ctx) + f", got {_shown(error['input'])}"
    else:
        message = error["msg"]
    return f"field {_key_name(loc)!r}: {message}"


def _table_at(model: type[_Table], loc: tuple[int | str, ...]) -> type[_Table]:
    """The table model that holds the last key of `loc`, in a file of `model`."""
    for part in loc[:-1]:
        if isinstance(part, str):
            model = _tables_in(model.model_fields[part].annotation)[0]
    return model


def _tables_in(annotation: Any) -> list[type[_Table]]:
    if isinstance(annotation, type) and issubclass(annotation, _Table):
        return [annotation]
    return [table for arg in get_args(annotation) for table in _tables_in(arg)]


def _key_name(loc: tuple[int | str, ...]) -> str:
    """`aspects[1].weight` for ("aspects", 1, "weight")."""
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else f".{part}" if name else part
    return name


_TOML_TYPES = {"str": "string", "int": "integer", "bool": "boolean", "list": "array", "dict": "table"}


def _shown(value: Any) -> str:
    """A value as a message shows it: its TOML type and a short repr."""
    text = repr(value)
    text = text if len(text) <= 80 else text[:77] + "..."
    name = type(value).__name__
    return f"{_TOML_TYPES.get(name, name)} {text}"
