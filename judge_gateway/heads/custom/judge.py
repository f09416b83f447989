"""Gateway side of a brought head (kinds custom, flow_factory_model, cosmos_rl_handler): a sample
goes to the worker whole, as one item (its image, or its video's frames sampled per the judge's
`video` table, with its prompt, metadata, group id and the condition media the head takes).

The head's class says, once loaded (the worker's ready info), whether it is groupwise. A groupwise
head scores each group of a request (samples sharing a group_id) in one call: the first of the
group's cells to run sends the whole group, the others wait for its result. A member that cannot be
read fails its whole group with the reason (a group reward over part of a group would be a
different number). Without a group_id a sample cannot be scored by a groupwise head.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import numpy as np

from ...config import ImportedHeadOptions, JudgeConfig
from ...judges.base import JudgeFailure, ScoreContext, SharedTask, Verdict
from ...media import sample_frame_indices
from ...schema import ErrorCode
from ..judge import HeadJudge
from ..protocol import HeadItem
from ..supervisor import HeadError

if TYPE_CHECKING:
    from ...media import VideoMedia
    from ...schema import SampleInput

# A sample's metadata travels in a frame's JSON header (heads/supervisor.py splits frames before
# their headers pass HEADER_BUDGET_BYTES): bounded per sample, so one always fits.
MAX_METADATA_BYTES = 1 << 20
MAX_GROUP_METADATA_BYTES = 6 << 20  # a group is one job: its description must fit one header


class CustomJudge(HeadJudge):
    def __init__(self, name: str, cfg: JudgeConfig) -> None:
        super().__init__(name, cfg)
        assert isinstance(cfg.options, ImportedHeadOptions)  # typed at config load (config.kinds)
        self.custom: ImportedHeadOptions = cfg.options

    @property
    def media(self) -> tuple[str, ...]:
        return tuple(self.custom.media)

    @property
    def model(self) -> str | None:
        return self.worker.info.get("model") or self.custom.class_path()

    async def evaluate(self, sample: "SampleInput", ctx: ScoreContext) -> Verdict:
        try:
            await self.worker.wait_ready()  # its ready info says groupwise and which conditions
        except HeadError as exc:
            raise JudgeFailure(ErrorCode.head_error, str(exc)) from None
        if self.worker.info.get("groupwise"):
            output, facts = await self._in_group(sample, ctx)
        else:
            item, facts = await self._prepared(sample)
            output = (await self._infer([item]))[0]
        return self._verdict(output, facts)

    # -- one sample ------------------------------------------------------------------------------
    async def _prepared(self, sample: "SampleInput") -> tuple[HeadItem, dict[str, Any]]:
        if sample.image is not None and sample.image.decoded and not sample.condition_images and not sample.condition_videos:
            return self._item(sample)  # no decode to do: stay on the loop (one frame per request)
        return await asyncio.to_thread(self._item, sample)

    def _item(self, sample: "SampleInput") -> tuple[HeadItem, dict[str, Any]]:
        takes = self.media
        if sample.image is not None and "image" in takes:
            arr = sample.image.to_array()
            frames, medium, fps = arr[None], "image", None
            facts: dict[str, Any] = {"media": "image", "width": arr.shape[1], "height": arr.shape[0]}
        elif sample.video is not None and "video" in takes:
            frames, fps, facts = self._video(sample.video)
            medium = "video"
        else:
            have = "an image" if sample.image is not None else "a video" if sample.video is not None else "no image or video"
            want = " or ".join(m for m in takes if m in ("image", "video"))
            raise JudgeFailure(ErrorCode.bad_input, f"judge {self.name!r} scores a sample's {want}; this sample has {have}")
        wants = set(self.worker.info.get("conditions") or ())
        cond_images, cond_videos = [], []
        if "condition_image" in takes and not sample.condition_images:
            raise JudgeFailure(ErrorCode.bad_input, f"judge {self.name!r} needs the sample's condition_images")
        if "condition_video" in takes and not sample.condition_videos:
            raise JudgeFailure(ErrorCode.bad_input, f"judge {self.name!r} needs the sample's condition_videos")
        if "condition_image" in takes or "condition_images" in wants:
            cond_images = [c.to_array()[None] for c in sample.condition_images]
        if "condition_video" in takes or "condition_videos" in wants:
            cond_videos = [self._video(v)[0] for v in sample.condition_videos]
        if cond_images or cond_videos:
            facts["conditions"] = {"images": len(cond_images), "videos": len(cond_videos)}
        try:
            size = len(json.dumps(sample.metadata))
        except (TypeError, ValueError) as exc:
            raise JudgeFailure(ErrorCode.bad_input, f"the sample's metadata is not JSON: {exc}") from None
        if size > MAX_METADATA_BYTES:
            raise JudgeFailure(ErrorCode.bad_input, f"the sample's metadata is {size} B of JSON; a brought head "
                               f"takes at most {MAX_METADATA_BYTES} B per sample")
        return HeadItem(sample.prompt, medium, frames, fps, dict(sample.metadata), sample.group_id,
                        cond_images, cond_videos), facts

    def _video(self, video: "VideoMedia") -> tuple[np.ndarray, float, dict[str, Any]]:
        idx, fps = sample_frame_indices(video.num_frames, video.fps, self.sampling)
        return video.frames_array(idx), fps, {"media": "video", "frames": len(idx), "frame_indices": idx,
                                              "sampled_fps": round(fps, 4), "source_fps": video.fps}

    async def _infer(self, items: list[HeadItem]) -> list[dict[str, Any]]:
        try:
            return await self.worker.infer_items(items)
        except HeadError as exc:
            raise JudgeFailure(ErrorCode.head_error, str(exc),
                               details={"worker_crashed": True} if exc.crashed else None) from None

    def _verdict(self, output: dict[str, Any], facts: dict[str, Any]) -> Verdict:
        details = {**facts, **(output.get("details") or {})}
        if "error" in output:
            raise JudgeFailure(ErrorCode.head_error, f"{self.custom.class_path()}: {output['error']}",
                               details=details | self._model_facts())
        raw = output.get("raw")
        if not isinstance(raw, (int, float)) or isinstance(raw, bool):
            raise JudgeFailure(ErrorCode.head_error, f"{self.custom.class_path()} returned {raw!r}, not a number")
        return Verdict(raw=float(raw), details=details | self._model_facts(),
                       default_normalize=self._default_normalize())

    # -- groups ----------------------------------------------------------------------------------
    async def _in_group(self, sample: "SampleInput", ctx: ScoreContext) -> tuple[dict[str, Any], dict[str, Any]]:
        if sample.group_id is None:
            raise JudgeFailure(ErrorCode.bad_input, f"judge {self.name!r} is groupwise ({self.custom.class_path()} "
                               "scores whole groups): the sample needs a group_id (Flow-Factory: a groupwise profile)")
        members = [s for s in ctx.samples if s.group_id == sample.group_id] or [sample]
        index = next((i for i, s in enumerate(members) if s is sample), None)
        if index is None:  # a sample outside the request's list: a group of its own
            members, index = [sample], 0
        key = (self.name, sample.group_id)
        shared = ctx.shared.get(key)
        if shared is None:
            shared = ctx.shared[key] = SharedTask(asyncio.ensure_future(self._score_group(members)))
        outputs, facts = await shared.wait()
        group = {"group_id": sample.group_id, "group_size": len(members), "group_index": index}
        return outputs[index], {**facts[index], **group}

    async def _score_group(self, members: list["SampleInput"]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        def prepare() -> list[tuple[HeadItem, dict[str, Any]]]:
            prepared = []
            for i, member in enumerate(members):
                try:
                    prepared.append(self._item(member))
                except JudgeFailure as exc:
                    raise JudgeFailure(exc.code, f"group {member.group_id!r}: its member {i} (of {len(members)}) "
                                       f"cannot be scored ({exc.message}); a groupwise reward scores whole "
                                       "groups") from None
            return prepared

        described = sum(len(json.dumps(m.metadata)) for m in members)
        if described > MAX_GROUP_METADATA_BYTES:
            raise JudgeFailure(ErrorCode.bad_input, f"group {members[0].group_id!r}: its samples' metadata is "
                               f"{described} B of JSON; a group sent to a groupwise head takes at most "
                               f"{MAX_GROUP_METADATA_BYTES} B")
        prepared = await asyncio.to_thread(prepare)
        outputs = await self._infer([item for item, _ in prepared])
        return outputs, [facts for _, facts in prepared]
