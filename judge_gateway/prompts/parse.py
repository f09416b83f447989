"""A template file's TOML, parsed and validated into a `Template` (cached by content hash)."""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .template import (
    MEDIA_SLOTS,
    PROMPT_PLACEHOLDER,
    Aspect,
    Template,
    TemplateError,
    marker_like,
    split_at_markers,
)

_COMMON_FIELDS = {"id", "version", "description", "kind", "system", "user", "source"}
_KIND_FIELDS: dict[str, set[str]] = {
    "yes_no": {"answer", "verbatim"},
    "rubric": {"aspects", "scale", "stop", "max_tokens", "temperature", "missing_policy"},
    "final_score": {"scale", "label", "stop", "max_tokens", "temperature"},
    # critic: the reply is one JSON object; json_schema (a JSON text) is what vLLM's structured
    # outputs enforce and what the reply is checked against; violations_field names its list of
    # {label, t_s} violations.
    "critic": {"json_schema", "violations_field", "stop", "max_tokens", "temperature"},
}
KINDS = tuple(_KIND_FIELDS)  # the template kinds; a VLM judge kind pins a template of its own kind
_ANSWER_FIELDS = {"positive", "yes_words", "no_words"}
_ASPECT_FIELDS = {"name", "weight", "na_allowed"}
_SCALE_FIELDS = {"min", "max"}
MISSING_POLICIES = ("invalid", "skip")


_TEMPLATE_CACHE: dict[tuple[str, str], Template] = {}


def _parse_cached(path: str, family: str, version: str, digest: str, data: bytes) -> Template:
    key = (path, digest)
    template = _TEMPLATE_CACHE.get(key)
    if template is None:
        template = _parse(Path(path), family, version, digest, data)
        _TEMPLATE_CACHE[key] = template
    return template


def _parse(path: Path, family: str, version: str, digest: str, data: bytes) -> Template:
    def fail(field: str, message: str) -> TemplateError:
        return TemplateError(f"template {path}: field {field!r}: {message}")

    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TemplateError(f"template {path} is not valid UTF-8 TOML: {exc}") from None

    kind = _get_str(raw, "kind", fail)
    if kind not in KINDS:
        raise fail("kind", f"must be one of {list(KINDS)}, got {kind!r}")
    allowed = _COMMON_FIELDS | _KIND_FIELDS[kind]
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise fail(unknown[0], f"unknown for kind {kind!r}; allowed: {sorted(allowed)}")

    template_id = _get_str(raw, "id", fail)
    if template_id != family:
        raise fail("id", f"{template_id!r} must equal the folder name {family!r}")
    file_version = _get_str(raw, "version", fail)
    if file_version != version:
        raise fail("version", f"{file_version!r} must equal the file name's stem {version!r}")
    description = _get_str(raw, "description", fail)
    source = _get_str(raw, "source", fail, required=False)

    system = _get_str(raw, "system", fail, required=False, allow_empty=False)
    if system is not None:
        markers = marker_like(system)
        if markers:
            raise fail("system", f"media markers belong in 'user', found {markers[0]!r}")
        if PROMPT_PLACEHOLDER in system:
            raise fail("system", "{prompt} is only substituted in 'user'")
    user = _get_str(raw, "user", fail)
    for marker in marker_like(user):
        if marker[1:-1] not in MEDIA_SLOTS:
            raise fail(
                "user",
                f"unknown media marker {marker!r}; "
                f"known: {', '.join(f'<{s}>' for s in MEDIA_SLOTS)}",
            )
    if not any(is_media for is_media, _ in split_at_markers(user)):
        raise fail("user", "has no media marker: a judge template must show the sample")

    positive: str | None = None
    yes_words: tuple[str, ...] = ()
    no_words: tuple[str, ...] = ()
    aspects: tuple[Aspect, ...] = ()
    scale: tuple[float, float] | None = None
    label: str | None = None
    stop: tuple[str, ...] = ()
    max_tokens: int | None = None
    temperature: float | None = None
    missing_policy: str | None = None
    json_schema: dict[str, Any] | None = None
    violations_field: str | None = None

    if kind == "critic":
        stop = _parse_stop(raw, fail)
        max_tokens = _parse_max_tokens(raw, fail)
        temperature = _parse_temperature(raw, fail)
        json_schema, violations_field = _parse_critic_schema(raw, fail)
    elif kind == "yes_no":
        positive, yes_words, no_words = _parse_answer(raw, fail)
        # One question: the judge reads the first answer token, so it must be unambiguous.
        text = "".join(value for is_media, value in split_at_markers(user) if not is_media)
        if not text.strip():
            raise fail("user", "a yes_no template needs a question in the user text")
        verbatim = raw.get("verbatim", False)
        if not isinstance(verbatim, bool):
            raise fail("verbatim", f"must be true or false, got {verbatim!r}")
        if verbatim and source is None:
            raise fail("verbatim", "a verbatim template must name its `source`")
        # A peer's prompt copied byte for byte (to reproduce its numbers) keeps its wording.
        if not verbatim and text.count("?") != 1:
            raise fail(
                "user",
                f"a yes_no template must ask exactly one question, found {text.count('?')} '?' "
                "(a peer's prompt reproduced byte for byte may set verbatim = true)",
            )
    else:
        scale = _parse_scale(raw, fail)
        stop = _parse_stop(raw, fail)
        max_tokens = _parse_max_tokens(raw, fail)
        temperature = _parse_temperature(raw, fail)
        if kind == "rubric":
            missing_policy = raw.get("missing_policy")
            if missing_policy is not None and missing_policy not in MISSING_POLICIES:
                raise fail("missing_policy", f"must be one of {list(MISSING_POLICIES)}, got {missing_policy!r}")
            aspects = _parse_aspects(raw, fail)
            for aspect in aspects:
                # The parser finds aspects by name; a name the prompt never asks for is a typo.
                if aspect.name not in user:
                    raise fail(
                        "aspects", f"aspect {aspect.name!r} does not appear in the user text"
                    )
        else:
            label = _get_str(raw, "label", fail)
            if label not in user:
                raise fail("label", f"{label!r} does not appear in the user text")

    return Template(
        id=template_id,
        version=file_version,
        sha256=digest,
        kind=kind,
        description=description,
        system=system,
        user=user,
        positive=positive,
        yes_words=yes_words,
        no_words=no_words,
        aspects=aspects,
        scale=scale,
        label=label,
        stop=stop,
        max_tokens=max_tokens,
        source=source,
        path=path,
        temperature=temperature,
        missing_policy=missing_policy,
        json_schema=json_schema,
        violations_field=violations_field,
    )


def _get_str(
    table: Mapping[str, Any],
    field: str,
    fail: Any,
    *,
    required: bool = True,
    allow_empty: bool = False,
    prefix: str = "",
) -> Any:
    name = f"{prefix}{field}"
    if field not in table:
        if required:
            raise fail(name, "is required")
        return None
    value = table[field]
    if not isinstance(value, str):
        raise fail(name, f"must be a string, got {type(value).__name__} {value!r}")
    if not allow_empty and not value.strip():
        raise fail(name, "must not be empty")
    return value


def _parse_answer(
    raw: Mapping[str, Any], fail: Any
) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    answer = raw.get("answer")
    if not isinstance(answer, dict):
        raise fail("answer", 'a yes_no template needs an [answer] table with positive = "yes"|"no"')
    unknown = sorted(set(answer) - _ANSWER_FIELDS)
    if unknown:
        raise fail(f"answer.{unknown[0]}", f"unknown; allowed: {sorted(_ANSWER_FIELDS)}")
    positive = _get_str(answer, "positive", fail, prefix="answer.")
    if positive not in ("yes", "no"):
        raise fail("answer.positive", f'must be "yes" or "no", got {positive!r}')
    # Defaults match the yes/no parser's; it sums every case/space variant of each word.
    yes_words = _word_list(answer, "yes_words", ("yes",), fail)
    no_words = _word_list(answer, "no_words", ("no",), fail)
    overlap = {w.strip().casefold() for w in yes_words} & {w.strip().casefold() for w in no_words}
    if overlap:
        raise fail("answer", f"yes_words and no_words overlap: {sorted(overlap)}")
    return positive, yes_words, no_words


def _word_list(
    table: Mapping[str, Any], field: str, default: tuple[str, ...], fail: Any
) -> tuple[str, ...]:
    if field not in table:
        return default
    value = table[field]
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(w, str) and w.strip() for w in value)
    ):
        raise fail(
            f"answer.{field}", f"must be a non-empty list of non-empty strings, got {value!r}"
        )
    return tuple(value)


def _parse_scale(raw: Mapping[str, Any], fail: Any) -> tuple[float, float]:
    scale = raw.get("scale")
    if not isinstance(scale, dict):
        raise fail("scale", "is required: a [scale] table with min and max")
    unknown = sorted(set(scale) - _SCALE_FIELDS)
    if unknown:
        raise fail(f"scale.{unknown[0]}", f"unknown; allowed: {sorted(_SCALE_FIELDS)}")
    bounds = []
    for key in ("min", "max"):
        value = scale.get(key)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise fail(f"scale.{key}", f"must be a finite number, got {value!r}")
        bounds.append(float(value))
    if bounds[0] >= bounds[1]:
        raise fail("scale", f"min {bounds[0]} must be below max {bounds[1]}")
    return bounds[0], bounds[1]


def _parse_aspects(raw: Mapping[str, Any], fail: Any) -> tuple[Aspect, ...]:
    items = raw.get("aspects")
    if not isinstance(items, list) or not items:
        raise fail("aspects", "a rubric template needs at least one [[aspects]] entry")
    aspects: list[Aspect] = []
    for index, item in enumerate(items):
        prefix = f"aspects[{index}]."
        if not isinstance(item, dict):
            raise fail(f"aspects[{index}]", "must be a table with name, weight, na_allowed")
        unknown = sorted(set(item) - _ASPECT_FIELDS)
        if unknown:
            raise fail(prefix + unknown[0], f"unknown; allowed: {sorted(_ASPECT_FIELDS)}")
        name = _get_str(item, "name", fail, prefix=prefix)
        weight = item.get("weight", 1.0)
        if (
            isinstance(weight, bool)
            or not isinstance(weight, (int, float))
            or not math.isfinite(weight)
            or weight < 0
        ):
            raise fail(prefix + "weight", f"must be a finite number >= 0, got {weight!r}")
        na_allowed = item.get("na_allowed", False)
        if not isinstance(na_allowed, bool):
            raise fail(prefix + "na_allowed", f"must be true or false, got {na_allowed!r}")
        aspects.append(Aspect(name=name, weight=float(weight), na_allowed=na_allowed))
    names = [a.name for a in aspects]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise fail("aspects", f"duplicate aspect names {duplicates}")
    if not any(a.weight > 0 for a in aspects):
        raise fail("aspects", "at least one aspect needs a weight above 0")
    return tuple(aspects)


def _parse_critic_schema(raw: Mapping[str, Any], fail: Any) -> tuple[dict[str, Any], str]:
    from ..parsers.json_schema import SchemaError, check_schema, subschema

    text = _get_str(raw, "json_schema", fail)
    try:
        schema = json.loads(text)
        check_schema(schema)
    except (json.JSONDecodeError, SchemaError) as exc:
        raise fail("json_schema", str(exc)) from None
    if schema.get("type") != "object":
        raise fail("json_schema", "the reply must be a JSON object (type = object)")
    path = _get_str(raw, "violations_field", fail)
    node = subschema(schema, path)
    item = node.get("items") if node is not None and node.get("type") == "array" else None
    props = (item or {}).get("properties") or {}
    if item is None or not {"label", "t_s"} <= set(props) or not {"label", "t_s"} <= set(item.get("required", [])):
        raise fail("violations_field", f"{path!r} must be an array of objects with required "
                   "'label' (string) and 't_s' (seconds) fields")
    if props["label"].get("type") != "string" or "number" not in _schema_types(props["t_s"]):
        raise fail("violations_field", "'label' must be a string and 't_s' a number (or null)")
    return schema, path


def _schema_types(schema: Mapping[str, Any]) -> list[str]:
    t = schema.get("type")
    return [t] if isinstance(t, str) else list(t or [])


def _parse_stop(raw: Mapping[str, Any], fail: Any) -> tuple[str, ...]:
    value = raw.get("stop", [])
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise fail("stop", f"must be a list of non-empty strings, got {value!r}")
    return tuple(value)


def _parse_temperature(raw: Mapping[str, Any], fail: Any) -> float | None:
    value = raw.get("temperature")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 2:
        raise fail("temperature", f"must be a number in [0, 2], got {value!r}")
    return float(value)


def _parse_max_tokens(raw: Mapping[str, Any], fail: Any) -> int | None:
    value = raw.get("max_tokens")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise fail("max_tokens", f"must be a positive integer, got {value!r}")
    return value
