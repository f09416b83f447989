"""The watch in the HTTP service: each scoring route reads its request's run and step here and
hands its scored samples to the watch once its response is sent (a background task of the
response); GET /v1/watch reports the runs (judge_gateway/watch/)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask

from ..schema import RewardResponse, SampleInput
from ..watch import RunTags, Watch, WatchReport, tags_from
from .errors import error_response


async def watch_of(request: Request) -> Watch:
    return request.app.state.watch


WatchDep = Annotated[Watch, Depends(watch_of)]


def request_tags(request: Request, run: str | None = None, step: int | None = None) -> RunTags | None:
    """The request's run and step (raises BadTags for a malformed header or field); None while
    the watch is off, when they mean nothing."""
    watch: Watch = request.app.state.watch
    return tags_from(request.headers, run, step) if watch.enabled else None


def after_response(request: Request, api: str, tags: RunTags | None, samples: Sequence[SampleInput],
                   response: RewardResponse) -> BackgroundTask | None:
    """The background task that gives the watch a scored request once its response is sent."""
    watch: Watch = request.app.state.watch
    if tags is None or not watch.enabled:
        return None

    async def hand_over() -> None:  # async: it runs on the event loop, never in the thread pool
        watch.offer(api, samples, [r.scores for r in response.results], tags, response.id)

    return BackgroundTask(hand_over)


router = APIRouter()

# A sample's index in its run's record; a larger one names no file (and a 301-digit one made a
# file name too long for the OS: a 500 before this bound).
MAX_INDEX = 2**53


@router.get("/v1/watch", response_model=WatchReport,
            summary="The reward-hacking watch: per-run windows, alarms with their evidence, disagreements")
async def watch_report(watch: WatchDep,
                       run: Annotated[str | None, Query(max_length=128, description="Only this run.")] = None,
                       windows: Annotated[int, Query(ge=0, le=100_000, description="The last N windows of each run.")]
                       = 50) -> Any:
    return watch.report(run=run, windows=windows)


@router.get("/v1/watch/thumbnail", summary="The thumbnail of a watched sample (`index`: its line in the run's record)",
            response_class=FileResponse, responses={404: {"description": "no such run in memory, or no thumbnail"}})
async def watch_thumbnail(watch: WatchDep, run: Annotated[str, Query(max_length=128)],
                          index: Annotated[int, Query(ge=0, le=MAX_INDEX)]) -> Any:
    path = watch.thumbnail(run, index)
    if path is None:
        return error_response("not_found", f"run {run!r} has no thumbnail for sample {index} in memory", 404)
    return FileResponse(path, media_type="image/jpeg")
