"""`browse --export report.html`: every page of the browser in one self-contained HTML file
(media as data: URLs, charts as inline SVG, no requests to anything)."""

from __future__ import annotations

import base64
import mimetypes
from pathlib import Path
from typing import Any

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


def _data_url(path: Path) -> str:
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def export_links(runs: list[Run]) -> Links:
    previews = Previews()

    def media(r: int, i: int, kind: str) -> str | None:
        line = runs[r].sample(i) or {}
        path = runs[r].resolve(line.get(kind) or "")
        if path is None:
            return None
        clip = clip_of(runs[r], i) if kind == "video" else None
        if clip is not None and not clip.playable:
            # The preview in its place (the report must play where it is opened); none if it cannot be made.
            try:
                path = previews.preview(path)
            except PreviewError:
                return None
        return _data_url(path)

    def poster(r: int, i: int) -> str | None:
        video = video_of(runs[r], i)
        if video is None:
            return None
        try:
            return "data:image/jpeg;base64," + base64.b64encode(poster_of(video)).decode()
        except PreviewError:
            return None

    def frames(r: int, i: int, judge: str) -> str | None:
        line = runs[r].sample(i) or {}
        seen = judge_frames((line.get("scores") or {}).get(judge) or {})
        video = runs[r].resolve(line.get("video") or "")
        if not seen or video is None:
            return None
        try:
            return "data:image/png;base64," + base64.b64encode(contact_sheet(video, seen.indices)).decode()
        except (ValueError, OSError):
            return None

    def nav(_: str) -> list[dict[str, Any]]:
        entries = [{"href": f"#grid{r}-section", "label": run.name, "on": False} for r, run in enumerate(runs)]
        entries.append({"href": "#stats", "label": "charts", "on": False})
        if len(runs) > 1:
            entries.append({"href": "#ab", "label": "A/B", "on": False})
        return entries

    return Links(sample=lambda r, i: f"#s-{r}-{i}", media=media, frames=frames, nav=nav, poster=poster,
                 clip=lambda r, i: clip_of(runs[r], i))


def _grid_media(links: Links, r: int):
    """Grid thumbnails: images inline; videos are embedded once, in their sample's section."""
    return lambda i, kind: "" if kind == "video" else (links.media(r, i, kind) or "")


def export_report(runs: list[Run], out: Path) -> int:
    """Write the report; returns its size in bytes."""
    links = export_links(runs)
    grids = []
    for r in range(len(runs)):
        ctx = grid_context(runs, r, links, gid=f"grid{r}")
        ctx["media_src"] = _grid_media(links, r)
        grids.append(ctx)
    samples = [sample_context(runs, r, int(line.get("index", n)), links)
               for r, run in enumerate(runs) for n, line in enumerate(run.lines)]
    ab = compare_context(runs, 0, 1, links) if len(runs) > 1 else None
    html = render("export.html", "report", links.nav(""), grids=grids, ab=ab,
                  samples=[s for s in samples if s], **stats_context(runs))
    out.write_text(html, encoding="utf-8")
    return len(html.encode())
