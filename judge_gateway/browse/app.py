"""The browser's web app: every page and file is addressed by run number and sample index;
a file is served only when it resolves inside that run's folders (data.Run.resolve)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

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
from .watch import GatewayWatch, WatchFolder, is_watch_run, thumbnail_path, watch_context


def server_links(runs: list[Run], gateway: GatewayWatch | None = None) -> Links:
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
        entries += [{"href": f"/watch/{r}", "label": f"watch: {run.name}", "on": current == f"watch{r}"}
                    for r, run in enumerate(runs) if is_watch_run(run)]
        if gateway is not None:
            entries.append({"href": "/live", "label": f"live: {gateway.url}", "on": current == "live"})
        if not runs:
            return entries
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


def create_browse_app(runs: list[Run], hosts: list[str] | None = None, refresh_s: int = 10,
                      gateway: GatewayWatch | None = None) -> FastAPI:
    """`refresh_s`: how often a watch page reloads itself (0: never); `?refresh=N` overrides it.
    `gateway`: a live gateway whose watch the /live pages show."""
    if not runs and gateway is None:
        raise ValueError("browse needs at least one run folder (or a gateway to follow)")
    app = FastAPI(title="judge-gateway browse", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=hosts or list(LOCAL_HOSTS))
    links = server_links(runs, gateway)

    def run_at(r: int) -> Run:
        if not 0 <= r < len(runs):
            raise HTTPException(404, f"no run {r}")
        return runs[r]

    def line_at(r: int, i: int) -> dict[str, Any]:
        line = run_at(r).sample(i)
        if line is None:
            raise HTTPException(404, f"run {r} has no sample {i}")
        return line

    watched = {r: WatchFolder(run) for r, run in enumerate(runs) if is_watch_run(run)}

    def watch_at(r: int) -> WatchFolder:
        run_at(r)
        if r not in watched:
            raise HTTPException(404, f"run {r} is no watch run (its folder has no watch.json)")
        return watched[r]

    @app.get("/")
    def index() -> RedirectResponse:
        if gateway is not None and not runs:
            return RedirectResponse("/live")
        return RedirectResponse("/watch/0" if 0 in watched else "/run/0")

    def every(refresh: int | None) -> int:
        return refresh_s if refresh is None else max(0, refresh)

    @app.get("/watch/{r}", response_class=HTMLResponse)
    def watch(r: int, refresh: int | None = None) -> str:
        folder = watch_at(r)
        ctx = watch_context(folder.report(), runs[r].name, folder.problem, every(refresh),
                            thumb_src=lambda i: f"/watch/{r}/thumb/{i}", sample_href=lambda i: f"/watch/{r}/sample/{i}")
        return render("watch.html", f"watch {runs[r].name}", links.nav(f"watch{r}"), **ctx)

    @app.get("/watch/{r}/sample/{i}", response_class=HTMLResponse)
    def watch_sample(r: int, i: int) -> str:
        folder = watch_at(r)
        line = folder.line(i)
        if line is None:
            raise HTTPException(404, f"watch run {r} has no sample {i}")
        judges = list(dict.fromkeys([*runs[r].judges, *line["scores"]]))
        return render("sample.html", f"{runs[r].name} #{i}", links.nav(f"watch{r}"), run=runs[r], line=line,
                      judges=judges, player=f"player-{r}-{i}", anchor=f"s-{r}-{i}",
                      media_src=lambda index, kind: f"/watch/{r}/thumb/{index}", frames_src=lambda index, judge: None)

    @app.get("/watch/{r}/thumb/{i}")
    def watch_thumb(r: int, i: int) -> FileResponse:
        path = thumbnail_path(watch_at(r), i)
        if path is None:
            raise HTTPException(404, f"sample {i} has no thumbnail inside the run's folder")
        return FileResponse(path)

    def live_gateway() -> GatewayWatch:
        if gateway is None:
            raise HTTPException(404, "no gateway to follow (browse --gateway URL)")
        return gateway

    @app.get("/live", response_class=HTMLResponse)
    def live(run: str | None = None, refresh: int | None = None) -> str:
        source = live_gateway()
        whole = source.report()
        names = [x.run for x in whole.runs] if whole else []
        name = run if run is not None else (names[0] if names else None)
        report = next((x for x in whole.runs if x.run == name), None) if whole and name is not None else None
        problem = source.problem or (None if report is not None else
                                     f"the gateway holds no watched run{f' {name!r}' if name else ' yet'}"
                                     f"{' (runs: ' + ', '.join(names) + ')' if names else ''}")
        q = quote(name or "")
        ctx = watch_context(report, f"{source.url} · {name or '-'}", problem, every(refresh),
                            thumb_src=lambda i: f"/live/thumb?run={q}&index={i}",
                            sample_href=lambda i: f"/live/sample?run={q}&index={i}")
        return render("watch.html", f"live {name or ''}", links.nav("live"), runs_live=names, **ctx)

    @app.get("/live/thumb")
    def live_thumb(run: str, index: int) -> Response:
        data = live_gateway().thumbnail(run, index)
        if data is None:
            raise HTTPException(404, f"the gateway has no thumbnail of sample {index} of run {run!r}")
        return Response(data, media_type="image/jpeg")

    @app.get("/live/sample", response_class=HTMLResponse)
    def live_sample(run: str, index: int) -> str:
        report = live_gateway().run(run)
        found = next((d for d in report.disagreements if d.index == index), None) if report else None
        if found is None:
            raise HTTPException(404, f"sample {index} is not among run {run!r}'s disagreements on the gateway")
        return render("watch_sample.html", f"{run} #{index}", links.nav("live"), d=found,
                      thumb=f"/live/thumb?run={quote(run)}&index={index}")

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
