"""Flow-Factory remote reward server protocol, one path per reward profile, over Gateway.score.

    GET  {prefix}/{profile}/health     liveness (answers while /compute requests run)
    POST {prefix}/{profile}/compute    {prompt, image, video, condition_images, condition_videos}
                                       -> {"rewards": [float, ...]}
                                       (condition_videos go to judges with a <condition_video>
                                       slot; a profile without one refuses them)
    POST {prefix}/{profile}/load|offload   accepted no-ops (newer clients call them)

Profile names in the path are matched exactly, else without regard to case (as Flow-Factory's
reward registry matches its names). Keys beyond the five are logged once and counted in /metrics.

Status codes follow the real client (`raise_for_status()`, then a truthy `error` key raises,
then `rewards`): any 4xx/5xx is retried, a 200 with `{"error": ...}` fails at once. So bad input
is a 200 with `error` (retrying cannot fix it) and transient faults (every sample invalid because
backends are down or timing out) are a 503, which the client retries.

A profile whose judge cannot score at all is never answered with filled rewards: `/health` is
503 with the reason when a head failed to load or a VLM backend does not answer (the client checks
it once at start-up and stops on a status >= 400); `/compute` is 503 with the reason before
anything is scored when a head cannot load, and after scoring when no sample could be scored
because a backend was down. A head loading for the first time is not that: `/health` says
`loading`, and `/compute` waits for the load.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from ..combine import combine_sample, group_transform
from ..config import CombineConfig
from ..exceptions import InvalidInput
from ..gateway import Gateway, GroupTooLargeError, RequestTooLargeError
from ..json_body import JSONBodyError, parse_json
from ..media import ImageMedia, MediaError, VideoMedia
from ..config import FlowFactoryConfig, FlowFactoryProfile
from ..schema import TRANSIENT_ERRORS, ErrorCode, JudgeScore, RewardRequest, RewardResponse, SampleInput
from ..watch import BadTags
from .admission import Admission, Refused
from .cosmos_rl.envelope import source_value
from .disconnect import CLIENT_CLOSED, ClientDisconnected, unless_disconnected
from .ignored import IgnoredFields
from .metered import metered
from .state import AdmissionDep
from .residency_header import BadResidencyHeader, chained, sleep_after, sleep_task
from .watching import after_response, request_tags

log = logging.getLogger(__name__)

MEDIA_FIELD = {"image": "image", "video": "video", "condition_image": "condition_images",
               "condition_video": "condition_videos"}


class BadInput(InvalidInput):
    """The request cannot be scored as sent; the message is the `error` the client raises."""


def _list_or_none(data: dict[str, Any], key: str, n: int) -> list[Any] | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != n:
        got = f"{len(value)} entries" if isinstance(value, list) else type(value).__name__
        raise BadInput(f"`{key}` must be null or a list with one entry per prompt ({n}), got {got}")
    return value


REQUEST_KEYS = ("prompt", "image", "video", "condition_images", "condition_videos")


def parse_compute(body: bytes, profile: FlowFactoryProfile, max_samples: int | None = None,
                  unused: list[str] | None = None) -> list[SampleInput]:
    """The five-key JSON body -> samples (run in a worker thread: JSON and PNG headers); keys
    beyond the five are appended to `unused`."""
    try:
        data = parse_json(body)
    except JSONBodyError as err:
        raise BadInput(str(err)) from None
    if not isinstance(data, dict):
        raise BadInput("body must be a JSON object with prompt, image, video, condition_images, condition_videos")
    if unused is not None:
        unused.extend(k for k in data if k not in REQUEST_KEYS)
    prompts = data.get("prompt")
    if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
        raise BadInput("`prompt` must be a non-empty list of strings")
    n = len(prompts)
    if max_samples is not None and n > max_samples:  # before any media is decoded
        raise BadInput(f"{n} prompts exceed server.max_samples_per_request = {max_samples}; split the request")
    images = _list_or_none(data, "image", n)
    videos = _list_or_none(data, "video", n)
    conds = _list_or_none(data, "condition_images", n)
    cond_videos = _list_or_none(data, "condition_videos", n)
    samples = []
    for i, prompt in enumerate(prompts):
        where = ""
        try:
            where = f"image[{i}]"
            image = ImageMedia.validate(images[i]) if images is not None and images[i] is not None else None
            where = f"video[{i}]"
            video = None
            if videos is not None and videos[i] is not None:
                if not isinstance(videos[i], list):
                    raise MediaError("a video must be a list of base64 PNG frames")
                video = VideoMedia.from_frames(videos[i], fps=profile.video_fps)
            where = f"condition_images[{i}]"
            cond = []
            if conds is not None and conds[i] is not None:
                if not isinstance(conds[i], list):
                    raise MediaError("must be a list of base64 PNG images")
                cond = [ImageMedia.validate(c) for c in conds[i]]
            where = f"condition_videos[{i}]"
            cond_v = []
            if cond_videos is not None and cond_videos[i] is not None:
                if not isinstance(cond_videos[i], list) or not all(isinstance(v, list) for v in cond_videos[i]):
                    raise MediaError("must be a list of videos, each a list of base64 PNG frames")
                cond_v = [VideoMedia.from_frames(v, fps=profile.video_fps) for v in cond_videos[i]]
        except (MediaError, ValueError) as err:
            raise BadInput(f"{where}: {err}") from None
        try:
            samples.append(SampleInput(prompt=prompt, image=image, video=video, condition_images=cond,
                                       condition_videos=cond_v,
                                       group_id="group" if profile.mode == "groupwise" else None))
        except ValidationError as err:  # e.g. a prompt over the schema's length limit
            raise BadInput(f"sample {i}: {_first_error(err)}") from None
    return samples


def _first_error(err: ValidationError) -> str:
    e = err.errors(include_url=False, include_input=False)[0]
    return f"{'.'.join(map(str, e['loc'])) or 'sample'}: {e['msg']}"


class FlowFactoryService:
    def __init__(self, gateway: Gateway, cfg: FlowFactoryConfig) -> None:
        self.gateway = gateway
        self.cfg = cfg
        self.ignored = IgnoredFields(gateway.metrics, "flow_factory")
        by_lower: dict[str, list[str]] = {}
        for name in cfg.profiles:
            by_lower.setdefault(name.lower(), []).append(name)
        # Flow-Factory's reward registry matches names without regard to case: so do the paths,
        # where that names one profile.
        self._folded = {low: names[0] for low, names in by_lower.items() if len(names) == 1}
        self._readiness: dict[str, tuple[float, bool, str | None]] = {}  # judge -> (probed at, ok, reason)
        self._refreshing: dict[str, asyncio.Task[Any]] = {}  # judges whose probe runs in the background

    async def readiness(self, profile: FlowFactoryProfile, *, backends: bool = True) -> tuple[str | None, list[str]]:
        """(why the profile cannot score now, or None; the judges still loading for the first time).
        Probes are kept server.readiness_interval_s. `backends = False` (a /compute): VLM judges are
        not probed (a slow backend is the scoring's to report: the 503 of a request none of whose
        samples could be scored); only heads that cannot load are."""
        loading: list[str] = []
        for name in profile.judges:
            judge = self.gateway.judges[name]
            if not backends and judge.backend_name is not None:
                continue
            cached = self._readiness.get(name)
            if cached is None:  # the first look waits for the probe (the client's start-up check)
                cached = await self._probe(name)
            elif time.monotonic() - cached[0] > self.gateway.config.server.readiness_interval_s:
                self._refresh(name)  # in the background: /health never waits on a busy backend
            _, ok, reason = cached
            if ok:
                continue
            if judge.backend_name is not None:
                return f"judge {name!r} cannot score: its backend {judge.backend_name!r} is not ready ({reason})", loading
            if (reason or "").startswith("failed"):
                return f"judge {name!r} cannot score: {reason}", loading
            loading.append(name)  # a head's first load: scoring waits for it
        return None, loading

    def profile_name(self, name: str) -> str | None:
        """The configured profile a path segment names: exactly, else ignoring case; None if none."""
        if name in self.cfg.profiles:
            return name
        return self._folded.get(name.lower())

    def check_media(self, profile_name: str, profile: FlowFactoryProfile, samples: list[SampleInput]) -> None:
        def has(s: SampleInput, slot: str) -> bool:
            return bool(getattr(s, MEDIA_FIELD[slot]))

        takers = [j for j in profile.judges if "condition_video" in self.gateway.judges[j].media]
        sent = [i for i, s in enumerate(samples) if s.condition_videos]
        if sent and not takers:
            # Scoring without them would look like an edit score that never saw its source.
            raise BadInput(f"profile {profile_name!r}: no judge takes `condition_videos` (judges: "
                           f"{', '.join(profile.judges)}), and sample {sent[0]} has some; send null "
                           "or use a profile with a video-edit judge")
        for judge in profile.judges:
            slots = self.gateway.judges[judge].media
            # A judge listing both image and video (a head) takes either; other slots are required.
            primary = [m for m in slots if m in ("image", "video")]
            required = [[m] for m in slots if m not in primary] + ([primary] if primary else [])
            for options in required:
                for i, s in enumerate(samples):
                    if not any(has(s, m) for m in options):
                        need = " or ".join(f"`{MEDIA_FIELD.get(m, m)}`" for m in options)
                        raise BadInput(f"profile {profile_name!r}: judge {judge!r} needs {need}, "
                                       f"and sample {i} has none")

    async def _probe(self, name: str) -> tuple[float, bool, str | None]:
        ok, reason = await self.gateway.judges[name].probe()
        self._readiness[name] = (time.monotonic(), ok, reason)
        return self._readiness[name]

    def _refresh(self, name: str) -> None:
        if name in self._refreshing:
            return
        task = self._refreshing[name] = asyncio.get_running_loop().create_task(self._probe(name))
        task.add_done_callback(lambda _: self._refreshing.pop(name, None))

    async def compute(self, name: str, body: bytes, admission: Admission,
                      on_scored: Callable[[list[SampleInput], RewardResponse], None] | None = None
                      ) -> tuple[int, dict[str, Any]]:
        """(status, body) of one /compute: parse, reserve (decoded-media budget, head queues:
        Refused when spent), score, answer; `on_scored` gets the samples and their judge scores."""
        profile = self.cfg.profiles[name]
        why, _ = await self.readiness(profile, backends=False)
        if why is not None:  # never rewards filled for a request that could not be scored at all
            return 503, {"detail": f"profile {name!r}: {why}", "reason": why}
        unused: list[str] = []
        try:
            samples = await run_in_threadpool(parse_compute, body, profile,
                                              self.gateway.config.server.max_samples_per_request, unused)
            self.check_media(name, profile, samples)
        except BadInput as err:
            return 200, {"error": str(err)}
        if unused:
            self.ignored.note(unused, f"not one of the protocol's keys ({', '.join(REQUEST_KEYS)})")
        judges = list(profile.judges)
        try:  # Refused (media budget, head queues) is the route's 503 + Retry-After: the client retries
            response = await admission.scored("flow_factory", self.gateway, RewardRequest(samples=samples, judges=judges))
        except (RequestTooLargeError, GroupTooLargeError) as err:  # bad input: the client must not retry it
            return 200, {"error": str(err)}
        if on_scored is not None:
            on_scored(samples, response)
        combine = CombineConfig(policy=profile.combine, on_invalid="invalidate")
        rewards: list[float | None] = []
        ours: list[float | None] = []  # the judges' own rewards: `valid` says where they are
        problems: list[tuple[int, str, ErrorCode]] = []
        for r in response.results:
            value, _, _ = combine_sample(r.scores, profile.judges, combine)
            ours.append(value)
            if profile.peer_source is not None:  # Flow-Factory's own number where the judge recorded it
                value, _, _ = combine_sample({j: _peer_view(s, profile.peer_source) for j, s in r.scores.items()},
                                             profile.judges, combine)
            rewards.append(value)
            for judge, s in r.scores.items():
                if not s.valid and s.error is not None:
                    problems.append((r.index, f"{judge}: {s.error.code.value}: {s.error.message}", s.error.code))
        if profile.mode == "groupwise" and profile.group_transform != "none":
            rewards = group_transform(rewards, ["group"] * len(rewards), profile.group_transform)
        valid = [v for v in rewards if v is not None]
        # Flow-Factory's client reads only `rewards`; the flags beside them keep a filled value
        # (or Flow-Factory's number where our judge calls the sample invalid) from passing as ours.
        flags = [v is not None for v in ours]
        if problems:
            first = f"sample {problems[0][0]}: {problems[0][1]}"
            if not valid and any(code in TRANSIENT_ERRORS for _, _, code in problems):
                # Retrying may help (backends down or slow): the client retries 5xx.
                return 503, {"detail": f"no sample could be scored ({len(problems)} failed judge scores), "
                                       f"e.g. {first}"}
            if profile.on_invalid == "error":
                return 200, {"error": f"{len(problems)} judge scores invalid; e.g. {first}"}
            if profile.on_invalid == "fill" or not valid:
                fill = profile.fill_value
            else:
                fill = sum(valid) / len(valid)
            log.warning("flow-factory %s: %d invalid judge scores, filled with %s; e.g. %s",
                        name, len(problems), fill, first)
            rewards = [fill if v is None else v for v in rewards]
            errors: dict[str, list[str]] = {}
            for index, message, _ in problems:
                errors.setdefault(str(index), []).append(message)
            return 200, {"rewards": rewards, "valid": flags, "errors": errors}
        return 200, {"rewards": rewards, "valid": flags}


def _peer_view(score: JudgeScore, source: str) -> JudgeScore:
    """The score with the peer's number (details.<key>) as its reward where the judge recorded one."""
    value = source_value(score, source)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return score
    return score.model_copy(update={"reward": float(value), "valid": True, "error": None})


async def flow_factory_of(request: Request) -> FlowFactoryService:
    return request.app.state.flow_factory


FlowFactoryDep = Annotated[FlowFactoryService, Depends(flow_factory_of)]

# Included under the config's flow_factory.path_prefix.
router = APIRouter()


def _unknown(service: FlowFactoryService, profile: str) -> JSONResponse:
    known = ", ".join(f"{service.cfg.path_prefix}/{p}" for p in service.cfg.profiles) or "none configured"
    return JSONResponse({"error": f"no Flow-Factory profile {profile!r} (profiles: {known})"}, status_code=404)


@router.get("/{profile}/health", summary="Flow-Factory: health of a reward profile")
async def health(profile: str, service: FlowFactoryDep) -> JSONResponse:
    name = service.profile_name(profile)
    if name is None:
        return _unknown(service, profile)
    profile, p = name, service.cfg.profiles[name]
    why, loading = await service.readiness(p)
    body: dict[str, Any] = {"profile": profile, "mode": p.mode, "judges": p.judges}
    if why is not None:  # Flow-Factory's client checks /health once at start-up: a status >= 400 stops it
        return JSONResponse({"status": "unavailable", "reason": why, **body}, status_code=503)
    if loading:
        return JSONResponse({"status": "loading", "loading": loading, **body})
    return JSONResponse({"status": "ok", **body})


@router.post("/{profile}/compute", summary="Flow-Factory: rewards for a batch (pointwise) or a group")
async def compute(profile: str, request: Request, service: FlowFactoryDep, admission: AdmissionDep) -> JSONResponse:
    name = service.profile_name(profile)
    if name is None:
        return _unknown(service, profile)
    profile = name
    with metered(service.gateway.metrics, "flow_factory") as outcome:
        try:
            try:
                tags = request_tags(request)
                then_sleep = sleep_after(request)
            except (BadTags, BadResidencyHeader) as err:  # bad input: a 200 with `error`, which the client does not retry
                outcome.status = "invalid"
                return JSONResponse({"error": str(err)})
            raw = await request.body()
            scored: list[tuple[list[SampleInput], RewardResponse]] = []
            async with admission.slot("flow_factory", until=lambda wait: unless_disconnected(request, wait)):
                # The client gives up after its timeout and retries: stop scoring the abandoned copy.
                code, body = await unless_disconnected(
                    request, service.compute(profile, raw, admission, lambda *s: scored.append(s)))
            outcome.status = "ok" if code == 200 and "rewards" in body else ("invalid" if code == 200 else "unavailable")
            watched = after_response(request, "flow_factory", tags, *scored[0]) if scored else None
            slept = sleep_task(request, list(service.cfg.profiles[profile].judges)) if then_sleep else None
            return JSONResponse(body, status_code=code, background=chained(watched, slept))
        except Refused as err:  # 503: the client retries 5xx (a 4xx it would not)
            outcome.status = "refused"
            return JSONResponse({"detail": str(err)}, status_code=503,
                                headers={"Retry-After": str(err.retry_after_s)})
        except ClientDisconnected:
            outcome.cancelled()
            return JSONResponse({"detail": "the client disconnected; scoring was cancelled"},
                                status_code=CLIENT_CLOSED)
        except Exception as err:  # a bug: 500, which the client retries
            log.exception("flow-factory compute failed")
            return JSONResponse({"detail": f"{type(err).__name__}: {err}"}, status_code=500)


@router.post("/{profile}/load", summary="Flow-Factory: wake the profile's colocated judges (a no-op for resident ones)")
async def load(profile: str, service: FlowFactoryDep) -> JSONResponse:
    return await _residency(service, profile, "wake")


@router.post("/{profile}/offload", summary="Flow-Factory: put the profile's colocated judges to sleep (a no-op "
             "for resident ones)")
async def offload(profile: str, service: FlowFactoryDep) -> JSONResponse:
    return await _residency(service, profile, "sleep")


async def _residency(service: FlowFactoryService, profile: str, action: str) -> JSONResponse:
    """Flow-Factory's clients call /offload before training and /load before a rollout: the
    profile's colocated judges sleep and wake with them. `status` stays "ok" (what the client
    reads); `residency` says per judge what happened (a sleep refused while work was in flight
    leaves the judge awake, nothing dropped)."""
    name = service.profile_name(profile)
    if name is None:
        return _unknown(service, profile)
    residency = service.gateway.residency
    chosen = [j for j in service.cfg.profiles[name].judges if j in residency.by_judge]
    if not chosen:
        return JSONResponse({"status": "ok"})
    if action == "sleep":
        results = await residency.sleep(chosen, "flow_factory")
    else:
        results = await residency.wake(chosen, "flow_factory")
    return JSONResponse({"status": "ok", "residency": results})
