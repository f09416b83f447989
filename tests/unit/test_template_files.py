"""Template files against their kind's model (prompts/parse.py): each mistake a template's author
can make is refused with a message that names the file and the key, every mistake at once, and
the docs' table of template keys is the models' own."""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from judge_gateway.prompts import Aspect, TemplateError
from judge_gateway.prompts.parse import (
    TEMPLATE_FILES,
    TEMPLATE_KINDS,
    parse_template,
    read_template_file,
)

REPO = Path(__file__).resolve().parents[2]
PATH = Path("/templates/draft/1.toml")
DROP = object()  # a key left out of the file

YES_NO = {"id": "draft", "version": "1", "description": "test", "kind": "yes_no",
          "user": "<image>Is this a cat? Answer yes or no.", "answer": {"positive": "yes"}}
RUBRIC = {"id": "draft", "version": "1", "description": "test", "kind": "rubric",
          "user": "<image>Rate {prompt}. Sharpness: 1-4. Color: 1-4.",
          "scale": {"min": 1, "max": 4},
          "aspects": [{"name": "Sharpness"}, {"name": "Color", "weight": 0.5, "na_allowed": True}]}
FINAL = {"id": "draft", "version": "1", "description": "test", "kind": "final_score",
         "user": "<image>Rate {prompt}. End with 'Final Score: x'.", "label": "Final Score",
         "scale": {"min": 1, "max": 5}}
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["score", "violations"],
          "properties": {
              "score": {"type": "number"},
              "violations": {"type": "array", "items": {
                  "type": "object", "additionalProperties": False, "required": ["label", "t_s"],
                  "properties": {"label": {"type": "string"}, "t_s": {"type": ["number", "null"]}}}}}}
CRITIC = {"id": "draft", "version": "1", "description": "test", "kind": "critic",
          "user": "<video>Critique the video as JSON.", "violations_field": "violations",
          "json_schema": json.dumps(SCHEMA)}
AXES = {"id": "draft", "version": "1", "description": "test", "kind": "multi_axis",
        "user": "<image>Rate {prompt}.\nAlignment Score (1-5): X\nStyle Score (1-5): Y",
        "scale": {"min": 1, "max": 5},
        "axes": [{"name": "Alignment", "label": "Alignment Score (1-5)"},
                 {"name": "Style", "label": "Style Score (1-5)", "weight": 0.5, "na_allowed": True}]}
ANSWERS = {"id": "draft", "version": "1", "description": "test", "kind": "answer_probability",
           "user": "<image>{question} Answer in one word.",
           "answer_sets": [{"name": "count", "question_prefix": "How many", "words": ["one", "two"], "numerals": True},
                           {"name": "yes_no", "words": ["yes", "no"]}]}
CHECKLIST = {"id": "draft", "version": "1", "description": "test", "kind": "checklist",
             "user": "<image>{question} Please answer yes or no.", "answer": {"positive": "yes"},
             "probes": [{"name": "clear", "question": "Is the image clear?"},
                        {"name": "blurry", "question": 'Is "{prompt}" blurry?', "weight": 2.0, "positive": "no"}]}

COMPARATIVE = {"id": "draft", "version": "1", "description": "test", "kind": "comparative",
               "user": "<image><image>Is the second image better? Answer yes or no.",
               "verdict": {"read": "logprobs", "yes_means": "second"}}


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, (int, float, datetime.date)):
        return value.isoformat() if isinstance(value, datetime.date) else repr(value)
    raise TypeError(value)


def toml_text(doc: dict[str, Any]) -> str:
    """A template file's text: top-level keys, then [tables] and [[arrays of tables]]."""
    head, tables = [], []
    for key, value in doc.items():
        if value is DROP:
            continue
        if isinstance(value, dict):
            tables.append(f"\n[{key}]\n" + toml_text(value))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            tables += [f"\n[[{key}]]\n" + toml_text(v) for v in value]
        else:
            head.append(f"{key} = {toml_value(value)}\n")
    return "".join(head + tables)


def changed(doc: dict[str, Any], **keys: Any) -> dict[str, Any]:
    """`doc` with top-level keys set (DROP removes one); `answer__positive=` sets a nested key."""
    doc = json.loads(json.dumps(doc))
    for key, value in keys.items():
        table, _, inner = key.partition("__")
        target, name = (doc[table], inner) if inner else (doc, table)
        if isinstance(target, list):  # aspects__1__weight
            index, _, name = inner.partition("__")
            target = target[int(index)]
        target[name] = value
    return doc


def read(doc: dict[str, Any] | str | bytes) -> Any:
    data = doc if isinstance(doc, bytes) else (doc if isinstance(doc, str) else toml_text(doc)).encode()
    return read_template_file(PATH, "draft", "1", data)


def refused(doc: dict[str, Any] | str | bytes) -> str:
    with pytest.raises(TemplateError) as err:
        read(doc)
    message = str(err.value)
    assert message.startswith(f"template {PATH}"), message
    return message


MISTAKES = [
    # (what the author did, the file, the key named, what the message says of it)
    ("no kind", changed(YES_NO, kind=DROP), "kind", "is required: one of ['yes_no', 'rubric'"),
    ("an unknown kind", changed(YES_NO, kind="score"), "kind", "must be one of ['yes_no'"),
    ("a kind that is no string", changed(YES_NO, kind=3), "kind", "must be one of ['yes_no'"),
    ("no id", changed(YES_NO, id=DROP), "id", "is required: the family"),
    ("an id that is no string", changed(YES_NO, id=1), "id", "must be a string, got integer 1"),
    ("a blank id", changed(YES_NO, id="  "), "id", "must not be empty"),
    ("an id other than the folder", changed(YES_NO, id="other"), "id",
     "'other' must equal the folder name 'draft'"),
    ("a version other than the file name", changed(YES_NO, version="2"), "version",
     "'2' must equal the file name's stem '1'"),
    ("a version written as a number", changed(YES_NO, version=1), "version", "must be a string"),
    ("a date where a string goes", changed(YES_NO, description=datetime.date(2024, 1, 2)),
     "description", "must be a string, got date datetime.date(2024, 1, 2)"),
    ("no description", changed(YES_NO, description=DROP), "description", "is required"),
    ("a blank source", changed(YES_NO, source=""), "source", "must not be empty"),
    ("a misspelt key", changed(YES_NO, sytem="x"), "sytem",
     ("unknown for kind 'yes_no'; allowed: ['answer', 'description', 'id', 'kind', 'source', "
      "'system', 'user', 'verbatim', 'version']")),
    ("a key of another kind", changed(YES_NO, max_tokens=5), "max_tokens", "unknown for kind 'yes_no'"),
    ("media in the system text", changed(YES_NO, system="<image> look"), "system",
     "media markers belong in 'user', found '<image>'"),
    ("{prompt} in the system text", changed(YES_NO, system="about {prompt}"), "system",
     "{prompt} is only substituted in 'user'"),
    ("no user text", changed(YES_NO, user=DROP), "user", "is required: the user message"),
    ("no media marker", changed(YES_NO, user="Is this a cat?"), "user", "has no media marker"),
    ("a misspelt marker", changed(YES_NO, user="<img>Is this a cat?"), "user",
     "unknown media marker '<img>'; known: <image>, <video>, <condition_image>, <condition_video>"),
    # yes_no
    ("no [answer]", changed(YES_NO, answer=DROP), "answer", 'is required: the [answer] table'),
    ("answer as a string", changed(YES_NO, answer="yes"), "answer", "must be a table, got string 'yes'"),
    ("no positive answer", changed(YES_NO, answer={"yes_words": ["y"]}), "answer.positive",
     "is required"),
    ("a positive answer other than yes/no", changed(YES_NO, answer__positive="maybe"),
     "answer.positive", "must be 'yes' or 'no', got string 'maybe'"),
    ("a misspelt answer key", changed(YES_NO, answer__yes_word=["y"]), "answer.yes_word",
     "unknown; allowed: ['no_words', 'positive', 'yes_words']"),
    ("no yes words", changed(YES_NO, answer__yes_words=[]), "answer.yes_words", "must not be empty"),
    ("a blank yes word", changed(YES_NO, answer__yes_words=["yes", " "]), "answer.yes_words[1]",
     "must not be empty"),
    ("a yes word that is no string", changed(YES_NO, answer__no_words=["no", 0]),
     "answer.no_words[1]", "must be a string, got integer 0"),
    ("a word both yes and no", changed(YES_NO, answer__yes_words=["yes", "No "]), "answer",
     "yes_words and no_words overlap: ['no']"),
    ("verbatim as a string", changed(YES_NO, verbatim="yes"), "verbatim",
     "must be true or false, got string 'yes'"),
    ("verbatim without its source", changed(YES_NO, verbatim=True, user="<image>A? B?"), "verbatim",
     "a verbatim template must name its `source`"),
    ("two questions", changed(YES_NO, user="<image>Is it a cat? Or a dog?"), "user",
     "a yes_no template must ask exactly one question, found 2 '?'"),
    ("no question", changed(YES_NO, user="<image>"), "user", "a yes_no template needs a question in the user text"),
    # rubric
    ("no [scale]", changed(RUBRIC, scale=DROP), "scale", "is required: the [scale] table"),
    ("no scale max", changed(RUBRIC, scale={"min": 1}), "scale.max", "is required"),
    ("a scale the wrong way round", changed(RUBRIC, scale__max=1), "scale",
     "min 1.0 must be below max 1.0"),
    ("a scale bound written as a string", changed(RUBRIC, scale__min="1"), "scale.min",
     "must be a number, got string '1'"),
    ("a scale bound written as a bool", changed(RUBRIC, scale__min=True), "scale.min",
     "must be a number, got boolean True"),
    ("nan as a scale bound", changed(RUBRIC, scale__min=float("nan")), "scale.min",
     "must be a finite number, got float nan"),
    ("inf as a scale bound", changed(RUBRIC, scale__max=float("inf")), "scale.max",
     "must be a finite number, got float inf"),
    ("no aspects", changed(RUBRIC, aspects=DROP), "aspects", "is required: at least one [[aspects]]"),
    ("an empty aspects list", changed(RUBRIC, aspects=[]), "aspects", "must not be empty"),
    ("aspects as names", changed(RUBRIC, aspects=["Sharpness"]), "aspects[0]",
     "must be a table, got string 'Sharpness'"),
    ("an aspect without a name", changed(RUBRIC, aspects__0__name=DROP), "aspects[0].name",
     "is required: the aspect's name"),
    ("a negative weight", changed(RUBRIC, aspects__1__weight=-1), "aspects[1].weight",
     "must be at least 0.0, got integer -1"),
    ("na_allowed as a string", changed(RUBRIC, aspects__1__na_allowed="yes"),
     "aspects[1].na_allowed", "must be true or false"),
    ("a misspelt aspect key", changed(RUBRIC, aspects__1__wieght=1), "aspects[1].wieght",
     "unknown; allowed: ['na_allowed', 'name', 'weight']"),
    ("two aspects of one name", changed(RUBRIC, aspects__1__name="Sharpness"), "aspects",
     "duplicate aspect names ['Sharpness']"),
    ("every weight 0", changed(RUBRIC, aspects=[{"name": "Sharpness", "weight": 0}]), "aspects",
     "at least one aspect needs a weight above 0"),
    ("an aspect the prompt never asks for", changed(RUBRIC, aspects__1__name="Contrast"), "aspects",
     "aspect 'Contrast' does not appear in the user text"),
    ("an unknown missing_policy", changed(RUBRIC, missing_policy="drop"), "missing_policy",
     "must be 'invalid' or 'skip', got string 'drop'"),
    ("stop as a string", changed(RUBRIC, stop="# Summary"), "stop", "must be a list, got string '# Summary'"),
    ("an empty stop sequence", changed(RUBRIC, stop=[""]), "stop[0]", "must not be empty"),
    ("max_tokens 0", changed(RUBRIC, max_tokens=0), "max_tokens", "must be above 0, got integer 0"),
    ("max_tokens as a float", changed(RUBRIC, max_tokens=1.5), "max_tokens",
     "must be an integer, got float 1.5"),
    ("max_tokens as a bool", changed(RUBRIC, max_tokens=True), "max_tokens", "must be an integer"),
    ("a temperature above 2", changed(RUBRIC, temperature=3), "temperature", "must be at most 2"),
    ("a negative temperature", changed(RUBRIC, temperature=-0.5), "temperature",
     "must be at least 0"),
    ("a final_score key in a rubric", changed(RUBRIC, label="Score"), "label",
     "unknown for kind 'rubric'"),
    # final_score
    ("no label", changed(FINAL, label=DROP), "label", "is required: the label the score follows"),
    ("a label the prompt never asks for", changed(FINAL, label="Verdict"), "label",
     "'Verdict' does not appear in the user text"),
    # critic
    ("no reply schema", changed(CRITIC, json_schema=DROP), "json_schema", "is required"),
    ("a schema that is no JSON", changed(CRITIC, json_schema="{type: object}"), "json_schema",
     "Expecting property name"),
    ("a schema of something other than an object", changed(CRITIC, json_schema='{"type": "string"}'),
     "json_schema", "the reply must be a JSON object"),
    ("a schema keyword this gateway does not check",
     changed(CRITIC, json_schema=json.dumps({**SCHEMA, "properties": {
         **SCHEMA["properties"], "x": {"type": "string", "pattern": "a+"}}})),
     "json_schema", "$.x: unsupported keyword(s) ['pattern']"),
    ("no violations_field", changed(CRITIC, violations_field=DROP), "violations_field", "is required"),
    ("a violations_field that names no list", changed(CRITIC, violations_field="score"),
     "violations_field", "'score' must be an array of objects with required 'label'"),
    # multi_axis
    ("no axes", changed(AXES, axes=DROP), "axes", "is required: at least one [[axes]]"),
    ("an axis without its label", changed(AXES, axes__1__label=DROP), "axes[1].label",
     "is required: the text before the axis's number"),
    ("an axis label the prompt never asks for", changed(AXES, axes__1__label="Beauty Score"), "axes",
     "label 'Beauty Score' does not appear in the user text"),
    ("two axes of one name", changed(AXES, axes__1__name="Alignment"), "axes", "axis names and labels must be unique"),
    ("an unknown occurrence", changed(AXES, occurrence="middle"), "occurrence", "must be 'first' or 'last'"),
    # answer_probability
    ("no {question} in an answer_probability user text", changed(ANSWERS, user="<image>Answer in one word."),
     "user", "needs {question}, where each question goes"),
    ("no answer sets", changed(ANSWERS, answer_sets=DROP), "answer_sets", "is required"),
    ("two default answer sets", changed(ANSWERS, answer_sets__0__question_prefix=DROP), "answer_sets",
     "only one set may leave question_prefix unset"),
    ("an unknown normalize", changed(ANSWERS, normalize="softmax"), "normalize", "must be 'none' or 'answer_set'"),
    ("an answer set without words", changed(ANSWERS, answer_sets__1__words=[]), "answer_sets[1].words",
     "must not be empty"),
    # checklist
    ("no probes", changed(CHECKLIST, probes=DROP), "probes", "is required"),
    ("no {question} in a checklist user text", changed(CHECKLIST, user="<image>Please answer yes or no."),
     "user", "needs {question}"),
    ("a probe asking two questions", changed(CHECKLIST, probes__0__question="Is it clear? Sharp?"), "probes",
     "probe 'clear' must ask exactly one question"),
    ("a question around {question}", changed(CHECKLIST, user="<image>{question} Yes or no?"), "user",
     "the user text around {question} asks none"),
    ("two probes of one name", changed(CHECKLIST, probes__1__name="clear"), "probes",
     "duplicate probe names ['clear']"),
    ("every probe weighted 0", changed(CHECKLIST, probes=[{"name": "clear", "question": "Clear?", "weight": 0}]),
     "probes", "at least one probe needs a weight above 0"),
]


@pytest.mark.parametrize("doc, key, says", [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES])
def test_each_mistake_names_the_file_and_the_key(doc: dict[str, Any], key: str, says: str) -> None:
    message = refused(doc)
    assert f"field {key!r}: {says}" in message, message


def test_a_top_level_key_below_a_table_is_explained() -> None:
    # TOML puts every key after `[scale]` into that table: the usual way to misplace a key.
    text = toml_text(changed(RUBRIC, aspects=DROP)) + "max_tokens = 100\n"
    message = refused(text)
    assert "field 'scale.max_tokens': unknown; allowed: ['max', 'min'] ('max_tokens' is a " \
           "top-level key" in message and "put it above the first table" in message


def test_every_mistake_is_reported_at_once() -> None:
    doc = changed(RUBRIC, max_tokens=0, temperature=9, description=DROP, extra=1,
                  aspects__1__weight=-1, scale__min="1")
    message = refused(doc)
    keys = re.findall(r"field '([^']+)'", message)
    assert sorted(keys) == sorted(["max_tokens", "temperature", "description", "extra",
                                   "aspects[1].weight", "scale.min"])


def test_a_file_that_is_no_utf8_toml_is_refused() -> None:
    assert "is not valid UTF-8 TOML" in refused(b'id = "\xff"\n')
    assert "is not valid UTF-8 TOML" in refused('id = "draft\nkind = 1\n')


def test_defaults_of_each_kind() -> None:
    yes_no = read(YES_NO).template(PATH, "0" * 64)
    assert (yes_no.positive, yes_no.yes_words, yes_no.no_words) == ("yes", ("yes",), ("no",))
    assert (yes_no.stop, yes_no.max_tokens, yes_no.scale, yes_no.system, yes_no.source) == \
           ((), None, None, None, None)
    rubric = read(RUBRIC).template(PATH, "0" * 64)
    assert rubric.aspects == (Aspect("Sharpness", 1.0, False), Aspect("Color", 0.5, True))
    assert (rubric.scale, rubric.stop, rubric.missing_policy, rubric.temperature) == \
           ((1.0, 4.0), (), None, None)
    final = read(changed(FINAL, temperature=0, max_tokens=64)).template(PATH, "0" * 64)
    assert (final.label, final.scale, final.temperature, final.max_tokens) == \
           ("Final Score", (1.0, 5.0), 0.0, 64)
    assert isinstance(final.temperature, float)
    critic = read(CRITIC).template(PATH, "0" * 64)
    assert (critic.json_schema, critic.violations_field) == (SCHEMA, "violations")
    axes = read(AXES).template(PATH, "0" * 64)
    assert axes.aspects == (Aspect("Alignment", 1.0, False, label="Alignment Score (1-5)"),
                            Aspect("Style", 0.5, True, label="Style Score (1-5)"))
    assert (axes.scale, axes.occurrence, axes.missing_policy, axes.temperature) == ((1.0, 5.0), "last", None, None)
    answers = read(ANSWERS).template(PATH, "0" * 64)
    assert (answers.normalize, answers.counting, answers.mean) == ("none", "variants", "geometric")
    assert [(a.name, a.words, a.question_prefix, a.numerals) for a in answers.answer_sets] == \
           [("count", ("one", "two"), "How many", True), ("yes_no", ("yes", "no"), None, False)]
    checklist = read(CHECKLIST).template(PATH, "0" * 64)
    assert checklist.aspects == (Aspect("clear", 1.0, question="Is the image clear?", positive="yes"),
                                 Aspect("blurry", 2.0, question='Is "{prompt}" blurry?', positive="no"))
    assert (checklist.positive, checklist.scale) == ("yes", (0.0, 1.0))
    comparative = read(COMPARATIVE).template(PATH, "0" * 64)
    assert (comparative.verdict.read, comparative.verdict.yes_means, comparative.yes_words, comparative.no_words,
            comparative.verdict.tag, comparative.max_tokens) == ("logprobs", "second", ("yes",), ("no",), "answer", None)
    assert {t.kind for t in (yes_no, rubric, final, critic, comparative, axes, answers, checklist)} == set(TEMPLATE_KINDS)


def test_parsing_is_cached_by_path_and_content() -> None:
    data = toml_text(YES_NO).encode()
    digest = hashlib.sha256(data).hexdigest()
    first = parse_template(PATH, "draft", "1", digest, data)
    assert parse_template(str(PATH), "draft", "1", digest, data) is first
    edited = toml_text(changed(YES_NO, description="edited")).encode()
    again = parse_template(PATH, "draft", "1", hashlib.sha256(edited).hexdigest(), edited)
    assert again.description == "edited" and first.description == "test"


# --------------------------------------------------------------------------- the docs' key table


def _tables(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [t for arg in getattr(annotation, "__args__", ()) for t in _tables(arg)]


def _default(info: Any) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    return "-" if value is None else f"`{toml_value(value)}`"


def key_rows() -> list[str]:
    """The docs' table of template keys, one row a key, from the models of TEMPLATE_FILES."""
    rows: dict[str, tuple[list[str], str, str]] = {}

    def add(key: str, kind: str, info: Any) -> None:
        kinds, _, _ = rows.setdefault(key, ([], _default(info), info.description))
        kinds.append(kind)

    for kind, model in TEMPLATE_FILES.items():
        for name, info in model.model_fields.items():
            add(name, kind, info)
            for table in _tables(info.annotation):
                inner = f"{name}[]" if "list" in str(info.annotation) else name
                for field, field_info in table.model_fields.items():
                    add(f"{inner}.{field}", kind, field_info)
    every = len(TEMPLATE_FILES)
    return [f"| `{key}` | {'every kind' if len(kinds) == every else ', '.join(kinds)} | {default} | "
            f"{description.replace('|', chr(92) + '|').replace('<', '&lt;')} |"
            for key, (kinds, default, description) in rows.items()]


def test_every_template_key_has_a_description() -> None:
    for model in TEMPLATE_FILES.values():
        for info in model.model_fields.values():
            for table in [model, *_tables(info.annotation)]:
                missing = [n for n, i in table.model_fields.items() if not (i.description or "").strip()]
                assert not missing, f"{table.__name__}: keys without a description: {missing}"
        assert all(kind in model.model_fields["kind"].description for kind in TEMPLATE_KINDS)


def test_the_docs_table_of_template_keys_is_the_models() -> None:
    page = (REPO / "docs" / "judges" / "templates.md").read_text(encoding="utf-8")
    start, end = "<!-- template keys: from prompts/parse.py -->\n", "\n<!-- end of template keys -->"
    assert start in page and end in page
    table = page.split(start, 1)[1].split(end, 1)[0].splitlines()
    assert table[2:] == key_rows(), "docs/judges/templates.md's key table is stale; its rows:\n" + \
        "\n".join(key_rows())
