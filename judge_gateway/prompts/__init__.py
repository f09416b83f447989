"""Versioned, hash-locked prompt templates for the VLM judges.

A template is one TOML file `prompts/<family>/<version>.toml`. A released version is immutable:
`templates.lock` records the SHA-256 of every released file, `verify_lock()` reports drift, and
`load_template()` refuses a released template whose bytes changed. New wording means a new
version file plus a lock entry (`lock_new_templates()`). Configs pin `family@version`.

Rendering splits the user text at media markers (`<image>`, `<video>`, `<condition_image>`,
`<condition_video>`)
*before* substituting `{prompt}`, so a generation prompt can never add, move or remove media,
and `{prompt}` is replaced by plain string replacement (never `str.format`: rubric texts are
full of braces and brackets).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "KINDS",
    "LOCK_PATH",
    "MEDIA_SLOTS",
    "TEMPLATES_DIR",
    "Aspect",
    "Template",
    "TemplateError",
    "list_templates",
    "load_template",
    "lock_new_templates",
    "parse_ref",
    "show_template",
    "verify_lock",
]

log = logging.getLogger(__name__)

# Read at call time (not bound as defaults), so tests can point the module at a copy.
TEMPLATES_DIR: Path = Path(__file__).resolve().parent
LOCK_PATH: Path = TEMPLATES_DIR / "templates.lock"

MEDIA_SLOTS = ("image", "video", "condition_image", "condition_video")
PROMPT_PLACEHOLDER = "{prompt}"

_FAMILY_RE = re.compile(r"[a-z0-9][a-z0-9_]*")
_VERSION_RE = re.compile(r"[0-9]+(?:\.[0-9]+)*")
_MEDIA_SPLIT_RE = re.compile("(" + "|".join(f"<{slot}>" for slot in MEDIA_SLOTS) + ")")
# Anything that looks like a media marker; used to reject typos such as `<img>` or `<source>`.
_MARKER_LIKE_RE = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*)>")

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


class TemplateError(ValueError):
    """A template ref, file, lock entry or render request is unusable."""


@dataclass(frozen=True)
class Aspect:
    """One scored aspect of a rubric reply."""

    name: str
    weight: float = 1.0
    na_allowed: bool = False


@dataclass(frozen=True)
class Template:
    """A loaded, validated template. Build with `load_template`, not directly."""

    id: str
    version: str
    sha256: str
    kind: str
    description: str
    system: str | None
    user: str
    positive: str | None
    yes_words: tuple[str, ...]
    no_words: tuple[str, ...]
    aspects: tuple[Aspect, ...]
    scale: tuple[float, float] | None
    label: str | None
    stop: tuple[str, ...]
    max_tokens: int | None
    source: str | None
    path: Path
    # Defaults for the judge's options (a judge's own options win): the sampling temperature,
    # and what an aspect absent from the reply does to the score (rubric).
    temperature: float | None = None
    missing_policy: str | None = None
    # critic: the reply's JSON schema and the dotted path of its violations list.
    json_schema: dict[str, Any] | None = None
    violations_field: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.id}@{self.version}"

    @property
    def media_slots(self) -> tuple[str, ...]:
        """Media markers of the user text in order of appearance, repeats included."""
        return tuple(slot for is_media, slot in _segments(self.user) if is_media)

    def render(self, prompt: str, media: Mapping[str, Sequence[dict]]) -> list[dict]:
        """OpenAI chat messages for one sample.

        `media` maps a slot name to the content parts for that slot's markers, in order, e.g.
        `{"image": [{"type": "image_url", "image_url": {"url": "data:..."}}]}`. Each marker
        consumes the next part of its slot. A missing part, a part left over, or an unknown slot
        raises `TemplateError`: a sample rendered with the wrong media must not be scored.
        """
        _check_prompt(prompt, self.ref)
        queues = self._media_queues(media)
        parts: list[dict] = []
        for is_media, value in _segments(self.user):
            if is_media:
                queue = queues[value]
                if not queue:
                    need = self.media_slots.count(value)
                    raise TemplateError(
                        f"template {self.ref}: missing media for slot {value!r} "
                        f"(the template needs {need} part(s) there)"
                    )
                parts.append(queue.pop(0))
            else:
                _append_text(parts, value.replace(PROMPT_PLACEHOLDER, prompt))
        leftover = {slot: len(queue) for slot, queue in queues.items() if queue}
        if leftover:
            raise TemplateError(
                f"template {self.ref}: unused media parts {leftover}; "
                f"its markers are {list(self.media_slots)}"
            )
        messages: list[dict] = []
        if self.system is not None:
            messages.append({"role": "system", "content": self.system})
        messages.append({"role": "user", "content": parts})
        return messages

    def render_text(self, prompt: str) -> str:
        """Human-readable preview: media shown as `[image]`, `[video]`, `[condition_image]` ..."""
        _check_prompt(prompt, self.ref)
        user = "".join(
            f"[{value}]" if is_media else value.replace(PROMPT_PLACEHOLDER, prompt)
            for is_media, value in _segments(self.user)
        )
        if self.system is None:
            return f"[user]\n{user}"
        return f"[system]\n{self.system}\n\n[user]\n{user}"

    def _media_queues(self, media: Mapping[str, Sequence[dict]]) -> dict[str, list[dict]]:
        if not isinstance(media, Mapping):
            raise TemplateError(f"template {self.ref}: media must be a mapping slot -> parts")
        unknown = sorted(set(media) - set(self.media_slots))
        if unknown:
            raise TemplateError(
                f"template {self.ref}: media for unknown slot(s) {unknown}; "
                f"its markers are {list(self.media_slots)}"
            )
        queues: dict[str, list[dict]] = {slot: [] for slot in self.media_slots}
        for slot, slot_parts in media.items():
            if isinstance(slot_parts, (Mapping, str, bytes)) or not isinstance(
                slot_parts, Sequence
            ):
                raise TemplateError(
                    f"template {self.ref}: media[{slot!r}] must be a list of content parts"
                )
            for index, part in enumerate(slot_parts):
                if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
                    raise TemplateError(
                        f"template {self.ref}: media[{slot!r}][{index}] is not a content part "
                        f"(a dict with a 'type'): {part!r:.80}"
                    )
                if part["type"] == "text":
                    raise TemplateError(
                        f"template {self.ref}: media[{slot!r}][{index}] is a text part; "
                        "media slots take media parts only"
                    )
                queues[slot].append(dict(part))  # a copy: callers may reuse their part dicts
        return queues


# --------------------------------------------------------------------------- refs and loading


def parse_ref(ref: str) -> tuple[str, str]:
    """Split and validate `family@version`; an unpinned family is refused."""
    if not isinstance(ref, str):
        raise TemplateError(f"template ref must be a string 'family@version', got {ref!r}")
    if "@" not in ref:
        hint = _available_hint(ref) if _FAMILY_RE.fullmatch(ref) else _families_hint()
        raise TemplateError(
            f"template ref {ref!r} is not pinned: use 'family@version' (released templates are "
            f"immutable, so configs must name the version); {hint}"
        )
    family, _, version = ref.partition("@")
    if not _FAMILY_RE.fullmatch(family):
        raise TemplateError(
            f"template ref {ref!r}: family {family!r} must match {_FAMILY_RE.pattern}; "
            f"{_families_hint()}"
        )
    if not _VERSION_RE.fullmatch(version):
        raise TemplateError(
            f"template ref {ref!r}: version {version!r} must be a number like '1' or '2'; "
            f"{_available_hint(family)}"
        )
    return family, version


def load_template(ref: str) -> Template:
    """Load, hash-check and validate `family@version`.

    A released (locked) template whose bytes no longer match the lock is refused. A file not yet
    in the lock loads with a warning (drafting a new version); `verify_lock` fails the build
    until it is locked.
    """
    family, version = parse_ref(ref)
    path = TEMPLATES_DIR / family / f"{version}.toml"
    if not path.is_file():
        if (TEMPLATES_DIR / family).is_dir():
            raise TemplateError(f"unknown template version {ref!r}; {_available_hint(family)}")
        raise TemplateError(f"unknown template family {family!r} in {ref!r}; {_families_hint()}")
    data = path.read_bytes()
    digest = _sha256(data)
    locked = _read_lock(LOCK_PATH).get(f"{family}@{version}")
    if locked is None:
        log.warning("template %s (%s) is not in %s: unreleased draft", ref, path, LOCK_PATH)
    elif locked != digest:
        raise TemplateError(
            f"released template {path} changed: lock has sha256 {locked}, file has {digest}. "
            "Released templates are immutable: restore the file and put new wording in a new "
            "version."
        )
    # Parsing is cached by content hash, so an edited file is never served from the cache.
    return _parse_cached(str(path), family, version, digest, data)


def list_templates() -> list[Template]:
    """Every template file, loaded, sorted by (id, numeric version)."""
    return [load_template(ref) for ref in _sorted_refs(_template_files())]


def show_template(ref: str) -> str:
    """The template file's exact text plus its sha256 line (for the CLI)."""
    template = load_template(ref)
    text = template.path.read_text(encoding="utf-8")
    if not text.endswith("\n"):
        text += "\n"
    return f"{text}# sha256: {template.sha256}\n"


# --------------------------------------------------------------------------- lock


def verify_lock() -> list[str]:
    """Problems with the lock: changed released bytes, unlocked files, dangling entries."""
    try:
        lock = _read_lock(LOCK_PATH)
    except TemplateError as exc:
        return [str(exc)]
    problems: list[str] = []
    files = _template_files(problems)
    for ref in _sorted_refs(files):
        path = files[ref]
        digest = _sha256(path.read_bytes())
        if ref not in lock:
            problems.append(
                f"unlocked template {path} ({ref}, sha256 {digest}): "
                "release it with lock_new_templates()"
            )
        elif lock[ref] != digest:
            problems.append(
                f"released template {path} ({ref}) changed: lock has sha256 {lock[ref]}, "
                f"file has {digest}; restore it and put new wording in a new version"
            )
    for ref in sorted(set(lock) - set(files)):
        problems.append(f"dangling lock entry {ref!r} in {LOCK_PATH}: no such template file")
    return problems


def lock_new_templates() -> list[str]:
    """Lock every valid template file not yet in the lock; existing entries are never changed.

    Each new file is validated first, so a broken template cannot become a released one.
    Returns the refs added, sorted.
    """
    lock = _read_lock(LOCK_PATH) if LOCK_PATH.exists() else {}
    problems: list[str] = []
    files = _template_files(problems)
    if problems:
        raise TemplateError("; ".join(problems))
    added: list[str] = []
    for ref in _sorted_refs(files):
        if ref in lock:
            continue
        family, version = parse_ref(ref)
        data = files[ref].read_bytes()
        _parse_cached(str(files[ref]), family, version, _sha256(data), data)  # validate
        lock[ref] = _sha256(data)
        added.append(ref)
    if added or not LOCK_PATH.exists():
        _write_lock(LOCK_PATH, lock)
    return added


def _read_lock(path: Path) -> dict[str, str]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TemplateError(f"template lock {path} is missing") from None
    return _parse_lock(str(path), data)


_LOCK_CACHE: dict[tuple[str, bytes], dict[str, str]] = {}


def _parse_lock(name: str, data: bytes) -> dict[str, str]:
    key = (name, data)
    if key not in _LOCK_CACHE:
        try:
            raw = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TemplateError(f"template lock {name} is not valid JSON: {exc}") from None
        if not isinstance(raw, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v)
            for k, v in raw.items()
        ):
            raise TemplateError(
                f"template lock {name} must be a JSON object 'family@version' -> sha256 hex"
            )
        _LOCK_CACHE.clear()  # only the current lock is worth keeping
        _LOCK_CACHE[key] = raw
    return dict(_LOCK_CACHE[key])


def _write_lock(path: Path, lock: Mapping[str, str]) -> None:
    text = json.dumps(dict(sorted(lock.items())), indent=2) + "\n"
    # Write then rename, so a crash never leaves a half-written lock.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".templates.lock.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------- files


def _template_files(problems: list[str] | None = None) -> dict[str, Path]:
    """`family@version` -> path for every `<family>/<version>.toml`; bad names go to problems."""
    files: dict[str, Path] = {}
    if not TEMPLATES_DIR.is_dir():
        return files
    for path in sorted(TEMPLATES_DIR.glob("*/*.toml")):
        family, version = path.parent.name, path.stem
        if _FAMILY_RE.fullmatch(family) and _VERSION_RE.fullmatch(version):
            files[f"{family}@{version}"] = path
        elif problems is not None:
            problems.append(
                f"template file {path} is not named <family>/<version>.toml "
                f"(family {_FAMILY_RE.pattern}, version like '1')"
            )
    return files


def _sorted_refs(refs: Mapping[str, Path] | Sequence[str]) -> list[str]:
    def key(ref: str) -> tuple[str, tuple[int, ...]]:
        family, _, version = ref.partition("@")
        return family, tuple(int(n) for n in version.split("."))

    return sorted(refs, key=key)


def _available_hint(family: str) -> str:
    refs = [ref for ref in _sorted_refs(_template_files()) if ref.startswith(f"{family}@")]
    if refs:
        return f"available versions: {', '.join(refs)}"
    return f"no template family {family!r}; {_families_hint()}"


def _families_hint() -> str:
    refs = _sorted_refs(_template_files())
    return f"available templates: {', '.join(refs) if refs else '(none)'}"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- parsing


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
        marker = _MARKER_LIKE_RE.search(system)
        if marker:
            raise fail("system", f"media markers belong in 'user', found {marker.group(0)!r}")
        if PROMPT_PLACEHOLDER in system:
            raise fail("system", "{prompt} is only substituted in 'user'")
    user = _get_str(raw, "user", fail)
    for match in _MARKER_LIKE_RE.finditer(user):
        if match.group(1) not in MEDIA_SLOTS:
            raise fail(
                "user",
                f"unknown media marker {match.group(0)!r}; "
                f"known: {', '.join(f'<{s}>' for s in MEDIA_SLOTS)}",
            )
    if not any(is_media for is_media, _ in _segments(user)):
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
        text = "".join(value for is_media, value in _segments(user) if not is_media)
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


# --------------------------------------------------------------------------- rendering


def _segments(user: str) -> list[tuple[bool, str]]:
    """The user text as (is_media, text-or-slot) pieces, split at media markers."""
    pieces = _MEDIA_SPLIT_RE.split(user)
    # re.split with one group alternates text, marker, text, ...
    return [
        (True, piece[1:-1]) if index % 2 else (False, piece)
        for index, piece in enumerate(pieces)
        if index % 2 or piece
    ]


def _append_text(parts: list[dict], text: str) -> None:
    if not text:
        return
    if parts and parts[-1].get("type") == "text":
        parts[-1] = {"type": "text", "text": parts[-1]["text"] + text}
    else:
        parts.append({"type": "text", "text": text})


def _check_prompt(prompt: Any, ref: str) -> None:
    if not isinstance(prompt, str):
        raise TemplateError(f"template {ref}: prompt must be a string, got {type(prompt).__name__}")
