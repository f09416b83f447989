"""Worker side of a brought head: the HeadModel that runs a class scoring whole samples (ours, or a
peer's through its adapter), and the batcher that feeds it whole samples gathered across requests.

Every brought kind comes down to a *scorer*: built once from a HeadContext, optionally `load()`ed,
then `score(items) -> one result per item` (api.py). `build_custom_head` makes the user's class the
scorer; flow_factory.py and cosmos_rl.py make adapters over the peers' classes. A scorer with
`groupwise = True` gets one whole group per call (the gateway sends a group as one job).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ...config.custom_heads import CustomHeadOptions, ImportedHeadOptions
from ..batcher import Job, MicroBatcher, Staged
from ..models.base import HeadLoadError, HeadModel
from ..protocol import HeadItem
from .api import HeadContext, Item, ItemScore, as_item_score
from .loading import import_class, validated_options

# What a scorer may ask the gateway to send besides the scored medium.
CONDITIONS = ("condition_images", "condition_videos")
ScorerFactory = Callable[[HeadContext], Any]


def to_item(h: HeadItem) -> Item:
    """The wire item as the scorer sees it (an image as [H, W, 3], a video as [T, H, W, 3])."""
    return Item(prompt=h.prompt, medium=h.medium, pixels=h.frames[0] if h.medium == "image" else h.frames,  # type: ignore[arg-type]
                fps=h.fps, metadata=h.metadata, group_id=h.group_id,
                condition_images=tuple(a[0] for a in h.condition_images),
                condition_videos=tuple(h.condition_videos))


def plain(value: Any) -> Any:
    """Tensors and arrays as (nested) lists, tuples as lists, mappings as dicts with str keys:
    the form a peer's per-sample values are read (and sent as JSON) in. Other values are kept."""
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu()
    if hasattr(value, "tolist"):  # a tensor, numpy array or numpy scalar
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def output_of(result: Any) -> dict[str, Any]:
    """One item's result as the worker sends it: {"raw", "details"?} or {"error", "details"?}."""
    score = as_item_score(result)
    out: dict[str, Any] = {"raw": score.raw} if score.error is None else {"error": score.error}
    if score.details is not None:
        if not isinstance(score.details, Mapping):
            return {"error": f"the head's details for this item are a {type(score.details).__name__}, not a dict"}
        try:
            json.dumps(score.details)
        except (TypeError, ValueError) as exc:
            return {"error": f"the head's details for this item are not JSON ({exc}); return plain numbers, "
                             "strings, lists and dicts"}
        out["details"] = dict(score.details)
    return out


class CustomHeadModel(HeadModel):
    """A scorer of whole samples behind the head worker's protocol."""

    options: ImportedHeadOptions

    def __init__(self, kind: str, options: ImportedHeadOptions, make_scorer: ScorerFactory, class_path: str) -> None:
        super().__init__(kind, options)
        self.make_scorer = make_scorer
        self.class_path = class_path
        self.scorer: Any = None
        self.items_scored = 0

    def context(self) -> HeadContext:
        o = self.options
        return HeadContext(name=self.name, kind=self.kind, device=o.device, dtype=o.dtype,
                           max_batch_size=o.max_batch_size)

    def load(self) -> dict[str, Any]:
        self.scorer = self.make_scorer(self.context())
        load = getattr(self.scorer, "load", None)
        facts = load() if callable(load) else None
        if facts is not None and not isinstance(facts, Mapping):
            raise HeadLoadError(f"{self.class_path}: load() returned a {type(facts).__name__}, not a dict of facts")
        facts = dict(facts or {})
        try:
            json.dumps(facts)
        except (TypeError, ValueError) as exc:
            raise HeadLoadError(f"{self.class_path}: load()'s facts are not JSON: {exc}") from None
        wants = [c for c in CONDITIONS if c in getattr(self.scorer, "inputs", ())]
        return {"model": str(facts.pop("model", self.class_path)), "class": self.class_path,
                "groupwise": bool(getattr(self.scorer, "groupwise", False)), "conditions": wants, **facts}

    def infer(self, images: Sequence[np.ndarray], prompts: Sequence[str]) -> list[dict[str, Any]]:
        raise RuntimeError(f"{self.class_path} scores whole samples (items jobs), not frames")

    def score_items(self, items: Sequence[HeadItem]) -> list[dict[str, Any]]:
        results = self.scorer.score([to_item(h) for h in items])
        try:
            results = list(results)
        except TypeError:
            raise RuntimeError(f"{self.class_path}.score returned a {type(results).__name__}, "
                               "not one result per item") from None
        if len(results) != len(items):
            raise RuntimeError(f"{self.class_path}.score returned {len(results)} results for {len(items)} items")
        self.items_scored += len(items)
        return [output_of(r) for r in results]

    def make_batcher(self, max_batch_size: int, max_wait_ms: float) -> "ItemBatcher":
        return ItemBatcher(self.score_items, max_batch_size, max_wait_ms,
                           groupwise=bool(getattr(self.scorer, "groupwise", False)))

    def close(self) -> None:
        close = getattr(self.scorer, "close", None)
        if callable(close):
            close()

    def stats(self) -> dict[str, Any]:
        return {"items_scored": self.items_scored}


class ItemBatcher(MicroBatcher):
    """MicroBatcher over whole samples: a job's items (one sample, or a whole group) are never
    split. Pointwise: jobs are gathered up to `max_batch_size` items per call; a failing call is
    retried one job at a time, so one bad request cannot fail its neighbours. Groupwise: one call
    per job (a group), whatever its size."""

    def __init__(self, score: Callable[[Sequence[HeadItem]], list[dict[str, Any]]], max_batch_size: int,
                 max_wait_ms: float, *, groupwise: bool) -> None:
        super().__init__(score, max_batch_size, max_wait_ms)
        self.groupwise = groupwise

    def job_size(self, job: Job) -> int:
        return len(job.items) if job.items is not None else len(job.frames)

    def run(self, jobs: list[Job], staged: Staged | None = None) -> dict[int, list[dict[str, Any]] | Exception]:
        result: dict[int, list[dict[str, Any]] | Exception] = {}
        for batch in self._batches(jobs):
            result.update(self._run_batch(batch))
        return result

    def _batches(self, jobs: list[Job]) -> list[list[Job]]:
        if self.groupwise:
            return [[job] for job in jobs]
        batches: list[list[Job]] = []
        size = 0
        for job in jobs:
            n = self.job_size(job)
            if batches and size + n <= self.max_batch_size:
                batches[-1].append(job)
                size += n
            else:
                batches.append([job])
                size = n
        return batches

    def _run_batch(self, batch: list[Job]) -> dict[int, list[dict[str, Any]] | Exception]:
        try:
            if any(job.items is None for job in batch):
                raise RuntimeError("this head scores whole samples; it got a frames job")
            items = [item for job in batch for item in job.items]  # type: ignore[union-attr]
            t0 = time.perf_counter()
            outputs = self.infer(items)
            self.infer_s += time.perf_counter() - t0
        except Exception as exc:
            if len(batch) == 1:
                return {batch[0].msg_id: exc}
            out: dict[int, list[dict[str, Any]] | Exception] = {}
            for job in batch:  # one at a time: only the failing request's items get the error
                out.update(self._run_batch([job]))
            return out
        self.record(len(items))
        out, start = {}, 0
        for job in batch:
            n = len(job.items)  # type: ignore[arg-type]
            out[job.msg_id] = outputs[start:start + n]
            start += n
        return out


def build_custom_head(kind: str, options: CustomHeadOptions) -> CustomHeadModel:
    """`kind = "custom"`: the user's class with judge-gateway's interface (api.py)."""
    ref = options.class_path()

    def make(context: HeadContext) -> Any:
        cls = import_class(ref, options.pythonpath)
        if not callable(getattr(cls, "score", None)):
            raise HeadLoadError(f"{ref}: a custom head needs a `score(items)` method "
                                "(see judge_gateway.heads.custom.CustomHead)")
        opts = validated_options(cls, options.params)
        try:
            return cls(opts, context)
        except HeadLoadError:
            raise
        except Exception as exc:
            raise HeadLoadError(f"{ref}(options, context) failed: {type(exc).__name__}: {exc}") from exc

    return CustomHeadModel(kind, options, make, ref)
