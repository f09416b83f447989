"""Worker side of `kind = "flow_factory_model"`: a Flow-Factory reward model class, unchanged, as a
head. Flow-Factory (src/flow_factory/rewards: abc.py, loader.py, reward_processor.py) builds a
model as `cls(config, accelerator)` and calls it with a batch's fields as keyword lists:

    model(prompt=[...], image=[...] | video=[...], condition_images=[...], condition_videos=[...],
          **other sample fields) -> RewardModelOutput(rewards, extra_info)

- pointwise (a PointwiseRewardModel): batches of up to `max_batch_size` samples (its
  `config.batch_size`), gathered across requests; groupwise (a GroupwiseRewardModel): one call
  per group (the samples of a request that share a group_id), as its RewardProcessor does;
- media as PIL images (`image`: list of RGB images, `video`: list of frame lists), or with
  `use_tensor_inputs = True` as float32 tensors in [0, 1] on the model's device (`image`: [C, H, W]
  each, `video`: [T, C, H, W] each, a sample's condition images / videos stacked [N, C, H, W] /
  [N, T, C, H, W] when of one size);
- the keyword lists it gets are those its `__call__` accepts (all, with `**kwargs`), of the fields
  every sample of the call has: prompt, the medium, condition media, and each key of the samples'
  metadata (Flow-Factory's "additional fields from Sample");
- `rewards` is read as float32 (as its RewardProcessor reads it), one per sample; `extra_info`
  values with one entry per sample go to that sample's details, scalars to every sample's.

The peer's base classes are recognised by name in the class's MRO, so a class works whether its
base is flow_factory's own or a stand-in with the same signatures. `config` is an object with
RewardArguments' fields (name, reward_model, dtype, device, batch_size, weight, async_reward,
num_workers, extra_kwargs = `params`, whose keys read as attributes too); `accelerator` is a
single-process stand-in (device, process_index 0, num_processes 1, main process): a head is one
process, never a distributed job.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ...config.custom_heads import FlowFactoryModelOptions
from ...config.head_options import TORCH_DTYPE_NAMES
from ..models.base import HeadLoadError
from .api import HeadContext, Item, ItemScore
from .loading import class_names, import_class, require_torch
from .model import CustomHeadModel, plain

# Keywords the adapter fills itself; a metadata key of one of these names is not passed ("audio":
# Flow-Factory's audio input, which no gateway request carries).
_MEDIA_FIELDS = ("prompt", "image", "video", "audio", "condition_images", "condition_videos")


class FlowFactoryArgs:
    """What a Flow-Factory model reads of its `config` (RewardArguments' fields); unknown
    attributes fall back to `extra_kwargs`, as RewardArguments' do."""

    def __init__(self, name: str, reward_model: str, dtype: Any, device: Any, batch_size: int,
                 extra_kwargs: dict[str, Any]) -> None:
        self.name = name
        self.reward_model = reward_model
        self.weight = 1.0
        self.dtype = dtype
        self.device = device
        self.batch_size = batch_size
        self.async_reward = False
        self.num_workers = 1
        self.extra_kwargs = dict(extra_kwargs)

    def __getattr__(self, name: str) -> Any:
        extras = self.__dict__.get("extra_kwargs") or {}
        if name in extras:
            return extras[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def keys(self) -> list[str]:
        return ["name", "reward_model", "weight", "dtype", "device", "batch_size", "async_reward",
                "num_workers", *self.extra_kwargs]

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


class SingleProcessAccelerator:
    """The parts of accelerate.Accelerator a reward model reads, for one process."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.process_index = self.local_process_index = 0
        self.num_processes = 1
        self.is_main_process = self.is_local_main_process = True
        self.distributed_type = "NO"

    def wait_for_everyone(self) -> None:
        return None

    def unwrap_model(self, model: Any, *args: Any, **kwargs: Any) -> Any:
        return model

    def prepare(self, *objects: Any, **kwargs: Any) -> Any:
        return objects[0] if len(objects) == 1 else objects


class FlowFactoryScorer:
    """A Flow-Factory reward model behind the scorer interface (model.py)."""

    def __init__(self, cls: type, ref: str, context: HeadContext, params: dict[str, Any]) -> None:
        import torch

        bases = class_names(cls)
        if "GroupwiseRewardModel" in bases:
            self.groupwise = True
        elif "PointwiseRewardModel" in bases:
            self.groupwise = False
        else:
            raise HeadLoadError(f"{ref} is not a Flow-Factory PointwiseRewardModel or GroupwiseRewardModel "
                                f"(its classes: {', '.join(bases[:-1])})")
        self.torch = torch
        self.ref = ref
        device = torch.device(context.device)
        config = FlowFactoryArgs(context.name, ref, getattr(torch, TORCH_DTYPE_NAMES[context.dtype]), device,
                                 context.max_batch_size, params)
        try:
            self.model = cls(config=config, accelerator=SingleProcessAccelerator(device))
        except Exception as exc:
            raise HeadLoadError(f"{ref}(config, accelerator) failed: {type(exc).__name__}: {exc}") from exc
        self.tensors = bool(getattr(self.model, "use_tensor_inputs", False))
        self.device = getattr(self.model, "device", device)
        self.accepts, self.any_kwargs = _call_parameters(self.model)
        required = set(getattr(self.model, "required_fields", ()) or ())
        self.inputs = tuple(c for c in ("condition_images", "condition_videos")
                            if c in required or c in self.accepts)

    def load(self) -> dict[str, Any]:
        return {"model": self.ref, "flow_factory": "groupwise" if self.groupwise else "pointwise",
                "tensor_inputs": self.tensors}

    def score(self, items: Sequence[Item]) -> list[ItemScore]:
        results: list[ItemScore | None] = [None] * len(items)
        calls = [list(range(len(items)))] if self.groupwise else _by_medium(items)
        for idx in calls:
            batch = [items[i] for i in idx]
            if len({it.medium for it in batch}) > 1:
                raise ValueError("a group mixes images and videos; a Flow-Factory reward call takes one medium")
            for i, score in zip(idx, self._call(batch)):
                results[i] = score
        return [r for r in results if r is not None]

    def _call(self, batch: list[Item]) -> list[ItemScore]:
        fields = self._fields(batch)
        kwargs = {k: v for k, v in fields.items() if self.any_kwargs or k in self.accepts}
        with self.torch.no_grad():
            output = self.model(**kwargs)
        rewards = self.torch.as_tensor(getattr(output, "rewards", output), dtype=self.torch.float32).cpu()
        values = rewards.reshape(-1).tolist()
        if len(values) != len(batch):
            raise ValueError(f"{self.ref} returned {len(values)} rewards for {len(batch)} samples")
        extra = getattr(output, "extra_info", None)
        details = _per_sample(extra, len(batch)) if isinstance(extra, Mapping) else [{} for _ in batch]
        return [ItemScore(raw=v, details={"extra_info": d} if d else None) for v, d in zip(values, details)]

    def _fields(self, batch: list[Item]) -> dict[str, Any]:
        """The batch's keyword lists, each present only when every sample has it (as Flow-Factory's
        RewardProcessor drops a field some sample lacks)."""
        medium = batch[0].medium
        fields: dict[str, Any] = {"prompt": [it.prompt for it in batch]}
        if medium == "image":
            fields["image"] = [self._image(it.pixels) for it in batch]
        else:
            fields["video"] = [self._video(it.pixels) for it in batch]
        if "condition_images" in self.inputs and all(it.condition_images for it in batch):
            fields["condition_images"] = [self._images(it.condition_images) for it in batch]
        if "condition_videos" in self.inputs and all(it.condition_videos for it in batch):
            fields["condition_videos"] = [self._stacked([self._video(v) for v in it.condition_videos]) for it in batch]
        keys = set.intersection(*(set(it.metadata) for it in batch)) - set(_MEDIA_FIELDS)
        for key in sorted(keys):
            if all(it.metadata[key] is not None for it in batch):
                fields[key] = [it.metadata[key] for it in batch]
        return fields

    def _image(self, pixels: Any) -> Any:
        if not self.tensors:
            from PIL import Image

            return Image.fromarray(pixels.copy(), "RGB")
        t = self.torch.from_numpy(pixels.copy()).permute(2, 0, 1).float().div_(255.0)
        return t.to(self.device)

    def _video(self, frames: Any) -> Any:
        if not self.tensors:
            from PIL import Image

            return [Image.fromarray(f.copy(), "RGB") for f in frames]
        t = self.torch.from_numpy(frames.copy()).permute(0, 3, 1, 2).float().div_(255.0)
        return t.to(self.device)

    def _images(self, images: tuple[Any, ...]) -> Any:
        return self._stacked([self._image(im) for im in images])

    def _stacked(self, converted: list[Any]) -> Any:
        """A sample's condition media: tensors of one size stacked ([N, C, H, W] / [N, T, C, H, W]),
        as Flow-Factory stacks them; else the list."""
        if self.tensors and len({tuple(t.shape) for t in converted}) == 1:
            return self.torch.stack(converted)
        return converted


def _call_parameters(model: Any) -> tuple[set[str], bool]:
    """The keyword names `model.__call__` accepts, and whether it takes **kwargs."""
    params = inspect.signature(model.__call__).parameters.values()
    return ({p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)},
            any(p.kind == p.VAR_KEYWORD for p in params))


def _by_medium(items: Sequence[Item]) -> list[list[int]]:
    """Indices of a pointwise batch, split by medium (a call takes images or videos)."""
    groups: dict[str, list[int]] = {}
    for i, it in enumerate(items):
        groups.setdefault(it.medium, []).append(i)
    return list(groups.values())


def _per_sample(extra: Mapping[str, Any], n: int) -> list[dict[str, Any]]:
    """extra_info split per sample: a list of n values gives each sample its own, a scalar goes to
    all; anything else (a batch-level array) is left out."""
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, value in extra.items():
        value = plain(value)
        if isinstance(value, list) and len(value) == n:
            for d, v in zip(out, value):
                if _is_json(v):
                    d[str(key)] = v
        elif isinstance(value, (str, int, float, bool)):
            for d in out:
                d[str(key)] = value
    return out


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def build_flow_factory_head(kind: str, options: FlowFactoryModelOptions) -> CustomHeadModel:
    ref = options.class_path()

    def make(context: HeadContext) -> FlowFactoryScorer:
        require_torch("flow_factory_model")
        cls = import_class(ref, options.pythonpath)
        return FlowFactoryScorer(cls, ref, context, dict(options.params))

    return CustomHeadModel(kind, options, make, ref)
