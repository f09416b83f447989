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
from judge_gateway.browse.stats import (
    compare_runs,
    invalid_by_code,
    rank_groups,
    valid_rewards,
)
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


# ---- hosts, served folders, A/B pairs, invalid rewards, hostile names and lines --------------


def _write_run(d, lines, info=None):
    d.mkdir(parents=True)
    (d / "scores.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    if info is not None:
        (d / "run.json").write_text(json.dumps(info))
    return d


def _q(reward, valid=True, **details):
    return {"judge": "q", "reward": reward if valid else None, "valid": valid, "details": details,
            "error": None if valid else {"code": "parse_error", "message": "no answer"}}


def _local(runs):
    return TestClient(create_browse_app(runs), base_url="http://localhost")


def test_a_foreign_host_header_is_refused(built):
    """DNS rebinding: a page on evil.example whose name resolves to 127.0.0.1 sends Host: evil.example."""
    runs = load_runs([str(built.a)])
    assert TestClient(create_browse_app(runs), base_url="http://evil.example").get("/run/0").status_code == 400
    assert TestClient(create_browse_app(runs), base_url="http://localhost:8765").get("/run/0").status_code == 200
    assert TestClient(create_browse_app(runs), base_url="http://127.0.0.1").get("/run/0").status_code == 200

    from judge_gateway.browse.app import allowed_hosts
    assert allowed_hosts("127.0.0.1") == ["localhost", "127.0.0.1"]
    assert allowed_hosts("0.0.0.0", ["box.lan"]) == ["localhost", "127.0.0.1", "box.lan"]
    lan = create_browse_app(runs, allowed_hosts("10.0.0.5"))
    assert TestClient(lan, base_url="http://10.0.0.5:8765").get("/run/0").status_code == 200
    assert TestClient(lan, base_url="http://evil.example").get("/run/0").status_code == 400


def test_only_the_media_folders_are_served(tmp_path, fake_backend):
    """The input root of a JSONL is its parent folder (it can be $HOME): a run records the folders
    its media came from, and only those (and the run folder) are served."""
    from tests.support.media_files import write_image

    inputs = tmp_path / "home"
    (inputs / "media").mkdir(parents=True)
    write_image(inputs / "media" / "a.png", seed=1)
    (inputs / "private.png").write_bytes(b"\x89PNG private")
    (inputs / "list.jsonl").write_text(json.dumps({"id": "a", "prompt": "p", "image": "media/a.png"}) + "\n")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[backends.fake]\nmodel = "fake-yes"\nbase_urls = ["{fake_backend.base_url}"]\n'
                   '[judges.q]\nkind = "yes_no"\nbackend = "fake"\ntemplate = "image_quality@1"\n')
    run = tmp_path / "run"
    assert cli_main(["score", str(inputs / "list.jsonl"), "-o", str(run), "--config", str(cfg),
                     "--no-progress"]) == 0
    lines = [json.loads(x) for x in (run / "scores.jsonl").read_text().splitlines()]
    assert lines[0]["image"] == "media/a.png"
    lines.append({**lines[0], "index": 1, "image": "private.png"})  # a line naming a file beside the JSONL
    (run / "scores.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    client = _local(load_runs([str(run)]))
    assert client.get("/run/0/media/0/image").content == (inputs / "media" / "a.png").read_bytes()
    assert client.get("/run/0/media/1/image").status_code == 404
    info = json.loads((run / "run.json").read_text())
    assert info["media_roots"] == [str((inputs / "media").resolve())]


def _seeds_run(d, rewards_by_prompt, checkpoint):
    """Two prompts x several seeds: lines in index order p0 s0, p1 s0, p0 s1, ..."""
    lines, i = [], 0
    for seed in range(max(len(v) for v in rewards_by_prompt.values())):
        for prompt, rewards in rewards_by_prompt.items():
            if seed < len(rewards):
                lines.append({"index": i, "source": f"{checkpoint}_{prompt}_{seed}.png", "key": f"{checkpoint}-{i}",
                              "prompt": prompt, "checkpoint": checkpoint, "scores": {"q": _q(rewards[seed])},
                              "reward": rewards[seed], "valid": True})
                i += 1
    return _write_run(d, lines)


def test_ab_pairs_the_kth_seed_of_a_prompt_with_the_kth(tmp_path):
    a = _seeds_run(tmp_path / "ck1", {"p0": [0.1, 0.5, 0.9], "p1": [0.2, 0.6, 0.3]}, "ck1")
    b = _seeds_run(tmp_path / "ck2", {"p0": [0.2, 0.4, 0.8], "p1": [0.3, 0.7, 0.1]}, "ck2")
    ra, rb = load_runs([str(a), str(b)])
    c = compare_runs(ra, rb, "q")
    assert c.paired_by == "prompt" and c.paired == 6
    # pairs (0.1, 0.2) (0.2, 0.3) (0.5, 0.4) (0.6, 0.7) (0.9, 0.8) (0.3, 0.1): ranks 1 2 4 5 6 3 vs
    # 2 3 4 5 6 1, sum d^2 = 6, rho = 1 - 6 * 6 / (6 * 35)
    assert c.spearman == pytest.approx(1 - 36 / 210)
    assert c.mean_b == pytest.approx(2.5 / 6)
    assert [(f["index_a"], f["index_b"]) for f in c.flipped] == [(2, 2)]  # 0.5 passes, 0.4 fails
    assert c.repeated == 2 and c.ambiguous == 0
    page = _local([ra, rb]).get("/compare?a=0&b=1")
    assert "2 value(s) of prompt name several samples" in page.text and "ab-ambiguous" not in page.text
    # B lost a seed of p0: which of A's three seeds it was is unknown; the page says so.
    b2 = _seeds_run(tmp_path / "ck2b", {"p0": [0.2, 0.4], "p1": [0.3, 0.7, 0.1]}, "ck2")
    ra, rb2 = load_runs([str(a), str(b2)])
    c = compare_runs(ra, rb2, "q")
    assert c.paired == 5 and c.ambiguous == 1
    assert 'id="ab-ambiguous"' in _local([ra, rb2]).get("/compare?a=0&b=1").text


def test_invalid_samples_with_a_filled_reward_are_not_valid_rewards(tmp_path):
    """combine.on_invalid = fill / skip: an invalid sample carries a combined reward; it is no
    valid reward in the histograms, A/B or ranking."""
    from judge_gateway.browse.stats import COMBINED

    def run(d, rewards):
        lines = [{"index": i, "source": f"{i}.png", "key": f"k{i}", "prompt": f"p{i}",
                  "scores": {"q": _q(r, valid=r is not None)}, "reward": 0.0 if r is None else r,
                  "valid": r is not None} for i, r in enumerate(rewards)]
        return _write_run(d, lines)

    ra, rb = load_runs([str(run(tmp_path / "a", [0.9, None, 0.6, 0.3])), str(run(tmp_path / "b", [0.8, 0.7, None, 0.2]))])
    assert valid_rewards(ra, COMBINED) == [0.9, 0.6, 0.3]
    c = compare_runs(ra, rb, COMBINED)
    assert c.paired == 2 and c.mean_a == pytest.approx(0.6) and c.mean_b == pytest.approx(0.5)
    _, rows = rank_groups([ra], COMBINED)
    assert rows[0].n == 3 and rows[0].mean == pytest.approx(0.6)
    stats = _local([ra, rb]).get("/stats").text
    assert '<td>a</td><td>3</td><td>0.6000</td>\n<td class="filled">1</td><td>0.0000</td>' in stats


def test_dollar_signs_in_names_are_plain_text(tmp_path, capsys):
    """Names are user text: `$\\x$` is no mathtext (matplotlib would fail to parse it, and every
    chart would be a 500)."""
    lines = [{"index": i, "source": f"{i}.png", "key": f"k{i}", "prompt": "p", "checkpoint": f"step$\\{i}$",
              "scores": {"q$\\oops$": {**_q(0.2 * i + 0.1), "judge": "q$\\oops$"}}, "reward": 0.2 * i + 0.1,
              "valid": True} for i in range(4)]
    a = _write_run(tmp_path / "run$\\bad$", lines)
    b = _write_run(tmp_path / "run$_$2", lines)
    client = _local(load_runs([str(a), str(b)]))
    for url in ("/run/0", "/stats", "/compare?a=0&b=1", "/compare?a=0&b=1&judge=q$\\oops$"):
        r = client.get(url)
        assert r.status_code == 200 and r.text.count("<svg") >= (2 if url != "/run/0" else 0), url
    out = tmp_path / "r.html"
    assert cli_main(["browse", str(a), str(b), "--export", str(out)]) == 0
    assert out.read_text().count("<svg") >= 6


def test_malformed_lines_are_normalised_not_500(tmp_path, capsys):
    good = {"index": 0, "source": "a.png", "key": "k0", "prompt": "p", "scores": {"q": _q(0.4)},
            "reward": 0.4, "valid": True}
    lines = [
        good,
        {"index": 1, "scores": {"q": {"valid": True}}},  # no reward, source, prompt, details, template
        {"index": 2, "scores": {"q": {"valid": False, "error": {"message": "no code"}, "template": {"id": "t"}}},
         "error": "a string", "valid": False},
        {"index": "three", "scores": {}},  # skipped: no integer index
        {"index": 4, "scores": {"q": "not an object", "r": {"reward": "0.5", "valid": True, "details": [1]}},
         "reward": "high", "image": 7},
        {"index": 4, "scores": {}},  # skipped: repeats index 4
        {"index": 5, "scores": None, "reward": float("nan")},
    ]
    d = tmp_path / "run"
    d.mkdir()
    (d / "scores.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (run,) = load_runs([str(d)])
    err = capsys.readouterr().err
    assert "line 4: skipped, `index` is not an integer ('three')" in err
    assert "line 6: skipped, index 4 repeats an earlier line" in err
    assert [x["index"] for x in run.lines] == [0, 1, 2, 4, 5] and run.skipped == 2
    one = run.sample(1)["scores"]["q"]
    assert one["reward"] is None and one["valid"] is False and one["error"]["code"] == "unknown"
    assert run.sample(2)["scores"]["q"]["error"] == {"code": "unknown", "message": "no code"}
    assert run.sample(2)["scores"]["q"]["template"] == {"id": "t", "version": "", "sha256": ""}
    four = run.sample(4)
    assert list(four["scores"]) == ["r"] and four["scores"]["r"]["valid"] is False and four["reward"] is None
    assert "image" not in four and run.sample(5)["reward"] is None
    client = _local([run])
    for url in ["/run/0", "/stats", *(f"/run/0/sample/{i}" for i in (0, 1, 2, 4, 5))]:
        assert client.get(url).status_code == 200, url
    assert client.get("/run/0/sample/3").status_code == 404


def test_the_frames_shown_are_the_frames_the_judge_saw(tmp_path):
    """65 source frames, num_frames = 7: the sampler's half-up rounding and even_frames give
    0 11 21 32 43 53, which no arithmetic sequence from first/step reproduces (43 vs 42)."""
    from judge_gateway.browse.data import judge_frames
    from judge_gateway.media import (
        VideoMedia,
        VideoSampling,
        encode_video,
        sample_frame_indices,
    )
    from tests.support.media_files import write_video

    sampling = VideoSampling(num_frames=7)
    exact, _ = sample_frame_indices(65, 8.0, sampling)
    assert exact == [0, 11, 21, 32, 43, 53]
    frames = np.random.default_rng(0).integers(0, 256, (65, 24, 32, 3), dtype=np.uint8)
    details = encode_video(VideoMedia.from_array(frames, 8), sampling).details()
    assert details["frame_indices"] == exact
    recorded = judge_frames({"details": {"video": details}})
    assert recorded.indices == exact and recorded.exact
    old = {k: v for k, v in details.items() if k != "frame_indices"}  # a run from before the list
    rebuilt = judge_frames({"details": {"video": old}})
    assert rebuilt.indices == [0, 11, 21, 32, 42, 53] and not rebuilt.exact
    head = judge_frames({"details": {"media": "video", "frame_indices": [0, 3, 9, 12]}})
    assert head.indices == [0, 3, 9, 12] and head.exact

    inputs = tmp_path / "inputs"
    inputs.mkdir()
    write_video(inputs / "c.mp4", frames=65, fps=8, size=(32, 24))
    base = {"index": 0, "source": "c.mp4", "key": "k", "prompt": "p", "video": "c.mp4", "reward": 0.5, "valid": True}
    info = {"input_root": str(inputs), "media_roots": [str(inputs)], "judges": ["q"]}
    new = _write_run(tmp_path / "new", [{**base, "scores": {"q": _q(0.5, video=details)}}], info)
    older = _write_run(tmp_path / "old", [{**base, "scores": {"q": _q(0.5, video=old)}}], info)
    client = _local(load_runs([str(new), str(older)]))
    page = client.get("/run/0/sample/0").text
    assert "the 6 frames the judge saw (source frames 0, 11, 21, 32, 43, 53)" in page and "approximate" not in page
    assert "approximate</span>" in client.get("/run/1/sample/0").text
    assert client.get("/run/0/frames/0/q.png").content[:4] == b"\x89PNG"


# --- the ranking's interval and an A/B of runs with nothing in common ---------------------------

def test_the_ranking_interval_of_a_bounded_reward_stays_within_its_bounds():
    """A few rewards near 1: mean +- 1.96 standard errors passed 1 (issue 33 saw 1.0895); the
    percentile bootstrap lies within the values' range, and is still a 95% interval."""
    from judge_gateway.browse.stats import BOOTSTRAP_MAX_VALUES, mean_interval

    near_one = np.array([1.0, 1.0, 0.7, 1.0, 0.95])
    normal_high = near_one.mean() + 1.959964 * near_one.std(ddof=1) / np.sqrt(len(near_one))
    assert normal_high > 1.0
    low, high = mean_interval(near_one)
    assert 0.7 <= low < near_one.mean() < high <= 1.0
    assert mean_interval(near_one) == (low, high)  # a fixed seed: the same page every load
    assert all(np.isnan(mean_interval(np.array([0.4]))))  # one value: no interval
    many = np.array([1.0] * BOOTSTRAP_MAX_VALUES + [0.0, 0.0])  # the normal interval, clipped
    assert mean_interval(many)[1] == 1.0 and mean_interval(many)[0] < many.mean()
    # Coverage: rewards from Beta(8, 1) (mean 8/9, piled up near 1), 20 a group, 200 groups.
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(200):
        v = rng.beta(8, 1, 20)
        lo, hi = mean_interval(v)
        assert 0.0 <= lo <= hi <= 1.0
        hits += lo <= 8 / 9 <= hi
    assert hits / 200 >= 0.88, hits  # the percentile bootstrap at n = 20: a little under 95%


def test_an_ab_of_runs_with_no_common_sample_says_so_instead_of_a_table_of_nan(tmp_path):
    def run(d, tag, rewards):
        return _write_run(d, [{"index": i, "source": f"{tag}{i}.png", "key": f"{tag}k{i}", "prompt": f"{tag} {i}",
                               "scores": {"q": _q(r)}, "reward": r, "valid": True} for i, r in enumerate(rewards)])

    ra, rb = load_runs([str(run(tmp_path / "a", "cat", [0.2, 0.4, 0.9])), str(run(tmp_path / "b", "dog", [0.7]))])
    assert compare_runs(ra, rb, "q").paired == 0
    page = _local([ra, rb]).get("/compare?a=0&b=1").text
    assert 'id="ab-no-pairs"' in page and "No sample of a pairs with a sample of b" in page
    assert "nan" not in page and 'id="ab-summary"' not in page
    assert "<td>b</td><td>1</td><td>0.7000</td><td>- (one sample)</td>" in page  # each run's mean still ranked


def test_the_sample_page_shows_the_text_ocr_recognised(tmp_path):
    """OCR's target and recognised text are the reason for its number: shown with the score, not
    only in the collapsed details (a video's, per frame)."""
    ocr = {"judge": "ocr", "reward": 0.8, "valid": True,
           "details": {"target": "Hello World", "recognized": "HelloWorId", "edit_distance": 1}}
    video_ocr = {**ocr, "reward": 0.5, "details": {"target": "OPEN", "recognized": ["OPEN", "0PEN"], "frames": 2}}
    lines = [{"index": 0, "source": "0.png", "key": "k0", "prompt": 'a sign "Hello World"', "scores": {"ocr": ocr},
              "reward": 0.8, "valid": True},
             {"index": 1, "source": "1.png", "key": "k1", "prompt": 'a sign "OPEN"', "scores": {"ocr": video_ocr},
              "reward": 0.5, "valid": True}]
    client = _local(load_runs([str(_write_run(tmp_path / "a", lines))]))
    page = client.get("/run/0/sample/0").text
    shown = page.split("<details>")[0]  # before anything collapsed
    assert ('<p class="ocr-text"><b>target:</b> Hello World · <b>recognised:</b> HelloWorId · '
            "<b>edit distance</b> 1</p>") in shown
    assert "<b>recognised:</b> OPEN | 0PEN" in client.get("/run/0/sample/1").text.split("<details>")[0]
