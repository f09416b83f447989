"""A loaded template and its rendering to OpenAI chat messages.

Rendering splits the user text at media markers (`<image>`, `<video>`, `<condition_image>`,
`<condition_video>`)
*before* substituting `{prompt}`, so a generation prompt can never add, move or remove media,
and `{prompt}` is replaced by plain string replacement (never `str.format`: rubric texts are
full of braces and brackets). A marker's text that a model's prompt spells out literally is
written with a backslash, `\\<image>`, and renders as the text `<image>`; so is any other
`<name>` tag a prompt spells out (`\\<think>`, `\\<v_score>`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..exceptions import ConfigurationError

MEDIA_SLOTS = ("image", "video", "condition_image", "condition_video")
PROMPT_PLACEHOLDER = "{prompt}"
# answer_probability and checklist templates: where each atom's or probe's question goes.
QUESTION_PLACEHOLDER = "{question}"
_FIELDS_RE = re.compile(r"\{(prompt|question)\}")

_MEDIA_SPLIT_RE = re.compile(r"(?<!\\)(" + "|".join(f"<{slot}>" for slot in MEDIA_SLOTS) + ")")
# `\<name>`: the text `<name>` itself (a slot's marker, or a tag a model's prompt spells out such
# as `<think>` or VideoScore2's `<v_score>`), not a media slot.
_LITERAL_MARKER_RE = re.compile(r"\\(<[A-Za-z_][A-Za-z0-9_]*>)")
# Anything unescaped that looks like a media marker; used to reject typos such as `<img>`.
_MARKER_LIKE_RE = re.compile(r"(?<!\\)<([A-Za-z_][A-Za-z0-9_]*)>")


class TemplateError(ConfigurationError):
    """A template ref, file, lock entry or render request is unusable."""


@dataclass(frozen=True)
class Aspect:
    """One weighted part of a reply: a rubric aspect, a multi-axis axis (its `label` as the reply
    writes it) or a checklist probe (its `question`, and the answer that counts as good)."""

    name: str
    weight: float = 1.0
    na_allowed: bool = False
    label: str | None = None
    question: str | None = None
    positive: str | None = None


@dataclass(frozen=True)
class AnswerSet:
    """answer_probability: the answers a kind of question admits. A question starting with
    `question_prefix` (None: every other question) is read against `words`; `numerals` makes a
    number word and its digits the same answer ("four", " 4")."""

    name: str
    words: tuple[str, ...]
    question_prefix: str | None = None
    numerals: bool = False


@dataclass(frozen=True)
class ComparativeVerdict:
    """How a comparative template's reply says which of its two images is better: `read` =
    "answer" (a generated reply; the text inside the `tag` contains one of the phrases naming
    the first image, the second, or a tie) or "logprobs" (one token: P(yes) that the image
    `yes_means` names is the better one, read as the yes/no kind reads its answer, with the
    template's yes_words / no_words)."""

    read: str
    tag: str = "answer"
    first: tuple[str, ...] = ()
    second: tuple[str, ...] = ()
    tie: tuple[str, ...] = ()
    yes_means: str | None = None  # "first" | "second"


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
    source: str | None
    path: Path
    # The fields of one kind; a template of another kind leaves them at these empty values.
    # yes_no: the answer that counts as positive and the words read as yes / as no.
    positive: str | None = None
    yes_words: tuple[str, ...] = ()
    no_words: tuple[str, ...] = ()
    # rubric: the scored aspects; rubric and final_score: the score scale (min, max);
    # final_score: the label the score follows.
    aspects: tuple[Aspect, ...] = ()
    scale: tuple[float, float] | None = None
    label: str | None = None
    # rubric, final_score, critic: defaults for the judge's request and options (a judge's own
    # options win): stop sequences, max_tokens, the sampling temperature, and what an aspect
    # absent from the reply does to the score (rubric).
    stop: tuple[str, ...] = ()
    max_tokens: int | None = None
    send_max_tokens: bool = True  # false: no max_tokens in the request unless an option sets one
    temperature: float | None = None
    missing_policy: str | None = None
    # critic: the reply's JSON schema and the dotted path of its violations list.
    json_schema: dict[str, Any] | None = None
    violations_field: str | None = None
    # comparative: how the reply names the better of its two images.
    verdict: ComparativeVerdict | None = None
    # multi_axis: which of several `label:` lines of one axis counts ("first" / "last"), and
    # what an axis's value is: the number written ("none") or VideoScore2's soft score read at
    # that number's token ("score_token", parsers/score_token.py).
    occurrence: str | None = None
    soft_score: str | None = None
    # answer_probability: the answer sets, how an answer's probability is normalised ("none" /
    # "answer_set"), which tokens count ("variants" / "exact") and the prompt-level mean
    # ("arithmetic" / "geometric").
    answer_sets: tuple[AnswerSet, ...] = ()
    normalize: str | None = None
    counting: str | None = None
    mean: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.id}@{self.version}"

    @functools.cached_property
    def _pieces(self) -> tuple[tuple[bool, str], ...]:
        """The user text split at its markers, once per template (a comparative judge renders
        a 3 kB text per comparison; the split was most of the render's cost)."""
        return tuple(split_at_markers(self.user))

    @property
    def media_slots(self) -> tuple[str, ...]:
        """Media markers of the user text in order of appearance, repeats included."""
        return tuple(slot for is_media, slot in self._pieces if is_media)

    def render(self, prompt: str, media: Mapping[str, Sequence[dict]], question: str | None = None) -> list[dict]:
        """OpenAI chat messages for one sample (and, for templates with `{question}`, one question).

        `media` maps a slot name to the content parts for that slot's markers, in order, e.g.
        `{"image": [{"type": "image_url", "image_url": {"url": "data:..."}}]}`. Each marker
        consumes the next part of its slot. A missing part, a part left over, or an unknown slot
        raises `TemplateError`: a sample rendered with the wrong media must not be scored.
        `{prompt}` and `{question}` are replaced in one pass: neither value is searched for the other.
        """
        _check_prompt(prompt, self.ref)
        if question is not None:
            _check_prompt(question, self.ref)
        queues = self._media_queues(media)
        parts: list[dict] = []
        for is_media, value in self._pieces:
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
                _append_text(parts, _fill(value, prompt, question))
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

    def render_text(self, prompt: str, question: str | None = None) -> str:
        """Human-readable preview: media shown as `[image]`, `[video]`, `[condition_image]` ..."""
        _check_prompt(prompt, self.ref)
        user = "".join(
            f"[{value}]" if is_media else _fill(value, prompt, question)
            for is_media, value in self._pieces
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


def marker_like(text: str) -> list[str]:
    """Every `<name>` in `text` that has a media marker's shape, known or not: a template file
    that holds one it does not know (a typo such as `<img>`) is refused. A `<name>` whose
    closing `</name>` is in the text too is a tag the prompt asks the reply to write (`<think>`,
    `<answer>`), not a marker: a media marker is never closed."""
    return [match.group(0) for match in _MARKER_LIKE_RE.finditer(text)
            if f"</{match.group(1)}>" not in text]


def split_at_markers(user: str) -> list[tuple[bool, str]]:
    """The user text as (is_media, text-or-slot) pieces, split at media markers: how `render`
    lays out the content parts, and how a template file's user text is checked."""
    pieces = _MEDIA_SPLIT_RE.split(user)
    # re.split with one group alternates text, marker, text, ...
    return [
        (True, piece[1:-1]) if index % 2 else (False, _LITERAL_MARKER_RE.sub(r"\1", piece))
        for index, piece in enumerate(pieces)
        if index % 2 or piece
    ]


def _fill(text: str, prompt: str, question: str | None) -> str:
    """`{prompt}` (and `{question}`, when given) replaced, by plain replacement: never str.format."""
    if question is None:
        return text.replace(PROMPT_PLACEHOLDER, prompt)
    values = {"prompt": prompt, "question": question}
    return _FIELDS_RE.sub(lambda m: values[m.group(1)], text)


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
