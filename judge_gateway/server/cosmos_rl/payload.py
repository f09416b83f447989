"""cosmos-rl enqueue payloads -> a validated `Prepared` request, refused before a uuid is given.

The reward names resolve to configured judges that can score now; the tensor is loaded (npy here,
torch-saved bytes in the torch worker) and checked against the media type, the batch, the prompts,
the frame rates and the [media] size limits. latent_attr's form fields are checked here too.
`device_plan` says which frames of decoded latents the latent worker keeps, and at what size.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ...exceptions import Unavailable
from ...gateway import Gateway
from ...judges.vlm import VLMJudge
from ...json_body import JSONBodyError, parse_json
from ...latents import LatentDecoderError, LatentDecoderSupervisor
from ...media import MAX_FPS, ImageMedia, MediaError, VideoMedia, VideoSampling, sample_frame_indices
from ...media.sampling import _frame_size
from ...config import (
    WAN_CHANNELS,
    WAN_NAMES,
    CosmosReward,
    CosmosRLConfig,
    LegacyKey,
)
from ...schema import SampleInput
from ..ignored import IgnoredFields
from .tensors import (
    EnqueueMeta,
    PayloadError,
    check_enqueue_limits,
    check_image,
    check_latent,
    check_video,
    decoded_video_shape,
    input_info,
    load_npy,
    parse_meta,
    sniff,
    split_body,
)


# ---- decoded latents: the judges' frames only, sampled and resized on the decoder's device ----
# When every judge of the request that looks at the video is a VLM judge sampling it the same way
# (one VideoSampling, the video slot of its template), the latent worker keeps those frames at
# that size right after the VAE decode: an 81-frame 720p clip (224 MB of pixels) crosses the pipe
# and the gateway's memory as the ~21 MB the judge sees. A head, a first-frame fallback or two
# samplings need the full clip, which the worker then sends as before.

# details.video.resampler of frames resized by the latent worker
DEVICE_RESAMPLER = "device"


@dataclass(frozen=True)
class DevicePlan:
    """Per sample, the source frames to keep; the size to resize them to (None: as decoded)."""

    frames: list[list[int]]
    size: tuple[int, int] | None
    source_frames: int
    source_width: int
    source_height: int


def device_plan(gateway: Gateway, judges: list[str], fps: list[float], frames: int, width: int,
                height: int) -> DevicePlan | None:
    """The plan for B decoded clips of `frames` x `height` x `width` at `fps` (one rate per sample)
    scored by `judges`, or None when the full clips are needed."""
    samplings: set[VideoSampling] = set()
    for name in judges:
        judge = gateway.judges[name]
        if "video" not in judge.media:
            continue  # this judge does not look at videos (its cells are bad_input either way)
        if not isinstance(judge, VLMJudge) or "video" not in judge.template.media_slots or judge.video_first_frame:
            return None  # a head, or a VLM judge taking the first frame: the full clip
        # the frames and size kept depend on the sampling, not on how the judge's backend takes them
        samplings.add(replace(judge.video_sampling, codec="auto"))
    if len(samplings) != 1:
        return None
    (sampling,) = samplings
    kept = [sample_frame_indices(frames, rate, sampling)[0] for rate in fps]
    if len({len(k) for k in kept}) != 1:
        return None  # rates that keep different counts: one tensor cannot hold them
    w, h, resized = _frame_size(width, height, len(kept[0]), sampling)
    if kept[0] == list(range(frames)) and not resized:
        return None  # every frame at its size: nothing to save
    return DevicePlan(frames=kept, size=(w, h) if resized else None, source_frames=frames,
                      source_width=width, source_height=height)


def latents_plan(gateway: Gateway, p: Prepared, judges: list[str]) -> DevicePlan | None:
    """device_plan for a request's latents (a video with its rates), else None."""
    if p.latents is None or p.medium != "video" or p.fps is None:
        return None
    _, frames, height, width = decoded_video_shape(p.latents.shape)
    return device_plan(gateway, judges, p.fps, frames, width, height)


@dataclass
class Prepared:
    """A validated enqueue: everything the background task needs."""

    meta: EnqueueMeta
    rewards: dict[str, CosmosReward]
    skipped: list[str]
    medium: str  # "image" | "video"
    pixels: np.ndarray | None  # [B,H,W,3] images or [B,T,H,W,3] videos
    latents: np.ndarray | None  # float32 [B,C,T,H,W]
    fps: list[float] | None
    info: dict[str, Any]
    batch: int
    extra_meta: list[dict[str, Any]] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # request fields nothing here uses
    notes: dict[str, list[str]] = field(default_factory=dict)  # reward -> what its envelope reports


# The GenEval fields a gen_eval judge reads per sample (heads/geneval/judge.py).
GENEVAL_FIELDS = ("geneval_tags", "geneval_includes", "geneval_only_strict")
# The reward service README's GenEval body (its "Image (GenEval)" example up to 28d72cf6: `prompt`,
# `tag`, `include`, one image) -> the code's per-sample names.
README_GENEVAL = {"tag": "geneval_tags", "include": "geneval_includes"}


def readme_geneval_fields(extra: dict[str, Any], batch: int) -> None:
    """Rewrite the README's `tag` (one tag, or one per sample) and `include` (one image's list of
    {class, count, color?, position?}, or one list per sample) as `geneval_tags` /
    `geneval_includes`, one entry per sample; both spellings of one field is refused."""
    for readme, code in README_GENEVAL.items():
        if readme not in extra:
            continue
        if code in extra:
            raise PayloadError(f"the JSON line has both `{readme}` (the README's GenEval field) and `{code}`: send one")
        value = extra.pop(readme)
        if readme == "tag":
            if isinstance(value, str):
                value = [value] * batch
            elif not (isinstance(value, list) and len(value) == batch and all(isinstance(t, str) for t in value)):
                raise PayloadError(f"`tag` must be a GenEval tag (for every sample) or a list of {batch} tags")
        else:
            if isinstance(value, list) and all(isinstance(inc, dict) for inc in value):
                value = [value] * batch  # one image's include list, as the README sends it
            elif not (isinstance(value, list) and len(value) == batch and all(isinstance(v, list) for v in value)):
                raise PayloadError(f"`include` must be a list of {{class, count, ...}} objects (for every sample) "
                                   f"or a list of {batch} such lists")
        extra[code] = value


class JudgeUnready(Unavailable):
    """A reward's judge (or the latent decoder) cannot score now. 424 when it failed to load:
    cosmos-rl's trainer gives up on a 4xx at once, with this message, instead of training on fills;
    503 (+ Retry-After) while a VLM backend is unreachable: the trainer retries with backoff."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class PayloadChecks:
    """Everything an enqueue (or a latent_attr) is checked against: the gateway's judges, the
    cosmos_rl section, the torch worker (None without cosmos_rl.latents.python)."""

    def __init__(self, gateway: Gateway, cfg: CosmosRLConfig, worker: LatentDecoderSupervisor | None) -> None:
        self.gateway = gateway
        self.cfg = cfg
        self.worker = worker
        self.ignored = IgnoredFields(gateway.metrics, "cosmos_rl")
        self._readiness: dict[str, tuple[float, bool, str | None]] = {}  # judge -> (probed at, ok, reason)
        self._failed_heads: dict[str, str] = {}  # head -> why its last load failed, until it is ready

    # ---- reward names ----------------------------------------------------------------------

    def resolve(self, name: str) -> CosmosReward:
        mapping = self.cfg.rewards.get(name)
        if mapping is None:
            if name in self.gateway.judges:  # any configured judge by its own name
                return CosmosReward(judge=name, keys={name: LegacyKey(source="reward")})
            raise PayloadError(
                f"unknown reward {name!r}: not a cosmos-rl reward name ({', '.join(sorted(self.cfg.rewards))}) "
                f"nor a configured judge ({', '.join(self.gateway.judges) or 'none'})"
            )
        if mapping.judge not in self.gateway.judges:
            raise PayloadError(f"reward {name!r} is not configured on this gateway (it needs judge {mapping.judge!r})")
        return mapping

    def media_of(self, reward: CosmosReward) -> set[str]:
        """The media a reward can score (heads take images or videos; VLM judges what their template has)."""
        if reward.media:
            return {reward.media}
        return {m for m in self.gateway.judges[reward.judge].media if m in ("image", "video")} or {"image"}

    async def _check_ready(self, rewards: dict[str, CosmosReward]) -> None:
        """Refuse, before a uuid is given, rewards whose judge cannot score now (see JudgeUnready)."""
        for name, reward in rewards.items():
            judge = self.gateway.judges[reward.judge]
            now = time.monotonic()
            cached = self._readiness.get(reward.judge)
            if cached is None or now - cached[0] > self.gateway.config.server.readiness_interval_s:
                ok, reason = await judge.probe()
                cached = self._readiness[reward.judge] = (now, ok, reason)
            _, ok, reason = cached
            if ok:
                self._failed_heads.pop(reward.judge, None)
                continue
            why = f"reward {name!r} cannot be scored now: judge {reward.judge!r} is not ready ({reason})"
            if judge.backend_name is not None:  # a VLM backend: it may be starting; the client retries
                raise JudgeUnready(why + "; retry when its vLLM server is up", 503)
            if (reason or "").startswith("failed"):  # a head that could not load: retrying will not help
                self._failed_heads[reward.judge] = reason or "failed"
            elif reward.judge in self._failed_heads:  # it failed before and is retrying its load now
                why = (f"reward {name!r} cannot be scored now: judge {reward.judge!r} failed to load "
                       f"({self._failed_heads[reward.judge]}) and is retrying")
            else:  # loading for the first time: no uuid until it has loaded (or failed)
                ok, why = await self._wait_loaded(name, reward.judge, judge)
                if ok:
                    continue
            raise JudgeUnready(why + "; fix the judge's model files (see /readyz) and restart or retry later", 424)

    async def _wait_loaded(self, name: str, judge_name: str, judge: Any) -> tuple[bool, str]:
        """Wait up to cosmos_rl.load_wait_s for a head's first load: (True, "") once it is ready,
        (False, why) when it failed (424 then); JudgeUnready 503 (+ Retry-After, which cosmos-rl's
        trainer retries) while it is still loading."""
        try:
            async with asyncio.timeout(self.cfg.load_wait_s):
                ok, reason = await judge.check()
        except TimeoutError:
            raise JudgeUnready(f"reward {name!r} cannot be scored yet: judge {judge_name!r} is still loading its "
                               f"model after {self.cfg.load_wait_s:g}s (cosmos_rl.load_wait_s); retry shortly",
                               503) from None
        if ok:
            self._readiness[judge_name] = (time.monotonic(), True, None)
            return True, ""
        self._failed_heads[judge_name] = reason or "failed"
        self._readiness.pop(judge_name, None)
        return False, f"reward {name!r} cannot be scored: judge {judge_name!r} failed to load ({reason})"

    def _check_decoder(self, channels: int) -> None:
        assert self.worker is not None
        if channels not in self.worker.decoders:
            have = ", ".join(f"{WAN_NAMES[n]}" for n in self.worker.decoders.values())
            want = WAN_CHANNELS[channels]
            raise PayloadError(f"latents have {channels} channels ({WAN_NAMES[want]}) but this gateway has no such "
                               f"decoder (cosmos_rl.latents.{want}); it decodes {have}")
        failure = self.worker.load_failure(channels)
        if failure is not None:
            raise JudgeUnready(f"the latent decoder could not be loaded: {failure}", 424)

    # ---- enqueue ---------------------------------------------------------------------------

    async def prepare(self, body: bytes, *, check_ready: bool = True) -> Prepared:
        meta_json, data = split_body(body)
        meta = parse_meta(meta_json)
        rewards, skipped = {}, []
        for name, weight in meta.reward_fn.items():
            if weight <= 0:  # the protocol: weight <= 0 means skip
                skipped.append(name)
                continue
            rewards[name] = self.resolve(name)
        if not rewards:
            raise PayloadError("every reward in `reward_fn` has weight <= 0: nothing to score")
        notes = self._route_ocr_gpu(meta, rewards)
        if self.cfg.refuse_unready and check_ready:
            await self._check_ready(rewards)
        def check_medium(medium: str, what: str) -> None:
            wrong = [n for n, r in rewards.items() if medium not in self.media_of(r)]
            if wrong:
                other = "videos" if medium == "image" else "images"
                raise PayloadError(f"{what} but {', '.join(wrong)} score {other} only")

        kind = sniff(data)
        if kind == "npy":
            arr = await asyncio.to_thread(load_npy, data)
            dtype_name = f"torch.{arr.dtype}"
        else:
            if self.worker is None:
                raise PayloadError("torch-saved tensors are loaded by the torch worker (cosmos_rl.latents.python), "
                                   "which this gateway does not have: send npy")
            try:
                arr, dtype_name = await self.worker.load_torch(data)
            except LatentDecoderError as err:
                raise PayloadError(f"torch payload refused: {err}") from None

        pixels = latents = None
        if meta.media_type == "image":
            pixels = check_image(arr)
            medium = "image"
            check_medium(medium, "media_type is 'image'")
        elif meta.media_type == "video":
            pixels = check_video(arr)
            medium = "video"
            check_medium(medium, "media_type is 'video'")
        else:
            if self.worker is None or not self.worker.can_decode:
                raise PayloadError("latent input (media_type missing or 'latent') needs a latent decoder, and none is "
                                   "configured on this gateway (cosmos_rl.latents.python + wan2_1 / wan2_2); send "
                                   "media_type 'image' or 'video' with uint8 pixels")
            latents = check_latent(arr)
            self._check_decoder(int(latents.shape[1]))
            medium = "image" if latents.shape[2] == 1 else "video"
            check_medium(medium, f"latents with T={latents.shape[2]} decode to {medium}s")
        batch = int(arr.shape[0])
        if batch < 1:
            raise PayloadError("the tensor's batch dimension is 0")
        if batch > self.cfg.max_batch:
            raise PayloadError(f"batch {batch} exceeds cosmos_rl.max_batch = {self.cfg.max_batch}")
        if meta.prompts is not None and len(meta.prompts) != batch:
            raise PayloadError(f"the tensor's batch is {batch} but `prompts` has {len(meta.prompts)} entries")
        meta.prompts = meta.prompts_for(batch)
        self._check_limits(batch, pixels, latents, meta.prompts)
        if any(self.gateway.judges[r.judge].kind == "gen_eval" for r in rewards.values()):
            readme_geneval_fields(meta.extra, batch)
        fps = None
        if medium == "video":
            infos = meta.video_infos
            if infos is None:
                raise PayloadError(f"video rewards ({', '.join(rewards)}) need `video_infos` with `video_fps` per sample")
            if len(infos) != batch:
                raise PayloadError(f"the tensor's batch is {batch} but `video_infos` has {len(infos)} entries")
            fps = [_video_fps(i, info) for i, info in enumerate(infos)]
        per_sample = []
        for i in range(batch):
            md = {}
            for k, v in meta.extra.items():
                md[k] = v[i] if isinstance(v, list) and len(v) == batch else v
            per_sample.append(md)
        info = await asyncio.to_thread(input_info, arr, dtype_name)  # min/max of a video: off the loop
        if medium == "video" and meta.video_infos is not None:
            info["video_infos"] = meta.video_infos
        ignored = self._unused_fields(meta, rewards, medium)
        if ignored:
            self.ignored.note(ignored, "no requested reward reads it")
        return Prepared(meta, rewards, skipped, medium, pixels, latents, fps, info, batch, per_sample,
                        ignored, notes)

    def _route_ocr_gpu(self, meta: EnqueueMeta, rewards: dict[str, CosmosReward]) -> dict[str, list[str]]:
        """`ocr_use_gpu: true` (cosmos-rl's reward service runs its OCR on the GPU): a reward with a gpu_judge is scored by it;
        for the others the envelope says it was not honoured, and on which judge it was scored."""
        use_gpu = meta.extra.get("ocr_use_gpu")
        if use_gpu is None:
            return {}
        if not isinstance(use_gpu, bool):
            raise PayloadError(f"`ocr_use_gpu` must be true or false, got {use_gpu!r}")
        notes: dict[str, list[str]] = {}
        for name, reward in list(rewards.items()):
            if self.gateway.judges[reward.judge].kind != "ocr":
                continue
            if use_gpu and reward.gpu_judge is not None:
                rewards[name] = reward.model_copy(update={"judge": reward.gpu_judge})
            elif use_gpu:
                device = getattr(self.gateway.judges[reward.judge].cfg.options, "device", "?")
                notes[name] = [f"ocr_use_gpu: true was not honoured: no GPU OCR judge is configured "
                               f"(cosmos_rl.rewards.{name}.gpu_judge); scored by judge {reward.judge!r} on {device}"]
                self.ignored.note(["ocr_use_gpu"], f"reward {name!r} has no gpu_judge")
        return notes

    def _unused_fields(self, meta: EnqueueMeta, rewards: dict[str, CosmosReward], medium: str) -> list[str]:
        """The request's fields that no requested reward reads (ocr_use_gpu is noted by _route_ocr_gpu)."""
        kinds = {self.gateway.judges[r.judge].kind for r in rewards.values()}
        used = {"ocr_use_gpu"} | (set(GENEVAL_FIELDS) if "gen_eval" in kinds else set())
        unused = [k for k in meta.extra if k not in used]
        if "ocr_use_gpu" in meta.extra and "ocr" not in kinds:
            unused.append("ocr_use_gpu")
        if meta.video_infos is not None:
            if medium != "video":
                unused.append("video_infos")
            else:
                unused += sorted({f"video_infos[].{k}" for info in meta.video_infos for k in info
                                  if k not in ("video_fps", "fps")})
        return unused

    def _check_limits(self, batch: int, pixels: np.ndarray | None, latents: np.ndarray | None,
                      prompts: list[str] | None) -> None:
        """Frames, pixels and prompt limits, before a uuid is given (not at pull)."""
        limits = self.gateway.config.media.limits()
        if latents is not None:
            _, t, h, w = decoded_video_shape(latents.shape)
            check_enqueue_limits(batch, t, h, w, prompts, limits, f"latents {list(latents.shape)} decode to "
                                 f"{t} frames of {w}x{h}")
        else:
            assert pixels is not None
            t, h, w = (1, *pixels.shape[1:3]) if pixels.ndim == 4 else pixels.shape[1:4]
            check_enqueue_limits(batch, t, h, w, prompts, limits, f"tensor {list(pixels.shape)}")

    def samples(self, p: Prepared, pixels: np.ndarray, plan: DevicePlan | None = None) -> list[SampleInput]:
        """One sample per clip or image; `plan`: the decoder kept only these frames at this size."""
        out = []
        for i in range(p.batch):
            prompt = p.meta.prompts[i] if p.meta.prompts is not None else ""
            try:
                if p.medium == "image":
                    sample = SampleInput(prompt=prompt, image=ImageMedia.from_array(pixels[i]), metadata=p.extra_meta[i])
                else:
                    assert p.fps is not None
                    # decoded latents are this request's own buffer: taken over, not copied
                    video = (VideoMedia.from_array(pixels[i], p.fps[i], copy=p.latents is None) if plan is None
                             else VideoMedia.from_presampled(
                                 np.ascontiguousarray(pixels[i]), p.fps[i], source_frames=plan.source_frames,
                                 source_width=plan.source_width, source_height=plan.source_height,
                                 indices=plan.frames[i], resampled_by=DEVICE_RESAMPLER))
                    sample = SampleInput(prompt=prompt, video=video, metadata=p.extra_meta[i])
            except MediaError as err:
                raise PayloadError(f"sample {i}: {err}") from None
            out.append(sample)
        return out

    # ---- latent_attr -----------------------------------------------------------------------

    def set_latent_attr(self, raw: str | None) -> dict[str, Any]:
        """POST /api/reward/latent_attr: cosmos-rl's reward service rebuilds its Wan2.1 decoder from
        these fields. Here only `load_mean_std` changes anything; a client never names files or devices
        on the server, and the other fields do not affect decoding (each is listed with why)."""
        if raw is None:
            raise PayloadError("latent_attr needs the form field `fields` (a JSON object)")
        try:
            fields = parse_json(raw, "`fields`")  # the safe parser: depth, digits, UTF-8 bounded
        except JSONBodyError as err:
            raise PayloadError(str(err)) from None
        if not isinstance(fields, dict):
            raise PayloadError("`fields` must be a JSON object")
        if self.worker is None or not self.worker.can_decode:
            raise PayloadError("this gateway has no latent decoder (cosmos_rl.latents); latent_attr has nothing to set")
        wan21 = self.cfg.latents.wan2_1
        applied: dict[str, Any] = {}
        ignored: dict[str, str] = {}
        for key, value in fields.items():
            if key == "load_mean_std":
                if not isinstance(value, bool):
                    raise PayloadError(f"`load_mean_std` must be true or false, got {value!r}")
                if value and not (wan21 and wan21.images_mean_std and wan21.video_mean_std):
                    raise PayloadError("load_mean_std = true needs the statistics files on the gateway "
                                       "(cosmos_rl.latents.wan2_1.images_mean_std and video_mean_std)")
                self.worker.load_mean_std = value
                applied[key] = value
            elif key in ("vae_pth", "device"):
                ignored[key] = (f"the gateway decodes with its configured decoders (cosmos_rl.latents: "
                                f"{self._decoder_names()}, device {self.cfg.latents.device}); a client never "
                                "chooses files or devices on the server")
            elif key in ("chunk_duration", "temporal_window"):
                ignored[key] = "used by the Wan2.1 encoder only; decoding does not depend on it"
            elif key in ("fps", "num_frames", "height", "width"):
                ignored[key] = ("stored but never used by the original; the frame rate comes with each "
                                "request (video_infos[i].video_fps)")
            else:
                ignored[key] = "not a latent attribute of the original"
        return {"message": "Latent attributes set successfully", "applied": applied, "ignored": ignored,
                "load_mean_std": self.worker.load_mean_std}

    def _decoder_names(self) -> str:
        return ", ".join(f"{name} = {vae.checkpoint!r}" for name, vae in self.cfg.latents.decoders().values())


def _video_fps(i: int, info: dict[str, Any]) -> float:
    """`video_fps` (what cosmos-rl's reward service handlers read) or `fps` (what its README's example sends)."""
    values = {k: info[k] for k in ("video_fps", "fps") if k in info}
    if not values:
        raise PayloadError(f"video_infos[{i}] needs `video_fps` (or `fps`): the frame rate of the video")
    for key, v in values.items():
        # The media's own bound: a rate accepted here must not fail after the uuid is given.
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v <= MAX_FPS):
            raise PayloadError(f"video_infos[{i}].{key} must be a number in (0, {MAX_FPS:g}], got {v!r}")
    if len(values) == 2 and float(values["video_fps"]) != float(values["fps"]):
        raise PayloadError(f"video_infos[{i}] has video_fps = {values['video_fps']} and fps = {values['fps']}: "
                           "which is it?")
    return float(next(iter(values.values())))
