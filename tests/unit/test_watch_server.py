"""The watch in the service: the hooks of the three APIs (run / step from native fields or the
X-Judge-Gateway-* headers), bad tags as each protocol's bad input, the record folder, GET
/v1/watch, shedding under overload, and a shadow that never holds up the trainer's response.

Judges play on the fault-injection backend: `quality` (training) and `shade`, a shadow whose
P(yes) is the first image's mean brightness (tests/support/fake_openai.py). Real judges watch a
real training run in tests/integration/test_watch_hacking.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time

import httpx
import numpy as np
import pytest

from judge_gateway import runs
from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.conftest import png_bytes
from tests.support.cosmos_client import enqueue_body, headers, poll
from tests.support.fault_gateway import fault_config


def watch_config(base_url: str, folder, **watch) -> dict:
    data = fault_config(base_url)
    data["backends"]["bright"] = {"model": "fake-p-from-image", "base_urls": [base_url], "timeout_s": 10}
    data["judges"]["shade"] = {"kind": "yes_no", "backend": "bright", "template": "image_quality@1",
                               "default": False}
    data["flow_factory"] = {"profiles": {"t2i": {"judges": {"quality": 1.0}}}}
    data["watch"] = {"enabled": True, "shadows": {"quality": ["shade"]}, "sample_rate": 1.0, "seed": 0,
                     "folder": str(folder), "window_s": 3600, "baseline_windows": 1, **watch}
    return data


@pytest.fixture
async def make_app(fake_backend, tmp_path):
    made = []

    async def make(**watch):
        gw = Gateway(validate_config(watch_config(fake_backend.base_url, tmp_path / "watch", **watch)))
        app = create_app(gw)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost")
        made.append((client, app, gw))
        return client, app.state.watch

    yield make
    for client, app, gw in made:
        await client.aclose()
        await app.state.cosmos_rl.aclose()
        await app.state.watch.aclose()
        await gw.aclose()


def b64png(seed: int, gray: int | None = None) -> str:
    if gray is None:
        return base64.b64encode(png_bytes(seed)).decode()
    from io import BytesIO

    from PIL import Image

    buf = BytesIO()
    Image.fromarray(np.full((24, 32, 3), gray, dtype=np.uint8)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


async def until(predicate, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)
    return value


def native_body(step: int | None, n: int = 3, run: str | None = "exp-1", gray: int | None = None) -> dict:
    body = {"samples": [{"prompt": f"p{step}-{i}", "image": b64png(i, gray)} for i in range(n)],
            "judges": ["quality"]}
    if run is not None:
        body["run"] = run
    if step is not None:
        body["step"] = step
    return body


async def test_native_steps_become_windows_with_a_record_and_a_report(make_app, tmp_path):
    client, watch = await make_app()
    for step in range(3):
        r = await client.post("/v1/rewards", json=native_body(step, gray=40 + 80 * step))
        assert r.status_code == 200, r.text
    await until(lambda: watch.report().queue.scored == 9)
    # steps 0 and 1 are sealed (a later step closed them); step 2's window is open
    run = await until(lambda: next((x for x in watch.report().runs if len(x.windows) == 2), None))
    assert run.run == "exp-1" and run.windowing == "step" and run.note is None
    assert [w.steps for w in run.windows] == [[0, 0], [1, 1]] and run.open_samples == 3
    w1 = run.windows[1]
    assert w1.judges["quality"].scored == 3 and w1.judges["shade"].valid == 3
    # shade's P(yes) is brightness / 255: the window of gray 120 scores ~0.47
    assert w1.judges["shade"].mean == pytest.approx(120 / 255, abs=0.02)
    assert w1.pairs[0].train == "quality" and w1.pairs[0].shadow == "shade"

    r = await client.get("/v1/watch", params={"run": "exp-1", "windows": 1})
    assert r.status_code == 200
    body = r.json()
    assert body["enabled"] and body["shadows"] == {"quality": ["shade"]} and body["queue"]["shed"] == {}
    assert [w["window"] for w in body["runs"][0]["windows"]] == [1]

    folder = tmp_path / "watch" / "exp-1"
    lines = runs.RunFolder(folder).read_objects()
    assert [x["index"] for x in lines] == list(range(6)) and {x["step"] for x in lines} == {0, 1}
    first = lines[0]
    assert set(first["scores"]) == {"quality", "shade"} and first["source"] == "watch:native"
    assert first["watch"]["train"] == ["quality"] and first["watch"]["shadows"] == ["shade"]
    assert first["prompt"] == "p0-0" and first["run"] == "exp-1" and first["window"] == 0
    info = runs.RunFolder(folder).read_info()
    assert info["judges"] == ["quality", "shade"] and info["watch"]["shadows"] == {"quality": ["shade"]}
    with_thumbs = [x for x in lines if "image" in x]
    assert with_thumbs and all((folder / x["image"]).stat().st_size > 100 for x in with_thumbs)
    report = json.loads((folder / "watch.json").read_text())
    assert report["run"] == "exp-1" and len(report["windows"]) == 2


async def test_headers_tag_flow_factory_and_cosmos_rl_and_their_bodies_stay_the_peers(make_app):
    client, watch = await make_app()
    tags = {"X-Judge-Gateway-Run": "ff run", "X-Judge-Gateway-Step": "7"}
    ff = {"prompt": ["a", "b"], "image": [b64png(1), b64png(2)], "video": None,
          "condition_images": None, "condition_videos": None}
    r = await client.post("/flow-factory/t2i/compute", json=ff, headers=tags)
    assert r.status_code == 200 and len(r.json()["rewards"]) == 2, r.text
    meta = {"reward_fn": {"quality": 1.0}, "prompts": ["c", "d"], "media_type": "image"}
    arr = np.random.default_rng(0).integers(0, 256, size=(2, 16, 16, 3), dtype=np.uint8)
    r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, arr),
                          headers={**headers(), "X-Judge-Gateway-Run": "cosmos", "X-Judge-Gateway-Step": "3"})
    assert r.status_code == 200, r.text
    assert (await poll(client, r.json()["uuid"], "quality")).status_code == 200
    await until(lambda: watch.report().queue.scored == 4)
    runs_by_name = {x.run: x for x in watch.report().runs}
    assert set(runs_by_name) == {"ff run", "cosmos"}
    assert runs_by_name["ff run"].windowing == runs_by_name["cosmos"].windowing == "step"
    # the run name with a space gets a folder of its own
    await watch.aclose()
    folders = {r.run: r.folder for r in watch.report().runs}
    lines = runs.RunFolder(__import__("pathlib").Path(folders["ff run"])).read_objects()
    assert {x["api"] for x in lines} == {"flow_factory"} and {x["step"] for x in lines} == {7}
    cosmos_lines = runs.RunFolder(__import__("pathlib").Path(folders["cosmos"])).read_objects()
    assert {x["api"] for x in cosmos_lines} == {"cosmos_rl"} and [x["prompt"] for x in cosmos_lines] == ["c", "d"]


@pytest.mark.parametrize("step", ["-1", "1.5", "seven", "9" * 17])
async def test_a_malformed_step_header_is_each_protocols_bad_input(make_app, step):
    client, watch = await make_app()
    bad = {"X-Judge-Gateway-Step": step}
    r = await client.post("/v1/rewards", json=native_body(None), headers=bad)
    assert r.status_code == 422 and r.json()["error"]["field"] == "X-Judge-Gateway-Step", r.text
    r = await client.post("/flow-factory/t2i/compute", json={"prompt": ["a"], "image": [b64png(1)]}, headers=bad)
    assert r.status_code == 200 and "X-Judge-Gateway-Step" in r.json()["error"]  # the client does not retry
    meta = {"reward_fn": {"quality": 1.0}, "prompts": ["c"], "media_type": "image"}
    r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, np.zeros((1, 8, 8, 3), np.uint8)),
                          headers={**headers(), **bad})
    assert r.status_code == 400 and "X-Judge-Gateway-Step" in r.json()["message"]
    assert watch.report().queue.offered == 0


async def test_bad_run_names_are_refused_and_body_fields_win_over_headers(make_app):
    client, watch = await make_app()
    r = await client.post("/v1/rewards", json=native_body(0, run=" padded"))
    assert r.status_code == 422 and r.json()["error"]["field"] == "run"
    r = await client.post("/v1/rewards", json={**native_body(0), "step": -1})
    assert r.status_code == 422
    r = await client.post("/v1/rewards", json=native_body(4, run="body"),
                          headers={"X-Judge-Gateway-Run": "header", "X-Judge-Gateway-Step": "9"})
    assert r.status_code == 200
    await until(lambda: watch.report().queue.scored == 3)
    assert [x.run for x in watch.report().runs] == ["body"]


async def test_without_steps_windows_are_cut_by_count_and_the_report_says_so(make_app):
    client, watch = await make_app(window_samples=4)
    for _ in range(3):
        assert (await client.post("/v1/rewards", json=native_body(None, run=None))).status_code == 200
    run = await until(lambda: next((x for x in watch.report().runs if len(x.windows) == 2), None))
    assert run.run == "default" and run.windowing == "time"
    assert "sent no step" in run.note and "window_samples = 4" in run.note
    assert [w.samples for w in run.windows] == [4, 4] and run.open_samples == 1


async def test_the_response_does_not_wait_for_a_slow_shadow(make_app, fake_backend):
    client, watch = await make_app()
    gw = watch.gateway
    gw.judges["shade"] = gw.judges["stalled"]  # a shadow that stalls past its 0.5 s deadline
    started = time.monotonic()
    r = await client.post("/v1/rewards", json=native_body(0))
    elapsed = time.monotonic() - started
    assert r.status_code == 200
    # the shadows had not finished when the response came back: they ran after it
    assert watch.report().queue.scored == 0 < watch.report().queue.sampled == 3, elapsed
    await until(lambda: watch.report().queue.scored == 3)
    await watch.aclose()
    lines = runs.RunFolder(watch.folder / "exp-1").read_objects()
    assert [x["scores"]["shade"]["error"]["code"] for x in lines] == ["timeout"] * 3
    assert all(x["scores"]["quality"]["valid"] and not x["valid"] for x in lines)


async def test_overload_is_shed_and_counted_never_queued_without_bound(make_app):
    client, watch = await make_app(queue_size=2, batch_size=1)
    watch.gateway.judges["shade"] = watch.gateway.judges["stalled"]
    r = await client.post("/v1/rewards", json=native_body(0, n=12))
    assert r.status_code == 200
    q = watch.report().queue
    assert q.sampled == 12 and q.depth <= 2
    # the first sample is taken by the worker, two wait; the rest are shed
    assert q.shed["queue_full"] >= 12 - 3
    metrics = (await client.get("/metrics")).text
    assert 'judge_gateway_watch_shed_total{reason="queue_full"}' in metrics
    assert 'judge_gateway_watch_samples_total{outcome="sampled"} 12.0' in metrics
    await until(lambda: watch.report().queue.scored + sum(watch.report().queue.shed.values()) == 12)


async def test_a_busy_backend_holds_the_shadows_back_until_they_wait_too_long(make_app):
    client, watch = await make_app(max_wait_s=0.3, backend_headroom=0.5)
    pool = watch.gateway.pools["bright"]
    pool.replicas[0].outstanding = pool.cfg.max_concurrency  # the trainer holds every slot
    assert (await client.post("/v1/rewards", json=native_body(0))).status_code == 200
    await until(lambda: watch.report().queue.shed.get("waited_too_long") == 3)
    assert watch.report().queue.scored == 0
    pool.replicas[0].outstanding = 0
    assert (await client.post("/v1/rewards", json=native_body(1))).status_code == 200
    await until(lambda: watch.report().queue.scored == 3)


async def test_watch_off_ignores_the_headers_and_says_it_is_off(fake_backend, tmp_path):
    data = watch_config(fake_backend.base_url, tmp_path)
    data["watch"]["enabled"] = False
    gw = Gateway(validate_config(data))
    app = create_app(gw)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
        r = await client.post("/v1/rewards", json=native_body(0), headers={"X-Judge-Gateway-Step": "x"})
        assert r.status_code == 200
        assert (await client.get("/v1/watch")).json() == {"enabled": False, "sample_rate": None, "shadows": {},
                                                          "queue": None, "runs": []}
    await gw.aclose()
    assert not (tmp_path / "exp-1").exists()


def test_a_second_process_on_the_same_run_writes_a_folder_of_its_own(tmp_path):
    from judge_gateway.watch.record import RunRecord, folder_name

    first = RunRecord(tmp_path, "exp/1", {"judges": ["a"]}, max_file_bytes=4096, keep_files=0)
    second = RunRecord(tmp_path, "exp/1", {"judges": ["a"]}, max_file_bytes=4096, keep_files=0)  # a lock of its own
    assert first.folder.name == folder_name("exp/1") != second.folder.name and "@" not in second.folder.name
    assert first.folder.name.startswith("exp_1-")
    first.append([runs.ScoreLine(index=i, text="x" * 1000) for i in range(5)])
    first.append([runs.ScoreLine(index=5)])  # past max_file_bytes: scores.jsonl was rotated first
    assert (first.folder / "scores.1.jsonl").exists()
    assert [x["index"] for x in runs.RunFolder(first.folder).read_objects()] == [5]
    first.close()
    again = RunRecord(tmp_path, "exp/1", {"judges": ["b"]}, max_file_bytes=4096, keep_files=0)
    assert again.folder == first.folder and again.next_index == 6  # appends after the last index
    assert runs.RunFolder(again.folder).read_info()["judges"] == ["a", "b"]
    again.close()
    second.close()


def test_run_folders_on_disk_are_bounded_by_count_and_age(tmp_path):
    """One new run per request filled the disk with run folders (511 in 46 s): opening a run's
    record removes the least recently written beyond watch.max_run_folders and those older than
    watch.max_run_age_days, never one a record holds open."""
    import os

    from judge_gateway.watch.record import RunRecord, prune_runs

    now = time.time()
    for i in range(6):  # run-0 oldest ... run-5 newest
        folder = tmp_path / f"run-{i}"
        folder.mkdir()
        (folder / "run.json").write_text("{}")
        os.utime(folder / "run.json", (now - 1000 * (6 - i), now - 1000 * (6 - i)))
    (tmp_path / "not-a-run").mkdir()  # no run.json: not the watch's, left alone
    held = RunRecord(tmp_path, "run-0", {"judges": ["a"]}, max_file_bytes=4096, keep_files=0)  # written now
    os.utime(held.folder / "run.json", (now - 10_000, now - 10_000))  # the oldest, but held open
    assert prune_runs(tmp_path, keep=3, max_age_s=0, now=now) == ["run-2", "run-1"]  # run-0 is held
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-a-run", "run-0", "run-3", "run-4", "run-5"]
    assert prune_runs(tmp_path, keep=0, max_age_s=2500, now=now) == ["run-3"]  # 3000 s old; run-0 held
    held.close()
    assert prune_runs(tmp_path, keep=0, max_age_s=2500, now=now) == ["run-0"]
    assert prune_runs(tmp_path, keep=0, max_age_s=0, now=now) == []  # both bounds off
    # a new record applies the bounds itself, and is never its own victim
    fresh = RunRecord(tmp_path, "run-new", {"judges": ["a"]}, max_file_bytes=4096, keep_files=0, max_run_folders=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-a-run", "run-new"]
    fresh.close()


async def test_a_thumbnail_index_too_large_for_any_record_is_a_422(make_app):
    client, watch = await make_app()
    for step in range(2):  # a later step seals step 0's window: the run has a record on disk
        assert (await client.post("/v1/rewards", json=native_body(step))).status_code == 200
    await until(lambda: any(r.windows for r in watch.report().runs))
    r = await client.get("/v1/watch/thumbnail", params={"run": "exp-1", "index": "9" * 301})
    assert r.status_code == 422 and "index" in r.text  # was a 500: a file name too long for the OS
    r = await client.get("/v1/watch/thumbnail", params={"run": "exp-1", "index": 2**53})
    assert r.status_code == 404


def test_tags_travel_through_a_stored_entry_for_queued_cosmos_rl_work():
    from judge_gateway.watch import RunTags, tags_from

    tags = tags_from({"x-judge-gateway-run": "exp", "x-judge-gateway-step": "12"})
    assert tags == RunTags(run="exp", step=12, run_given=True)
    assert RunTags.from_entry(tags.as_entry()) == tags
    unnamed = tags_from({"x-judge-gateway-step": "3"})
    assert unnamed.run == "default" and RunTags.from_entry(unnamed.as_entry()) == unnamed
    assert RunTags.from_entry(None) is None and RunTags.from_entry({"step": True}) == RunTags()


def test_thumbnails_of_an_image_and_of_a_videos_frames():
    import io

    import numpy as np
    from PIL import Image

    from judge_gateway.media import ImageMedia, VideoMedia
    from judge_gateway.schema import SampleInput
    from judge_gateway.watch.thumbs import thumbnail

    image = ImageMedia.from_array(np.full((300, 600, 3), 200, dtype=np.uint8))
    data, kind = thumbnail(SampleInput(prompt="p", image=image), px=120, video_frames=3)
    assert kind == "image" and Image.open(io.BytesIO(data)).size == (120, 60)
    frames = np.stack([np.full((40, 80, 3), 25 * t, dtype=np.uint8) for t in range(9)])
    data, kind = thumbnail(SampleInput(prompt="p", video=VideoMedia.from_array(frames, fps=8.0)), px=40,
                           video_frames=3)
    strip = np.asarray(Image.open(io.BytesIO(data)).convert("L"))
    assert kind == "video" and strip.shape == (20, 3 * 40 + 2 * 2)  # frames 0, 4 and 8 side by side
    assert [int(round(strip[10, x])) for x in (20, 62, 104)] == pytest.approx([0, 100, 200], abs=3)
    assert thumbnail(SampleInput(prompt="no media"), px=40, video_frames=3) is None
