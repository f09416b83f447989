"""The results browser without a browser: pages, numbers, the export, and that no file outside a
run's folders is ever served. (tests/integration/test_browse_chromium.py drives a real one.)"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil

import numpy as np
import pytest
from fastapi.testclient import TestClient

from judge_gateway.browse.app import create_browse_app
from judge_gateway.browse.data import load_runs
from judge_gateway.browse.stats import compare_runs, invalid_by_code, rank_groups, valid_rewards
from judge_gateway.cli import main as cli_main
from tests.support import scored_runs as sr
from tests.support.live_server import LiveServer


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return sr.build_runs(tmp_path_factory.mktemp("runs"), n=48)


@pytest.fixture(scope="module")
def client(built):
    return TestClient(create_browse_app(load_runs([str(built.a), str(built.b)])), base_url="http://localhost")


def test_pages_render_scores_critique_and_charts(client, built):
    grid = client.get("/run/0")
    assert grid.status_code == 200
    assert grid.text.count('<tr data-index="') == 48
    assert 'data-codes="bad_input"' in grid.text and 'data-codes="parse_error"' in grid.text
    sample = client.get("/run/0/sample/8")  # a video with a critique
    assert sample.status_code == 200
    assert 'data-t="1.5"' in sample.text and "gravity_inconsistency" in sample.text
    assert "9.0 s: outside the clip" in sample.text and "the ball of clip 8 floats" in sample.text
    assert f"band-{sr.band(sr.physics_reward(8))}" in sample.text
    assert client.get("/run/0/sample/1").status_code == 200  # an image, no critique: still renders
    assert client.get("/run/0/sample/7").status_code == 200  # bad_input: no scores at all
    sheet = client.get("/run/0/frames/8/physics.png")
    assert sheet.status_code == 200 and sheet.content[:4] == b"\x89PNG"
    video = client.get("/run/0/media/8/video")
    assert video.status_code == 200 and video.headers["content-type"] == "video/webm"
    assert video.content == (built.inputs / "clip0008.webm").read_bytes()
    assert client.get("/stats").text.count("<svg") == 4
    ab = client.get("/compare?a=0&b=1")
    assert ab.status_code == 200 and ab.text.count("<svg") >= 4
    assert client.get("/run/5").status_code == 404 and client.get("/run/0/sample/999").status_code == 404


def test_ab_numbers(built):
    a, b = load_runs([str(built.a), str(built.b)])
    c = compare_runs(a, b, "quality")
    ok = [i for i in range(48) if not sr.bad_input(i) and not sr.quality_invalid(i)]
    assert c.paired == len(ok)
    assert c.mean_a == pytest.approx(np.mean([sr.quality_reward(i) for i in ok]))
    assert c.mean_b == pytest.approx(np.mean([min(1.0, sr.quality_reward(i) + 0.05) for i in ok]))
    assert sorted(f["index_a"] for f in c.flipped) == [i for i in ok if sr.quality_reward(i) < 0.5 <= sr.quality_reward(i) + 0.05]
    assert compare_runs(a, b, "physics").spearman == pytest.approx(1.0)
    scored = [i for i in range(48) if not sr.bad_input(i)]
    rates = invalid_by_code(a)
    assert rates["quality"] == {"parse_error": pytest.approx(sum(map(sr.quality_invalid, scored)) / len(scored))}
    assert rates["physics"] == {} and rates["sample"] == {"bad_input": pytest.approx(2 / 48)}
    assert sorted(valid_rewards(a, "quality")) == sorted(sr.quality_reward(i) for i in ok)
    field, rows = rank_groups([a], "physics")
    assert field == "checkpoint"
    vids = [i for i in range(48) if sr.is_video(i) and not sr.bad_input(i)]
    means = {ck: np.mean([sr.physics_reward(i) for i in vids if i % 3 == k]) for k, ck in enumerate(sr.CHECKPOINTS)}
    assert [r.group for r in rows] == sorted(means, key=lambda ck: -means[ck])
    assert {r.group: r.mean for r in rows} == pytest.approx(means)


def test_never_serves_outside_the_run_folders(client, built, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside") / "secret.txt"
    outside.write_text("secret")
    (built.a / "link_out").symlink_to(outside)
    (built.a / "frames").mkdir(exist_ok=True)
    (built.a / "frames" / "f0.png").write_bytes(b"\x89PNG inside")
    # No route serves an arbitrary file any more (the old /run/{r}/file/ route served anything
    # under the input root, the JSONL's parent folder, which can be $HOME): only /media serves
    # the files scores.jsonl names.
    for path in ("frames/f0.png", "run.json", "clip0008.webm"):
        assert client.get(f"/run/0/file/{path}").status_code == 404, path
    assert client.get("/run/0/media/8/video").status_code == 200
    rel = os.path.relpath(outside, built.a)
    for path in ("../../../../etc/passwd", "%2e%2e/%2e%2e/%2e%2e/etc/passwd", "..%2f..%2f..%2fetc%2fpasswd",
                 "%2fetc%2fpasswd", "/etc/passwd", "link_out", rel, rel.replace("/", "%2f"), str(outside)):
        r = client.get(f"/run/0/file/{path}")
        assert r.status_code == 404 and b"secret" not in r.content and b"root:" not in r.content, path
    # Raw request lines, not normalised by the client.
    with LiveServer(client.app) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        for raw in ("/run/0/file/../../../../etc/passwd", "/run/0/file/..%2f..%2f..%2f..%2fetc%2fpasswd",
                    f"/run/0/file/{rel}"):
            conn.request("GET", raw)
            resp = conn.getresponse()
            body = resp.read()
            assert b"root:" not in body and b"secret" not in body, raw
            assert resp.status == 404, (raw, resp.status)
        conn.close()
    # A scores.jsonl whose media path points outside: not served either.
    evil_run = built.a.parent / "run_evil"
    shutil.copytree(built.b, evil_run)
    lines = [json.loads(x) for x in (evil_run / "scores.jsonl").read_text().splitlines()]
    lines[1]["image"] = str(outside)
    lines[2]["image"] = os.path.relpath(outside, built.inputs)
    (evil_run / "scores.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    evil = TestClient(create_browse_app(load_runs([str(evil_run)])), base_url="http://127.0.0.1")
    assert evil.get("/run/0/media/1/image").status_code == 404
    assert evil.get("/run/0/media/2/image").status_code == 404
    assert evil.get("/run/0/media/3/image").status_code == 200


def test_export_is_one_self_contained_file(built, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert cli_main(["browse", str(built.a), str(built.b), "--export", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    html = out.read_text()
    # Nothing is fetched: every src is a data: URL, every href an in-page anchor.
    srcs = re.findall(r'\bsrc="([^"]*)"', html)
    assert srcs and all(s.startswith("data:") for s in srcs)
    assert all(h.startswith("#") for h in re.findall(r'\bhref="([^"]*)"', html))
    assert html.count('<section class="sample"') == 96
    assert html.count("data:video/webm;base64,") == 2 * 6  # per run, 48 samples: every 8th is a webm clip
    assert 'id="ab"' in html and html.count("<svg") >= 8
    assert 'data-t="1.5"' in html and 'data-player="player-0-8"' in html


def test_browse_refuses_a_folder_without_scores(tmp_path, capsys):
    assert cli_main(["browse", str(tmp_path), "--export", str(tmp_path / "r.html")]) == 2
    assert "no scores.jsonl" in capsys.readouterr().err


def test_ab_pairs_two_checkpoints_by_file_name(tmp_path):
    """Two checkpoints render the same prompts into different media: no content key is shared,
    so the samples pair by file name."""
    for run, rewards in (("ck1", [0.1, 0.4, 0.7, 0.9]), ("ck2", [0.2, 0.3, 0.8, 0.45])):
        d = tmp_path / run
        d.mkdir()
        lines = [{"index": i, "source": f"p{i}.png", "key": f"{run}-{i}", "prompt": f"prompt {i}",
                  "scores": {"q": {"judge": "q", "reward": r, "valid": True, "details": {}}},
                  "reward": r, "valid": True} for i, r in enumerate(rewards)]
        (d / "scores.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    a, b = load_runs([str(tmp_path / "ck1"), str(tmp_path / "ck2")])
    c = compare_runs(a, b, "q")
    assert c.paired_by == "source" and c.paired == 4
    assert c.spearman == pytest.approx(0.8)  # ranks 1,2,3,4 vs 1,2,4,3: 1 - 6*2/(4*15)
    assert [f["source"] for f in c.flipped] == ["p3.png"]  # 0.9 passes (>= 0.5), 0.45 fails
