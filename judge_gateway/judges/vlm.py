"""What every VLM judge shares: a pinned template, a backend pool, media encoded once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from ..backends import BackendPool
from ..bands import DEFAULT_VIDEO_BANDS
from ..config import JudgeConfig, VLMOptions
from ..media import ImageEncoding, VideoSampling
from ..prompts import Template, load_template
from ..schema import ErrorCode, JudgeScore, TemplateRef
from .base import Judge, JudgeFailure, ScoreContext

# Media facts and the reply text are the primary's to report; the shadow keeps its numbers.
_SHADOW_DROP = frozenset({"image", "video", "condition_images", "condition_videos", "reply"})

if TYPE_CHECKING:
    from ..residency import ResidencyUnit
    from ..schema import SampleInput


class VLMJudge(Judge):
    """A judge that asks a served VLM through a versioned prompt template."""

    def __init__(self, name: str, cfg: JudgeConfig, pool: BackendPool) -> None:
        super().__init__(name, cfg)
        assert cfg.template is not None
        self.template: Template = load_template(cfg.template, cfg.template_dirs)
        self.pool = pool
        self._template_ref = TemplateRef(
            id=self.template.id, version=self.template.version, sha256=self.template.sha256
        )
        self.image_encoding = ImageEncoding(**cfg.image.model_dump(exclude={"data_url_mime"}))
        self.data_url_mime = cfg.image.data_url_mime
        self.video_sampling = VideoSampling(**{**cfg.video.model_dump(), "codec": self._video_codec(cfg, pool)})
        assert isinstance(cfg.options, VLMOptions)  # typed at config load (config.kinds)
        self.video_first_frame = cfg.options.video_first_frame and (
            "image" in self.template.media_slots
        )
        # Shadow scoring: the same judge with a candidate template, reported in details only.
        self.shadow: VLMJudge | None = None
        shadow_ref = cfg.options.shadow_template
        if shadow_ref:
            options = cfg.options.model_copy(update={"shadow_template": None})
            self.shadow = type(self)(name, cfg.model_copy(update={"template": shadow_ref, "options": options}), pool)

    def use_residency(self, unit: "ResidencyUnit") -> None:
        super().use_residency(unit)
        if self.shadow is not None:  # its calls go to the same servers: they wait for the same wake
            self.shadow.use_residency(unit)

    def _video_codec(self, cfg: JudgeConfig, pool: BackendPool) -> str:
        """codec "auto": a JPEG frame list where the backend takes one (its media_io_kwargs carry one
        rate per request, so only for a template with one video slot), else Motion JPEG in mp4."""
        if cfg.video.codec != "auto":
            return cfg.video.codec
        videos = sum(slot in ("video", "condition_video") for slot in self.template.media_slots)
        return "jpeg_frames" if pool.cfg.takes_jpeg_frames() and videos == 1 else "auto"

    def bands_for(self, details: dict[str, Any]) -> dict[str, float]:
        """The configured bands, else High/Medium/Low where the judge saw a video (its reward is
        in [0, 1], which the default bounds assume), none for an image."""
        if self.cfg.bands is not None:
            return self.cfg.bands
        return DEFAULT_VIDEO_BANDS if "video" in details else {}

    async def score(self, sample: "SampleInput", ctx: ScoreContext) -> JudgeScore:
        if self.shadow is None:
            return await super().score(sample, ctx)
        primary, shadow = await asyncio.gather(super().score(sample, ctx), self.shadow.score(sample, ctx))
        primary.details["shadow"] = {
            "template": shadow.template.model_dump() if shadow.template else None,
            "reward": shadow.reward,
            "raw": shadow.raw,
            "valid": shadow.valid,
            "error": shadow.error.model_dump(mode="json") if shadow.error else None,
            "latency_ms": shadow.latency_ms,
            "details": {k: v for k, v in shadow.details.items() if k not in _SHADOW_DROP},
        }
        return primary

    @property
    def model(self) -> str:
        return self.pool.model

    @property
    def template_ref(self) -> TemplateRef:
        return self._template_ref

    @property
    def media(self) -> tuple[str, ...]:
        slots = tuple(dict.fromkeys(self.template.media_slots))
        if self.video_first_frame and "video" not in slots:
            slots += ("video",)  # an image or, failing that, a video's first frame
        return slots

    @property
    def backend_name(self) -> str:
        return self.pool.name

    def backend_calls(self, samples: Sequence["SampleInput"]) -> int:
        """The most calls scoring `samples` sends the backend (admission holds that many of its
        slots): one per sample, two with a shadow template."""
        return len(samples) * (2 if self.shadow is not None else 1)

    async def probe(self) -> tuple[bool, str | None]:
        return await self.pool.probe()

    def media_affinity(self, sample: "SampleInput", ctx: ScoreContext) -> int | None:
        """The key of the medium this judge asks about (its image, else its video), for the
        backend to send every judge of that medium to one replica (backends.BackendPool)."""
        slots = self.template.media_slots
        medium = sample.image if "image" in slots and sample.image is not None else sample.video
        return ctx.media.affinity(medium) if medium is not None else None

    async def _conditions(self, given: list[Any], needed: int, what: str,
                          encode: Callable[[Any], Awaitable[Any]]) -> list[Any]:
        """The first `needed` condition media of a sample, encoded (a shortfall is bad input)."""
        if len(given) < needed:
            raise JudgeFailure(ErrorCode.bad_input,
                               f"judge {self.name!r} needs {needed} condition {what}; the sample has {len(given)}")
        return list(await asyncio.gather(*(encode(m) for m in given[:needed])))

    def _image_url(self, data_url: str) -> str:
        """The encoded image's data URL, naming `image.data_url_mime` when the config sets one."""
        if self.data_url_mime is None:
            return data_url
        return f"data:{self.data_url_mime};base64," + data_url.split(",", 1)[1]

    async def build_messages(self, sample: "SampleInput", ctx: ScoreContext) -> tuple[list[dict], dict[str, Any]]:
        """The chat messages for one sample, and the media facts for `details`."""
        parts, facts = await self.media_parts(sample, ctx)
        return self.template.render(sample.prompt, parts), facts

    async def media_parts(self, sample: "SampleInput", ctx: ScoreContext) -> tuple[dict[str, list[dict]], dict[str, Any]]:
        """The content parts of the template's media slots for one sample (each medium encoded once
        per request), and the media facts for `details`: render them once per question."""
        parts: dict[str, list[dict]] = {}
        facts: dict[str, Any] = {}
        slots = self.template.media_slots
        if "image" in slots:
            if sample.image is not None:
                enc = await ctx.media.image(sample.image, self.image_encoding)
                facts["image"] = enc.details()
            elif self.video_first_frame and sample.video is not None:
                enc = await ctx.media.first_frame(sample.video, self.image_encoding)
                facts["image"] = {**enc.details(), "from_video_frame": 0}
            else:
                alternative = " (or a video, scored by its first frame)" if self.video_first_frame else ""
                raise JudgeFailure(ErrorCode.bad_input,
                                   f"judge {self.name!r} needs an image for each sample{alternative}")
            parts["image"] = [{"type": "image_url", "image_url": {"url": self._image_url(enc.data_url)}}]
        if "condition_image" in slots:
            encoded = await self._conditions(sample.condition_images, slots.count("condition_image"),
                                             "image(s) (the source image of an edit)",
                                             lambda img: ctx.media.image(img, self.image_encoding))
            parts["condition_image"] = [{"type": "image_url", "image_url": {"url": self._image_url(e.data_url)}}
                                        for e in encoded]
            facts["condition_images"] = [e.details() for e in encoded]
        if "condition_video" in slots:
            encoded = await self._conditions(sample.condition_videos, slots.count("condition_video"),
                                             "video(s) (the source video of a video edit)",
                                             lambda v: ctx.media.video(v, self.video_sampling))
            parts["condition_video"] = [{"type": "video_url", "video_url": {"url": e.data_url}} for e in encoded]
            facts["condition_videos"] = [{**e.details(), "sampling": asdict(self.video_sampling)} for e in encoded]
        if "video" in slots:
            if sample.video is None:
                raise JudgeFailure(ErrorCode.bad_input, f"judge {self.name!r} needs a video for each sample")
            enc_v = await ctx.media.video(sample.video, self.video_sampling)
            parts["video"] = [{"type": "video_url", "video_url": {"url": enc_v.data_url}}]
            facts["video"] = {**enc_v.details(), "sampling": asdict(self.video_sampling)}
        return parts, facts


def media_body(facts: dict[str, Any]) -> dict[str, Any]:
    """The request body's fields a sample's media need besides the messages (`extra_body`): a JPEG
    frame list's rate and frame count as vLLM's `media_io_kwargs` (one per modality: the config
    refuses jpeg_frames on a template with several video slots). Read from the media facts, where
    `EncodedVideo.details()` records them."""
    videos = [facts.get("video"), *(facts.get("condition_videos") or [])]
    for video in videos:
        if isinstance(video, dict) and video.get("media_io_kwargs"):
            return {"media_io_kwargs": {"video": dict(video["media_io_kwargs"])}}
    return {}
