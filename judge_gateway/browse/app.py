"""The browser's web app: every page and file is addressed by run number and sample index;
a file is served only when it resolves inside that run's folders (data.Run.resolve)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from .data import Run, judge_frames
from .frames import contact_sheet
from .pages import (
    Links,
    compare_context,
    grid_context,
    render,
    sample_context,
    stats_context,
)


def server_links(runs: list[Run]) -> Links:
    def nav(current: str) -> list[dict[str, Any]]:
        entries = [{"href": f"/run/{r}", "label": run.name, "on": current == f"run{r}"} for r, run in enumerate(runs)]
        entries.append({"href": "/stats", "label": "charts", "on": current == "stats"})
        if len(runs) > 1:
            entries.append({"href": "/compare?a=0&b=1", "label": "A/B", "on": current == "compare"})
        return entries

    def frames(r: int, i: int, judge: str) -> str | None:
        line = runs[r].sample(i)
        return f"/run/{r}/frames/{i}/{judge}.png" if line and line.get("video") else None

    return Links(sample=lambda r, i: f"/run/{r}/sample/{i}",
                 media=lambda r, i, kind: f"/run/{r}/media/{i}/{kind}", frames=frames, nav=nav)


def create_browse_app(runs: list[Run]) -> FastAPI:
    if not runs:
        raise ValueError("browse needs at least one run folder")
    app = FastAPI(title="judge-gateway browse", docs_url=None, redoc_url=None, openapi_url=None)
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

    @app.get("/run/{r}/file/{rel:path}")
    def file(r: int, rel: str) -> FileResponse:
        path = run_at(r).resolve(rel)
        if path is None:
            raise HTTPException(404, "no such file inside the run's folders")
        return FileResponse(path)

    @lru_cache(maxsize=64)
    def sheet(r: int, i: int, judge: str) -> bytes:
        line = line_at(r, i)
        indices = judge_frames((line.get("scores") or {}).get(judge) or {})
        video = runs[r].resolve(line.get("video") or "")
        if not indices or video is None:
            raise HTTPException(404, f"no recorded frames of {judge} for sample {i}")
        try:
            return contact_sheet(video, indices)
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
