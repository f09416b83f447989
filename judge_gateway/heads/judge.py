"""Head judges: the Judge kind that scores a sample with a local head worker.

Images are scored as one frame; videos as frames sampled by `video.num_frames` / `video.fps`
(and `video.max_frames`), whose per-frame scores are pooled by `options.pooling`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import HeadOptions, JudgeConfig, NormalizeConfig
from ..media import MediaError, VideoSampling, sample_frame_indices
from ..schema import ErrorCode
from ..judges.base import Judge, JudgeFailure, ScoreContext, Verdict
from ..judges.queue import JudgeQueue
from .ocr_text import REFERENCE_BLANK_REWARD, extract_target_text, is_blank_target, ocr_reward
from .pooling import pool_scores
from .supervisor import HeadError, HeadSupervisor

if TYPE_CHECKING:
    from ..schema import SampleInput
    from .residency import HeadSleepDriver


class HeadJudge(Judge):
    _nonfinite_code = ErrorCode.head_error

    def __init__(self, name: str, cfg: JudgeConfig) -> None:
        super().__init__(name, cfg)
        assert isinstance(cfg.options, HeadOptions)  # typed at config load (config.kinds)
        self.options: HeadOptions = cfg.options
        self.worker = HeadSupervisor(name, cfg.kind, self.options)
        v = cfg.video
        # Heads score frames independently: no even-frame rule (that is Qwen-VL's temporal patch).
        self.sampling = VideoSampling(num_frames=v.num_frames, fps=v.fps, max_frames=v.max_frames,
                                      even_frames=False)
        self.queue = JudgeQueue(name, self.options.max_queue_items, self.options.max_queue_pixels)

    def demand(self, sample: "SampleInput") -> tuple[int, int]:
        """The frames this head is sent for the sample (an image is one), and their pixels."""
        if sample.image is not None:
            return 1, sample.image.width * sample.image.height
        if sample.video is not None:
            video = sample.video
            try:
                n = len(sample_frame_indices(video.num_frames, video.fps, self.sampling)[0])
            except MediaError:  # the cell says why; it sends nothing
                return 0, 0
            return n, n * video.width * video.height
        return 0, 0

    @property
    def model(self) -> str | None:
        return self.worker.info.get("model") or getattr(self.options, "model", None) or self.kind

    @property
    def media(self) -> tuple[str, ...]:
        return self.cfg.kind_spec.media

    async def probe(self) -> tuple[bool, str | None]:
        missing = self.options.missing_local_weights()
        if missing is not None:  # it can never load: no worker is started for it
            return False, f"failed: {missing}"
        return await self.worker.probe()

    def residency_driver(self) -> "HeadSleepDriver":
        from .residency import HeadSleepDriver

        assert isinstance(self.worker, HeadSupervisor), "colocated heads run on this machine (not Ray Serve)"
        return HeadSleepDriver(self.worker)

    async def check(self) -> tuple[bool, str | None]:
        missing = self.options.missing_local_weights()
        if missing is not None:
            return False, f"failed: {missing}"
        try:
            await self.worker.wait_ready()
        except HeadError as exc:
            return False, str(exc)
        return True, None

    async def aclose(self) -> None:
        await self.worker.aclose()

    async def evaluate(self, sample: "SampleInput", ctx: ScoreContext) -> Verdict:
        """Score the image or the sampled frames. A head's output per item is {"raw": float}
        (OCR: {"lines": ...}), optionally with a "details" dict that goes into the score's details
        (per frame, as `frame_details`, for a video)."""
        target = self._target(sample)
        if sample.image is not None and sample.image.decoded:
            # No decode to do: stay on the loop, so a request's samples reach the worker's sender
            # in the same loop turn and go out as one frame (a thread hop each would scatter them).
            frames, facts = self._frames(sample)
        else:
            frames, facts = await asyncio.to_thread(self._frames, sample)
        try:
            outputs = await self.worker.infer(frames, sample.prompt)
        except HeadError as exc:
            # worker_crashed: it respawns, so a caller that re-scores (cosmos-rl) may try again
            raise JudgeFailure(ErrorCode.head_error, str(exc),
                               details={**facts, "worker_crashed": True} if exc.crashed else facts) from None
        values, details = self._per_frame(outputs, target, facts)
        if len(values) > 1:
            details |= {"frame_scores": values, "pooling": self.options.pooling}
            if self.options.pooling == "topk_mean":
                details["top_k"] = self.options.top_k
        try:
            raw = pool_scores(values, self.options.pooling, self.options.top_k)
        except ValueError as exc:
            raise JudgeFailure(ErrorCode.head_error, f"head {self.name!r}: {exc}", details=details) from None
        details |= self._model_facts()
        return Verdict(raw=raw, details=details, default_normalize=self._default_normalize())

    def _default_normalize(self) -> NormalizeConfig | None:
        return self.options.default_normalize()

    def _target(self, sample: "SampleInput") -> Any:
        """What the head scores the media against, read from the sample: its prompt."""
        if not sample.prompt.strip():
            raise JudgeFailure(ErrorCode.bad_input, f"{self.kind} needs the sample's prompt")
        return None

    def _per_frame(self, outputs: list[dict[str, Any]], target: Any,
                   facts: dict[str, Any]) -> tuple[list[float], dict[str, Any]]:
        """The head's score per item, and the details to report."""
        values = [float(out["raw"]) for out in outputs]
        details = dict(facts)
        # Model-specific facts a head reports per item (e.g. HPSv3's sigma).
        extra = [out.get("details") for out in outputs]
        if any(extra):
            if len(extra) == 1:
                details |= extra[0]
            else:
                details["frame_details"] = extra
        return values, details

    def _model_facts(self) -> dict[str, Any]:
        info = {k: v for k, v in self.worker.info.items() if k not in ("model", "pid", "package")}
        return {"head": info, "device": self.options.device, "dtype": self.options.dtype}

    def _frames(self, sample: "SampleInput") -> tuple[np.ndarray, dict[str, Any]]:
        if sample.image is not None:
            arr = sample.image.to_array()
            return arr[None], {"media": "image", "width": arr.shape[1], "height": arr.shape[0]}
        if sample.video is not None:
            video = sample.video
            idx, fps = sample_frame_indices(video.num_frames, video.fps, self.sampling)
            frames = video.frames_array(idx)
            return frames, {"media": "video", "frames": len(idx), "frame_indices": idx,
                            "sampled_fps": round(fps, 4), "source_fps": video.fps}
        raise JudgeFailure(ErrorCode.bad_input, f"{self.kind} needs an image or a video")


class OcrJudge(HeadJudge):
    """OCR: the reward is how much of the prompt's quoted target text the head recognised."""

    def _target(self, sample: "SampleInput") -> str:
        target = extract_target_text(sample.prompt)
        if target is None:
            raise JudgeFailure(ErrorCode.not_applicable, "the prompt has no quoted target text for the OCR reward")
        if is_blank_target(target):
            # cosmos-rl's OCR reward scores an empty target 1.0 (it is in any text): no measurement,
            # so invalid here; `reference_reward` is that number for the legacy key that reports it.
            raise JudgeFailure(ErrorCode.not_applicable, "the prompt's quoted target text is blank",
                               details={"target": target, "reference_reward": REFERENCE_BLANK_REWARD})
        return target

    def _per_frame(self, outputs: list[dict[str, Any]], target: str,
                   facts: dict[str, Any]) -> tuple[list[float], dict[str, Any]]:
        per_frame = [ocr_reward(target, out.get("lines", [])) for out in outputs]
        values = [r for r, _ in per_frame]
        details = {**facts, **per_frame[0][1]} if len(per_frame) == 1 else {
            **facts, "target": target, "recognized": [d["recognized"] for _, d in per_frame]}
        return values, details
