"""The `videoalign` judge (cosmos-rl's `dance_grpo`): VideoAlign / VideoReward scores a whole
video: VQ, MQ, TA (z-normalised with the checkpoint's statistics) and raw = Overall = VQ+MQ+TA.

Frames are sampled at the fps the checkpoint was trained with (read from its model_config.json by
the worker and sent in its ready info), never at the trainer's video fps; `details` records the
frames actually sampled (source indices and timestamps), the fps sampled at and the source fps.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import numpy as np

from ...judges.base import JudgeFailure, ScoreContext, Verdict
from ...media import MediaError
from ...schema import ErrorCode
from ..judge import HeadJudge
from ..supervisor import HeadError
from .config import sample_video_frames

if TYPE_CHECKING:
    from ...schema import SampleInput


class VideoAlignJudge(HeadJudge):
    async def evaluate(self, sample: "SampleInput", ctx: ScoreContext) -> Verdict:
        if sample.video is None:
            raise JudgeFailure(ErrorCode.bad_input, "videoalign needs a video")
        if not sample.prompt.strip():
            raise JudgeFailure(ErrorCode.bad_input, "videoalign needs the sample's prompt")
        try:
            await self.worker.wait_ready()
        except HeadError as exc:
            raise JudgeFailure(ErrorCode.head_error, str(exc)) from None
        sampling = self.worker.info.get("sampling")
        if not isinstance(sampling, dict):
            raise JudgeFailure(ErrorCode.head_error, f"head {self.name!r} did not report its frame sampling")
        try:
            frames, facts = await asyncio.to_thread(self._sample, sample, sampling)
        except MediaError as exc:
            raise JudgeFailure(ErrorCode.bad_input, str(exc)) from None
        try:
            outputs = await self.worker.infer(frames, sample.prompt)
        except HeadError as exc:
            raise JudgeFailure(ErrorCode.head_error, str(exc), details=facts) from None
        out = outputs[0]
        details = {**facts, "vq": out["vq"], "mq": out["mq"], "ta": out["ta"], "overall": out["overall"],
                   "raw_vq": out["raw_vq"], "raw_mq": out["raw_mq"], "raw_ta": out["raw_ta"],
                   "frame_height": out["height"], "frame_width": out["width"],
                   "normalized": bool(self.worker.info.get("normalized"))}
        details |= self._model_facts()
        return Verdict(raw=float(out["overall"]), details=details)

    def _sample(self, sample: "SampleInput", sampling: dict[str, Any]) -> tuple[np.ndarray, dict[str, Any]]:
        video = sample.video
        assert video is not None
        idx, fps = sample_video_frames(video.num_frames, video.fps, sampling.get("fps"), sampling.get("num_frames"))
        frames = video.frames_array(idx)
        return frames, {"media": "video", "frames": len(idx), "frame_indices": idx,
                        "frame_times_s": [round(i / video.fps, 6) for i in idx],
                        "sampled_fps": round(fps, 6), "source_fps": video.fps,
                        "source_frames": video.num_frames, "checkpoint_fps": sampling.get("fps"),
                        "checkpoint_num_frames": sampling.get("num_frames"),
                        "max_frame_pixels": sampling.get("max_frame_pixels")}
