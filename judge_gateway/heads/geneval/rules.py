"""GenEval's per-image rules as plain functions (no torch): detections + metadata -> verdict.

A reimplementation of the published GenEval semantics (Ghosh et al., 2023):

* A detection counts when its score exceeds the box threshold: 0.3, or 0.9 for the `counting`
  tag; per class at most 16 objects are kept, the highest scores first.
* Each include `{class, count, color?, position?: [relation, index]}` takes the first `count`
  kept objects of its class (the most confident ones). It fails when there are fewer; when a
  `color` is asked and fewer than `count` of them have that colour; when a `position` is asked
  and the include it refers to (by index, an earlier include) did not match, or some pair of
  (object, target object) is not in that relation.
* An `exclude` `{class, count}` fails the image when `count` or more objects of the class are
  kept. GenEval's `counting` prompts carry `exclude: [{class, count: N + 1}]`; metadata without
  `exclude` gets that implied for a `counting` tag, so `correct` there means exactly N.
* Relations by box centres with a margin of 0.1 x (sum of the two boxes' extents) per axis: the
  offset of A's centre from B's, shrunk by the margin (towards 0, not past it), divided by the
  length of the raw offset; "left of" when its x < -0.5, "right of" > 0.5, "above" y < -0.5,
  "below" y > 0.5 (image y grows downwards). Centres within the margin: no relation.

Outputs per image: `correct` (GenEval's own verdict), `strict` (correct and every include's
class found exactly `count` times), `score` (the mean over includes of a component in [0, 1]:
the mean of its count, colour and position parts, see `_include_component`) and per-include
checks naming each include and why it failed. GenEval's -10.0 for tags that do not apply is
never produced: `group` has the image's tag only, the other tags are None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...exceptions import InvalidInput

TAGS = ("single_object", "two_object", "counting", "colors", "position", "color_attr")
COLORS = ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white")
RELATIONS = ("left of", "right of", "above", "below")
BOX_THRESHOLD = 0.3
COUNTING_THRESHOLD = 0.9
MAX_OBJECTS = 16
POSITION_MARGIN = 0.1


class GenEvalInputError(InvalidInput):
    """The metadata (tag, includes) or the detections are not what the rules need."""


@dataclass(frozen=True)
class Include:
    cls: str
    count: int
    color: str | None = None
    position: tuple[str, int] | None = None

    def describe(self) -> str:
        text = f"{self.count} x {self.cls}"
        if self.color:
            text = f"{self.count} x {self.color} {self.cls}"
        if self.position:
            text += f" {self.position[0]} include[{self.position[1]}]"
        return text

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"class": self.cls, "count": self.count}
        if self.color:
            d["color"] = self.color
        if self.position:
            d["position"] = [self.position[0], self.position[1]]
        return d


@dataclass(frozen=True)
class Metadata:
    tag: str
    includes: tuple[Include, ...]
    excludes: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Obj:
    box: tuple[float, float, float, float]
    score: float
    color: str | None = None


@dataclass
class GenEvalResult:
    tag: str
    correct: bool
    strict: bool
    score: float
    checks: list[dict[str, Any]] = field(default_factory=list)
    excludes: list[dict[str, Any]] = field(default_factory=list)
    threshold: float = BOX_THRESHOLD

    @property
    def reasons(self) -> list[str]:
        out = [c["reason"] for c in self.checks if c.get("reason")]
        return out + [e["reason"] for e in self.excludes if e.get("reason")]

    def group(self, value: float) -> dict[str, float | None]:
        """The six tags; the image's own carries `value`, the others None (never -10)."""
        return {t: (value if t == self.tag else None) for t in TAGS}


# ---- metadata ------------------------------------------------------------------------------


def _int(v: Any, where: str, minimum: int) -> int:
    # JSON's 1e400 parses to inf, and int() of inf or nan raises: a non-finite number is refused first
    if (isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v))
            or int(v) != v or v < minimum):
        raise GenEvalInputError(f"{where} must be an integer >= {minimum}, got {v!r}")
    return int(v)


def parse_include(raw: Any, index: int, n_includes: int) -> Include:
    where = f"include[{index}]"
    if not isinstance(raw, Mapping):
        raise GenEvalInputError(f"{where} must be an object {{class, count, color?, position?}}, got {raw!r}")
    unknown = set(raw) - {"class", "count", "color", "position"}
    if unknown:
        raise GenEvalInputError(f"{where} has unknown key(s) {sorted(unknown)}")
    cls = raw.get("class")
    if not isinstance(cls, str) or not cls.strip():
        raise GenEvalInputError(f"{where}.class must be a non-empty string, got {cls!r}")
    count = _int(raw.get("count", 1), f"{where}.count", 1)
    color = raw.get("color")
    if color is not None and color not in COLORS:
        raise GenEvalInputError(f"{where}.color must be one of {', '.join(COLORS)}, got {color!r}")
    position = raw.get("position")
    if position is not None:
        if not isinstance(position, Sequence) or isinstance(position, str) or len(position) != 2:
            raise GenEvalInputError(f"{where}.position must be [relation, index], got {position!r}")
        rel, target = position
        if rel not in RELATIONS:
            raise GenEvalInputError(f"{where}.position relation must be one of {', '.join(RELATIONS)}, got {rel!r}")
        target = _int(target, f"{where}.position index", 0)
        if target >= index:
            raise GenEvalInputError(
                f"{where}.position index {target} must name an earlier include (0..{index - 1})"
                if index else f"{where}.position needs an earlier include to refer to"
            )
        position = (rel, target)
    return Include(cls=cls.strip(), count=count, color=color, position=position)


def parse_metadata(tag: Any, includes: Any, excludes: Any = None) -> Metadata:
    """Validate one image's GenEval metadata; GenEvalInputError says what is wrong."""
    if not isinstance(tag, str) or tag not in TAGS:
        raise GenEvalInputError(f"tag must be one of {', '.join(TAGS)}, got {tag!r}")
    if isinstance(includes, Mapping):  # a single include
        includes = [includes]
    if not isinstance(includes, Sequence) or isinstance(includes, str) or not includes:
        raise GenEvalInputError(f"include must be a non-empty list of {{class, count, color?, position?}}, got {includes!r}")
    parsed = tuple(parse_include(inc, i, len(includes)) for i, inc in enumerate(includes))
    ex: list[tuple[str, int]] = []
    if excludes is not None:
        if isinstance(excludes, Mapping):
            excludes = [excludes]
        if not isinstance(excludes, Sequence) or isinstance(excludes, str):
            raise GenEvalInputError(f"exclude must be a list of {{class, count}}, got {excludes!r}")
        for i, e in enumerate(excludes):
            if not isinstance(e, Mapping) or not isinstance(e.get("class"), str) or not e["class"].strip():
                raise GenEvalInputError(f"exclude[{i}] must be {{class, count}}, got {e!r}")
            ex.append((e["class"].strip(), _int(e.get("count"), f"exclude[{i}].count", 1)))
    elif tag == "counting":
        ex = [(inc.cls, inc.count + 1) for inc in parsed]
    return Metadata(tag=tag, includes=parsed, excludes=tuple(ex))


# ---- detections ----------------------------------------------------------------------------


def threshold_for(tag: str) -> float:
    return COUNTING_THRESHOLD if tag == "counting" else BOX_THRESHOLD


def select_objects(detections: Mapping[str, Any], threshold: float,
                   max_objects: int = MAX_OBJECTS) -> dict[str, list[Obj]]:
    """Per class, the objects scoring above `threshold`, best first, at most `max_objects`.

    `detections`: {class: {"boxes": [[x1, y1, x2, y2], ...], "scores": [...], "colors"?: [...]}}
    (colours may be None for objects that were not classified).
    """
    out: dict[str, list[Obj]] = {}
    for cls, det in detections.items():
        boxes = list(det.get("boxes", []))
        scores = list(det.get("scores", []))
        colors = det.get("colors")
        colors = list(colors) if colors is not None else [None] * len(boxes)
        if not (len(boxes) == len(scores) == len(colors)):
            raise GenEvalInputError(
                f"detections of {cls!r}: {len(boxes)} boxes, {len(scores)} scores, {len(colors)} colours")
        objs = []
        for b, s, c in zip(boxes, scores, colors):
            if len(b) != 4:
                raise GenEvalInputError(f"detections of {cls!r}: a box must be [x1, y1, x2, y2], got {b!r}")
            if float(s) > threshold:
                objs.append(Obj(box=(float(b[0]), float(b[1]), float(b[2]), float(b[3])), score=float(s), color=c))
        objs.sort(key=lambda o: -o.score)  # stable: ties keep the detector's order
        if objs:
            out[cls] = objs[:max_objects]
    return out


def relations(a: Obj, b: Obj, margin: float = POSITION_MARGIN) -> set[str]:
    """The relations of A to B ("left of" means A is left of B)."""
    ax, ay = (a.box[0] + a.box[2]) / 2, (a.box[1] + a.box[3]) / 2
    bx, by = (b.box[0] + b.box[2]) / 2, (b.box[1] + b.box[3]) / 2
    dx, dy = ax - bx, ay - by
    slack_x = margin * (abs(a.box[2] - a.box[0]) + abs(b.box[2] - b.box[0]))
    slack_y = margin * (abs(a.box[3] - a.box[1]) + abs(b.box[3] - b.box[1]))
    rx = math.copysign(max(abs(dx) - slack_x, 0.0), dx)
    ry = math.copysign(max(abs(dy) - slack_y, 0.0), dy)
    if abs(rx) < 1e-3 and abs(ry) < 1e-3:
        return set()
    norm = math.hypot(dx, dy)
    nx, ny = rx / norm, ry / norm
    out = set()
    if nx < -0.5:
        out.add("left of")
    if nx > 0.5:
        out.add("right of")
    if ny < -0.5:
        out.add("above")
    if ny > 0.5:
        out.add("below")
    return out


# ---- the verdict ---------------------------------------------------------------------------


def evaluate(meta: Metadata, detections: Mapping[str, Any]) -> GenEvalResult:
    """Score one image: `detections` as for select_objects (all classes, before thresholds)."""
    threshold = threshold_for(meta.tag)
    objects = select_objects(detections, threshold)
    exact_counts = meta.tag == "counting"
    correct = True
    strict = True
    matched: list[list[Obj] | None] = []
    checks: list[dict[str, Any]] = []
    components: list[float] = []
    for i, inc in enumerate(meta.includes):
        available = objects.get(inc.cls, [])
        found = available[: inc.count]
        check: dict[str, Any] = {"include": i, "expected": inc.as_dict(), "description": inc.describe(),
                                 "found": len(available), "passed": True, "reason": None}
        parts: list[float] = []
        ok = True
        # count
        if exact_counts and len(available) > inc.count:
            parts.append(inc.count / len(available))
        else:
            parts.append(min(len(available), inc.count) / inc.count)
        if len(available) < inc.count:
            ok = False
            check["reason"] = f"include[{i}] ({inc.describe()}): expected {inc.count} {inc.cls}, found {len(available)}"
        if len(available) != inc.count:
            strict = False
        # colour: among the (up to) `count` most confident objects
        if inc.color is not None:
            colors = [o.color for o in found]
            n_color = sum(1 for c in colors if c == inc.color)
            check["colors"] = colors
            parts.append(n_color / inc.count)
            if ok and n_color < inc.count:
                ok = False
                seen = ", ".join(str(c) for c in colors) or "none"
                check["reason"] = (f"include[{i}] ({inc.describe()}): expected {inc.count} {inc.color} "
                                   f"{inc.cls}, found {n_color} (colours: {seen})")
        # position relative to an earlier include's objects
        if inc.position is not None:
            rel, target = inc.position
            targets = matched[target]
            if targets is None:
                parts.append(0.0)
                if ok:
                    ok = False
                    check["reason"] = (f"include[{i}] ({inc.describe()}): include[{target}] "
                                       f"({meta.includes[target].describe()}) was not matched, so no position")
            elif not found:
                parts.append(0.0)
            else:
                pairs = [(o, t) for o in found for t in targets]
                good = [rel in relations(o, t) for o, t in pairs]
                parts.append(sum(good) / len(good))
                if ok and not all(good):
                    ok = False
                    bad_o, bad_t = pairs[good.index(False)]
                    seen = sorted(relations(bad_o, bad_t)) or ["no clear relation"]
                    check["reason"] = (f"include[{i}] ({inc.describe()}): a {inc.cls} is "
                                       f"{' and '.join(seen)} the {meta.includes[target].cls}, not {rel}")
        check["passed"] = ok
        check["score"] = sum(parts) / len(parts)
        components.append(check["score"])
        checks.append(check)
        matched.append(found if ok else None)
        correct = correct and ok
    excl: list[dict[str, Any]] = []
    for cls, count in meta.excludes:
        n = len(objects.get(cls, []))
        ok = n < count
        excl.append({"class": cls, "count": count, "found": n, "passed": ok,
                     "reason": None if ok else f"exclude ({cls} < {count}): found {n} {cls}"})
        correct = correct and ok
    strict = strict and correct
    score = sum(components) / len(components)
    return GenEvalResult(tag=meta.tag, correct=correct, strict=strict, score=score, checks=checks,
                         excludes=excl, threshold=threshold)


@dataclass(frozen=True)
class ServiceVerdict:
    """GenEval as cosmos-rl's reward service reports it (reward_service/cosmos_rl_reward/model/
    gen_eval.py, after DiffusionNFT), which differs from `evaluate` in three ways:

    * `correct` is GenEval's `evaluate` over the includes only: the service's per-image metadata
      has no `exclude`, so a `counting` image with more than N objects is still correct;
      with `geneval_only_strict` it is forced to False.
    * `strict` (its `evaluate_reward`): every include's class kept exactly `count` times, its
      colour on all of them, its position against the earlier include's objects; no excludes.
    * `score` is the flat mean of the parts `evaluate_reward` appends: per include
      1 - |count - kept| / count (negative when far more are kept); then, when the count is not
      exact and a colour or position is asked, one 0.0; else 1 - |count - right colour| / count
      for a colour, and for a position 0.0 when the earlier include did not match, else 0.0 for
      the first pair out of relation followed by 1.0, or 1.0 when every pair is in relation.
    """

    score: float
    correct: bool
    strict: bool

    def as_dict(self) -> dict[str, float]:
        return {"score": self.score, "correct": float(self.correct), "strict": float(self.strict)}


def service_verdict(meta: Metadata, detections: Mapping[str, Any], only_strict: bool = False) -> ServiceVerdict:
    objects = select_objects(detections, threshold_for(meta.tag))
    correct = _service_correct(meta, objects) and not only_strict
    parts: list[float] = []
    strict = True
    matched: list[list[Obj] | None] = []
    for inc in meta.includes:
        kept = objects.get(inc.cls, [])
        ok = True
        parts.append(1 - abs(inc.count - len(kept)) / inc.count)
        if len(kept) != inc.count:
            ok = False
            if inc.color is not None or inc.position is not None:
                parts.append(0.0)
        else:
            if inc.color is not None:
                n_color = sum(1 for o in kept if o.color == inc.color)
                parts.append(1 - abs(inc.count - n_color) / inc.count)
                ok = n_color == inc.count
            if inc.position is not None and ok:
                rel, target = inc.position
                targets = matched[target]
                if targets is None:
                    ok = False
                    parts.append(0.0)
                else:
                    if not all(rel in relations(o, t) for o in kept for t in targets):
                        ok = False
                        parts.append(0.0)
                    parts.append(1.0)
        strict = strict and ok
        matched.append(kept if ok else None)
    return ServiceVerdict(score=sum(parts) / len(parts), correct=correct, strict=strict)


def _service_correct(meta: Metadata, objects: Mapping[str, list[Obj]]) -> bool:
    """GenEval's `evaluate` over the includes, without excludes (see ServiceVerdict)."""
    matched: list[list[Obj] | None] = []
    correct = True
    for inc in meta.includes:
        found = objects.get(inc.cls, [])[: inc.count]
        ok = len(found) >= inc.count
        if ok and inc.color is not None:
            ok = sum(1 for o in found if o.color == inc.color) >= inc.count
        if ok and inc.position is not None:
            rel, target = inc.position
            targets = matched[target]
            ok = targets is not None and all(rel in relations(o, t) for o in found for t in targets)
        matched.append(found if ok else None)
        correct = correct and ok
    return correct


def detections_summary(detections: Mapping[str, Any], threshold: float) -> dict[str, Any]:
    """Per class, how many objects were kept, their scores and colours (for a score's details)."""
    objs = select_objects(detections, threshold)
    return {cls: {"count": len(o), "scores": [round(x.score, 4) for x in o],
                  "colors": [x.color for x in o],
                  "boxes": [[round(v, 1) for v in x.box] for x in o]} for cls, o in objs.items()}
