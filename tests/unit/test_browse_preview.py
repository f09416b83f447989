"""The browser and clips Chromium cannot play (MPEG-4 Part 2, HEVC, ProRes, FFV1, MJPEG, GIF,
H.264 outside MP4 or in 4:4:4): each gets an H.264 preview and a poster instead of an endless
spinner, a playable clip is served as it is, an undecodable one says why, and a judge with no
valid score gets no empty histogram."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import av
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from judge_gateway.browse.app import create_browse_app
from judge_gateway.browse.data import load_runs
from judge_gateway.cli import main as cli_main
from tests.support.media_files import UNPLAYABLE_CLIPS, write_video
from tests.support.scored_runs import media_run

FRAMES = 12


def _run(tmp_path: Path, media: list[str], *, judges: dict[str, float | None] | None = None,
         name: str = "run") -> Path:
    """A run folder over the files in tmp_path/inputs, one sample per name."""
    return media_run(tmp_path / "inputs", tmp_path / name, media, judges)


def _inputs(tmp_path: Path) -> Path:
    inputs = tmp_path / "inputs"
    inputs.mkdir(exist_ok=True)
    return inputs


def _client(run_dirs: list[str]) -> TestClient:
    return TestClient(create_browse_app(load_runs(run_dirs)), base_url="http://localhost")


def _decoded(data: bytes) -> tuple[str, str, int]:
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        n = sum(1 for _ in container.decode(stream))
        return stream.codec_context.name, stream.codec_context.pix_fmt, n


def _gif(path: Path) -> Path:
    frames = [Image.new("RGB", (40, 30), (20 * k, 100, 200 - 10 * k)) for k in range(FRAMES)]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100, loop=0)
    return path


@pytest.fixture(scope="module")
def unplayable(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("clips")
    inputs = _inputs(tmp)
    names = []
    for name, (suffix, codec, pix) in UNPLAYABLE_CLIPS.items():
        write_video(inputs / f"{name}{suffix}", frames=FRAMES, fps=8, size=(64, 48), codec=codec, pix_fmt=pix)
        names.append(f"{name}{suffix}")
    names.append(_gif(inputs / "anim.gif").name)
    return tmp, names


def test_every_clip_a_browser_cannot_play_gets_an_h264_preview_and_a_poster(unplayable):
    tmp, names = unplayable
    client = _client([str(_run(tmp, names))])
    grid = client.get("/run/0").text
    for i, name in enumerate(names):
        assert f'src="/run/0/preview/{i}" poster="/run/0/poster/{i}.jpg" preload="none"' in grid, name
        page = client.get(f"/run/0/sample/{i}").text
        assert f'src="/run/0/preview/{i}" poster="/run/0/poster/{i}.jpg"' in page, name
        assert "a preview transcoded for the browser" in page, name
        preview = client.get(f"/run/0/preview/{i}")
        assert preview.status_code == 200 and preview.headers["content-type"] == "video/mp4", name
        assert _decoded(preview.content) == ("h264", "yuv420p", FRAMES), name
        poster = client.get(f"/run/0/poster/{i}.jpg")
        assert poster.headers["content-type"] == "image/jpeg"
        assert Image.open(io.BytesIO(poster.content)).size == ((40, 30) if name.endswith(".gif") else (64, 48)), name
    again = client.get("/run/0/preview/0")  # the cached file, byte for byte
    assert again.content == client.get("/run/0/preview/0").content


def test_a_clip_a_browser_plays_is_served_as_it_is(tmp_path):
    inputs = _inputs(tmp_path)
    write_video(inputs / "a.mp4", frames=FRAMES)   # H.264 4:2:0 in MP4
    write_video(inputs / "b.webm", frames=FRAMES)  # VP8 in WebM
    client = _client([str(_run(tmp_path, ["a.mp4", "b.webm"]))])
    for i, name in enumerate(["a.mp4", "b.webm"]):
        page = client.get(f"/run/0/sample/{i}").text
        assert f'src="/run/0/media/{i}/video" poster="/run/0/poster/{i}.jpg"' in page
        assert "preview transcoded" not in page
        assert client.get(f"/run/0/media/{i}/video").content == (inputs / name).read_bytes()


def test_a_clip_that_cannot_be_decoded_says_why(tmp_path):
    (_inputs(tmp_path) / "junk.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42 this is not a video")
    client = _client([str(_run(tmp_path, ["junk.mp4"]))])
    assert "the video cannot be shown: cannot open it as a video" in client.get("/run/0/sample/0").text
    for url in ("/run/0/preview/0", "/run/0/poster/0.jpg"):
        r = client.get(url)
        assert r.status_code == 422 and "junk.mp4" in r.json()["detail"], url


def test_no_histogram_for_a_judge_with_no_valid_score(tmp_path):
    inputs = _inputs(tmp_path)
    for i in range(3):
        Image.new("RGB", (8, 8), (i, 0, 0)).save(inputs / f"{i}.png")
    run = _run(tmp_path, [f"{i}.png" for i in range(3)], judges={"q": 0.4, "down": None})
    stats = _client([str(run)]).get("/stats").text
    assert "q: valid rewards" in stats and "down: valid rewards" not in stats
    assert 'id="no-valid"' in stats and "No valid reward to plot for down" in stats


def test_the_export_embeds_the_preview_and_the_posters(unplayable, tmp_path):
    src, names = unplayable
    run = _run(src, names[:1], name="export")  # the MPEG-4 Part 2 clip
    out = tmp_path / "r.html"
    assert cli_main(["browse", str(run), "--export", str(out)]) == 0
    html = out.read_text()
    assert html.count("data:video/mp4;base64,") == 1 and html.count("data:image/jpeg;base64,") >= 2
    embedded = html.split("data:video/mp4;base64,")[1].split('"')[0]
    assert _decoded(base64.b64decode(embedded)) == ("h264", "yuv420p", FRAMES)
