"""The browser's web app: every page and file is addressed by run number and sample index;
a file is served only when it resolves inside that run's folders (data.Run.resolve)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.middleware.trustedhost import TrustedHostMiddleware
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from .data import Run, judge_frames
from .frames import contact_sheet
from .pages import (
    Links,
    clip_of,
    compare_context,
    grid_context,
    render,
    sample_context,
    stats_context,
    video_of,
)
from .preview import PreviewError, Previews
from .preview import poster as poster_of


def server_links(runs: list[Run]) -> Links:
    def media(r: int, i: int, kind: str) -> str:
        if kind == "video":
            clip = clip_of(runs[r], i)
            if clip is not None and not clip.playable:
                return f"/run/{r}/preview/{i}"
        return f"/run/{r}/media/{i}/{kind}"

    def poster(r: int, i: int) -> str | None:
        return f"/run/{r}/poster/{i}.jpg" if video_of(runs[r], i) is not None else None

    def nav(current: str) -> list[dict[str, Any]]:
        entries = [{"href": f"/run/{r}", "label": run.name, "on": current == f"run{r}"} for r, run in enumerate(runs)]
        entries.append({"href": "/stats", "label": "charts", "on": current == "stats"})
        if len(runs) > 1:
            entries.append({"href": "/compare?a=0&b=1", "label": "A/B", "on": current == "compare"})
        return entries

    def frames(r: int, i: int, judge: str) -> str | None:
        line = runs[r].sample(i)
        return f"/run/{r}/frames/{i}/{judge}.png" if line and line.get("video") else None

    return Links(sample=lambda r, i: f"/run/{r}/sample/{i}", media=media, frames=frames, nav=nav,
                 poster=poster, clip=lambda r, i: clip_of(runs[r], i))


LOCAL_HOSTS = ("localhost", "127.0.0.1")


def allowed_hosts(bind: str, extra: list[str] | None = None) -> list[str]:
    """The Host headers the browser answers: this machine's names, the bound address when it is
    a name or an IP one can type (not a wildcard), and any named with --allowed-host. Any other
    Host is refused (400), so a web page whose DNS name is rebound to 127.0.0.1 cannot read it."""
    hosts = list(LOCAL_HOSTS)
    for host in [bind, *(extra or [])]:
        if host and host not in ("0.0.0.0", "::", "") and host not in hosts:
            hosts.append(host)
    return hosts


def create_browse_app(runs: list[Run], hosts: list[str] | None = None) -> FastAPI:
    if not runs:
        raise ValueError("browse needs at least one run folder")
    app = FastAPI(title="judge-gateway browse", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=hosts or list(LOCAL_HOSTS))
    links = server_links(runs)

    def run_at(r: int) -> Run:
        if not 0 <= r < len(runs):
            raise HTTPException(404, f"no run {r}")
        return runs[r]

    def line_at(r: int, i: int) -> dict[str, Any]:
        line = run_at(r).sample(i)
        if line is None:
            raise HTTPException(404, f"run {r} has no sample {i}")
        return line

    @app.get("/")
    def index() -> RedirectResponse:
        return RedirectResponse("/run/0")

    @app.get("/run/{r}", response_class=HTMLResponse)
    def grid(r: int) -> str:
        run_at(r)
        return render("grid.html", runs[r].name, links.nav(f"run{r}"), **grid_context(runs, r, links))

    @app.get("/run/{r}/sample/{i}", response_class=HTMLResponse)
    def sample(r: int, i: int) -> str:
        line_at(r, i)
        ctx = sample_context(runs, r, i, links)
        return render("sample.html", f"{runs[r].name} #{i}", links.nav(f"run{r}"), **ctx)

    @app.get("/run/{r}/media/{i}/{kind}")
    def media(r: int, i: int, kind: str) -> FileResponse:
        if kind not in ("image", "video"):
            raise HTTPException(404, "media kind is image or video")
        path = run_at(r).resolve(line_at(r, i).get(kind) or "")
        if path is None:
            raise HTTPException(404, f"sample {i} has no {kind} inside the run's folders")
        return FileResponse(path)

    previews = Previews()

    def video_at(r: int, i: int) -> Path:
        line_at(r, i)
        video = video_of(run_at(r), i)
        if video is None:
            raise HTTPException(404, f"sample {i} has no video inside the run's folders")
        return video

    # A clip the browser cannot play, transcoded on demand (preview.py); 422 with the reason when
    # it cannot be decoded at all.
    @app.get("/run/{r}/preview/{i}")
    def preview(r: int, i: int) -> FileResponse:
        try:
            path = previews.preview(video_at(r, i))
        except PreviewError as err:
            raise HTTPException(422, str(err)) from None
        return FileResponse(path, media_type=Previews.media_type(path))

    @app.get("/run/{r}/poster/{i}.jpg")
    def poster(r: int, i: int) -> Response:
        try:
            data = poster_of(video_at(r, i))
        except PreviewError as err:
            raise HTTPException(422, str(err)) from None
        return Response(data, media_type="image/jpeg")

    @lru_cache(maxsize=64)
    def sheet(r: int, i: int, judge: str) -> bytes:
        line = line_at(r, i)
        seen = judge_frames((line.get("scores") or {}).get(judge) or {})
        video = runs[r].resolve(line.get("video") or "")
        if not seen or video is None:
            raise HTTPException(404, f"no recorded frames of {judge} for sample {i}")
        try:
            return contact_sheet(video, seen.indices)
        except (ValueError, OSError) as err:
            raise HTTPException(404, str(err)) from None

    @app.get("/run/{r}/frames/{i}/{judge}.png")
    def frames(r: int, i: int, judge: str) -> Response:
        return Response(sheet(r, i, judge), media_type="image/png")

    @app.get("/stats", response_class=HTMLResponse)
    def stats() -> str:
        return render("stats.html", "charts", links.nav("stats"), **stats_context(runs))

    @app.get("/compare", response_class=HTMLResponse)
    def compare(a: int = 0, b: int = 1, judge: str | None = None) -> str:
        run_at(a), run_at(b)
        return render("compare.html", "A/B", links.nav("compare"),
                      **compare_context(runs, a, b, links, judge), choose=True)

    return app
