"""Worker side of `kind = "cosmos_rl_handler"`: a cosmos-rl reward handler class (a
BaseRewardHandler subclass, reward_service/cosmos_rl_reward/handler), unchanged, as a head.

cosmos-rl builds a handler with keyword arguments (launcher/reward_compute.py: model_path, device,
dtype, download_path, endpoint_url, endpoint_api_key), calls `set_up()` once, then per enqueued
batch `calculate_reward(tensor, metadata)`:

- images: uint8 [B, H, W, C]; videos: uint8 [B, C, T, H, W] (its decoder's output), on the CPU
  (its handlers move them to their device);
- metadata: `prompts` (one per sample), `media_type`, `video_infos` ([{"video_fps"}] per video),
  `input_info`, `decode_duration`, `uuid`, and the clients' own keys: a per-sample key as a list
  with one value per sample (`geneval_tags` ...), a `batch_keys` key once (`geneval_only_strict`);
- its reply: {"scores": {key: [one value per sample]}, ...}, or {"error": ...} for the batch.

Here a batch is up to `max_batch_size` samples gathered across requests, split into calls that
can be one tensor (one medium, one size) and agree on the batch keys. A sample's raw number is
`scores[score_key][i]`; the other keys go to its details. A value listed in `error_values` (a
handler's "Error" sentinel), or one that is not a number, makes that sample's score invalid.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...config.custom_heads import CosmosRLHandlerOptions, cosmos_dtype
from ..models.base import HeadLoadError
from .api import HeadContext, Item, ItemScore
from .loading import import_class, require_torch
from .model import CustomHeadModel, plain

_batch_ids = itertools.count(1)
# Keys of the batch metadata the adapter writes itself; a sample's metadata cannot replace them.
_OWN_KEYS = ("prompts", "media_type", "video_infos", "input_info", "decode_duration", "decoded_info", "uuid")


class CosmosHandlerScorer:
    """A cosmos-rl reward handler behind the scorer interface (model.py)."""

    groupwise = False
    inputs: tuple[str, ...] = ()

    def __init__(self, cls: type, ref: str, context: HeadContext, options: CosmosRLHandlerOptions) -> None:
        import torch

        self.torch = torch
        self.ref = ref
        self.score_key = options.score_key
        self.batch_keys = tuple(options.batch_keys)
        self.error_values: dict[str, list[Any]] = dict(options.error_values)
        kwargs = {"model_path": options.model_path, "download_path": options.download_path,
                  "device": context.device, "dtype": cosmos_dtype(context.dtype), **options.params}
        try:
            # cosmos-rl keeps one instance per process (get_instance); a head worker is that process.
            make = getattr(cls, "get_instance", None)
            self.handler = make(**kwargs) if callable(make) else cls(**kwargs)
            self.handler.set_up()
        except Exception as exc:
            raise HeadLoadError(f"{ref}: building or set_up() failed: {type(exc).__name__}: {exc}") from exc
        self.reward_name = str(getattr(self.handler, "reward_name", "") or "")

    def load(self) -> dict[str, Any]:
        return {"model": self.ref, "reward_name": self.reward_name}

    def score(self, items: Sequence[Item]) -> list[ItemScore]:
        results: list[ItemScore | None] = [None] * len(items)
        for idx in call_groups(items, self.batch_keys):
            batch = [items[i] for i in idx]
            for i, score in zip(idx, self._call(batch)):
                results[i] = score
        return [r for r in results if r is not None]

    def _call(self, batch: list[Item]) -> list[ItemScore]:
        stacked = np.stack([it.pixels for it in batch])  # a copy: the handler may keep or change it
        if batch[0].medium == "video":
            stacked = np.ascontiguousarray(stacked.transpose(0, 4, 1, 2, 3))  # [B, T, H, W, C] -> [B, C, T, H, W]
        metadata = batch_metadata(batch, self.batch_keys, stacked)
        try:
            reply = self.handler.calculate_reward(self.torch.from_numpy(stacked), metadata)
        except Exception as exc:
            raise RuntimeError(f"calculate_reward raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(reply, Mapping):
            raise RuntimeError(f"calculate_reward returned a {type(reply).__name__}, not cosmos-rl's result dict")
        scores = reply.get("scores")
        if reply.get("error") or not isinstance(scores, Mapping):
            why = reply.get("error") or f"no `scores` dict in its reply (keys: {sorted(reply)})"
            return [ItemScore.failed(f"the handler failed on this batch: {why}") for _ in batch]
        key = score_key(scores, self.score_key, self.reward_name)
        return per_sample(scores, len(batch), key, self.error_values)


def call_groups(items: Sequence[Item], batch_keys: Sequence[str]) -> list[list[int]]:
    """Indices per call: one medium and size (one tensor), the same values of the batch keys."""
    calls: dict[str, list[int]] = {}
    for i, it in enumerate(items):
        shared = json.dumps([it.metadata.get(k) for k in batch_keys], sort_keys=True, default=str)
        calls.setdefault(f"{it.medium}{it.pixels.shape}{shared}", []).append(i)
    return list(calls.values())


def batch_metadata(batch: Sequence[Item], batch_keys: Sequence[str], pixels: np.ndarray) -> dict[str, Any]:
    """A call's metadata as cosmos-rl's decoder hands it to a handler (`pixels`: the call's tensor)."""
    metadata: dict[str, Any] = {}
    for key in sorted({k for it in batch for k in it.metadata} - set(_OWN_KEYS)):
        if key in batch_keys:
            metadata[key] = batch[0].metadata.get(key)  # the call's samples agree on it (call_groups)
        else:
            metadata[key] = [it.metadata.get(key) for it in batch]
    info = {"shape": tuple(pixels.shape), "dtype": "torch.uint8"}
    metadata.update({
        "prompts": [it.prompt for it in batch],
        "media_type": batch[0].medium,
        "uuid": f"judge-gateway-{next(_batch_ids)}",
        "decode_duration": "0.00",
        "decoded_info": dict(info),
        "input_info": {**info, "min": f"{float(pixels.min()):.3f}", "max": f"{float(pixels.max()):.3f}"},
    })
    if batch[0].medium == "video":
        metadata["video_infos"] = [{"video_fps": it.fps} for it in batch]
    return metadata


def score_key(scores: Mapping[str, Any], configured: str | None, reward_name: str) -> str:
    """The key of a handler's `scores` that is the reward: options.score_key, else the only key,
    else the handler's reward_name."""
    if configured is not None:
        if configured not in scores:
            raise RuntimeError(f"options.score_key {configured!r} is not in the handler's scores "
                               f"(keys: {sorted(scores)})")
        return configured
    if len(scores) == 1:
        return next(iter(scores))
    if reward_name in scores:
        return reward_name
    raise RuntimeError(f"the handler's scores have keys {sorted(scores)}: set options.score_key to the one "
                       "that is the reward")


def per_sample(scores: Mapping[str, Any], n: int, key: str, error_values: Mapping[str, Sequence[Any]]) -> list[ItemScore]:
    """One result per sample: raw = scores[key][i], every key's value in details.scores; a value
    listed in error_values, or a raw value that is not a number, is that sample's error."""
    columns: dict[str, list[Any]] = {}
    for name, values in scores.items():
        values = plain(values)
        if not isinstance(values, list) or len(values) != n:
            got = f"{len(values)} values" if isinstance(values, list) else f"a {type(values).__name__}"
            raise RuntimeError(f"the handler's scores[{name!r}] is {got}, not one value for each of {n} samples")
        columns[str(name)] = values
    out = []
    for i in range(n):
        row = {name: values[i] for name, values in columns.items()}
        details = {"scores": row}
        marked = [f"{name}={row[name]!r}" for name, wrong in error_values.items() if name in row and row[name] in wrong]
        value = row[key]
        if marked:
            out.append(ItemScore.failed(f"the handler marked this sample failed ({', '.join(marked)})", details))
        elif not isinstance(value, (int, float)) or isinstance(value, bool):
            out.append(ItemScore.failed(f"scores[{key!r}] is {value!r} for this sample, not a number", details))
        else:
            out.append(ItemScore(raw=float(value), details=details))
    return out


def build_cosmos_rl_head(kind: str, options: CosmosRLHandlerOptions) -> CustomHeadModel:
    ref = options.class_path()

    def make(context: HeadContext) -> CosmosHandlerScorer:
        require_torch("cosmos_rl_handler")
        cls = import_class(ref, options.pythonpath)
        if not callable(getattr(cls, "calculate_reward", None)) or not callable(getattr(cls, "set_up", None)):
            raise HeadLoadError(f"{ref} is not a cosmos-rl reward handler (it needs set_up() and "
                                "calculate_reward(images, metadata))")
        return CosmosHandlerScorer(cls, ref, context, options)

    return CustomHeadModel(kind, options, make, ref)
