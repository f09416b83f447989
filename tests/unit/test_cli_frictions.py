"""What a newcomer met in the first hour with the CLI, each pinned by a test: `tune` with no usable
pair, `score`'s bad-input reasons, summary and fresh-machine judges, heads started for nothing,
`judges --server`, the OCR version and video sampling, `prompts diff` / `verify`, GIFs and
prompt-less images in a folder, `schema | head`, and what `serve` says it loaded."""

from __future__ import annotations

import asyncio
import base64
import importlib.metadata
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from judge_gateway.cli import main as cli_main
from judge_gateway.config import DEFAULT_CONFIG_PATH, load_config, validate_config
from tests.conftest import png_bytes
from tests.support.cli_configs import vlm_config, write_config
from tests.support.fake_head_worker import fake_head_python
from tests.support.live_server import LiveServer
from tests.support.media_files import write_image, write_video

ROOT = Path(__file__).resolve().parents[2]
DEAD = "http://127.0.0.1:9/v1"  # nothing listens on the discard port: connections are refused


def _fresh_machine_config(tmp_path: Path) -> str:
    """The embedded default config on a machine with no vLLM server (every backend refused)."""
    text = re.sub(r"http://127\.0\.0\.1:800\d/v1", DEAD, DEFAULT_CONFIG_PATH.read_text())
    path = tmp_path / "default-no-vllm.toml"
    path.write_text(text)
    return str(path)


def _fake_and_dead(tmp_path: Path, base_url: str, *, quality_name: str = "quality", ocr: bool = True) -> str:
    """A judge on the fake backend, one on a backend that is down, and (unless `ocr` is False) a
    local OCR head that is no default."""
    config = vlm_config(base_url, "fake-yes", {quality_name: {
        "kind": "yes_no", "template": "image_quality@1", "options": {"video_first_frame": True}}})
    config["backends"]["dead"] = {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "base_urls": [DEAD], "max_retries": 0}
    config["judges"]["dead"] = {"kind": "yes_no", "backend": "dead", "template": "vqa_alignment@1", "default": False}
    if ocr:
        config["judges"]["ocr"] = {"kind": "ocr", "default": False}
    return write_config(tmp_path, config)


def _folder(tmp_path: Path, n: int = 3) -> Path:
    media = tmp_path / "media"
    media.mkdir()
    for i in range(n):
        write_image(media / f"img{i}.png", seed=i)
        (media / f"img{i}.txt").write_text(f'a sign that says "hi {i}"')
    return media


def _rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "scores.jsonl").read_text().splitlines()]


# --- tune weights with no usable pair --------------------------------------------------------

def test_tune_weights_with_no_usable_pair_says_why_and_writes_nothing(tmp_path, capsys):
    from judge_gateway.tuning.cache import (
        CachedScore,
        CacheKey,
        ScoreCache,
        judge_identity,
    )
    from judge_gateway.tuning.prefs import load_preferences

    lines = []
    for i in range(6):
        (tmp_path / f"{i}a.png").write_bytes(png_bytes(2 * i))
        (tmp_path / f"{i}b.png").write_bytes(png_bytes(2 * i + 1))
        lines.append(json.dumps({"prompt": f"p{i}", "a": f"{i}a.png", "b": f"{i}b.png", "label": "ab"[i % 2]}))
    prefs = tmp_path / "prefs.jsonl"
    prefs.write_text("\n".join(lines) + "\n")
    doc = {"backends": {"b": {"model": "m", "base_urls": [DEAD]}},
           "judges": {j: {"kind": "yes_no", "backend": "b", "template": "image_quality@1"} for j in ("x", "y")}}
    cfg = validate_config(doc)
    cache = ScoreCache(tmp_path / "cache.jsonl")
    for pair in load_preferences(prefs).pairs:  # every cell scored, none valid
        for sample in (pair.a, pair.b):
            for name in ("x", "y"):
                cache.put(CacheKey(sample.key, name, *judge_identity(cfg, name)),
                          CachedScore(valid=False, error_code="answer_missing"))
    config = write_config(tmp_path, doc)
    out_dir = tmp_path / "profiles"
    rc = cli_main(["tune", "weights", "--config", config, "--judges", "x,y", "--data", str(prefs),
                   "--cache", str(tmp_path / "cache.jsonl"), "--cache-only", "--out-dir", str(out_dir),
                   "--no-progress"])
    captured = capsys.readouterr()
    assert rc == 2
    assert "only 0 of 6 labelled pairs have scores on both sides" in captured.err
    assert "nothing was written" in captured.err and "JSON compliant" not in captured.err
    assert not out_dir.exists()


# --- score: bad input, summary, fresh machine -------------------------------------------------

def test_a_truncated_video_keeps_the_reason_the_api_gives(tmp_path, fake_backend):
    from fastapi.testclient import TestClient

    from judge_gateway.gateway import Gateway
    from judge_gateway.server import create_app

    media = tmp_path / "media"
    media.mkdir()
    data = write_video(tmp_path / "whole.mp4", frames=16).read_bytes()
    (media / "cut.mp4").write_bytes(data[: len(data) // 2])
    (media / "cut.txt").write_text("a clip")
    config = _fake_and_dead(tmp_path, fake_backend.base_url)
    run = tmp_path / "run"
    assert cli_main(["score", str(media), "-o", str(run), "--config", config, "--no-progress"]) == 1
    message = _rows(run)[0]["error"]["message"]
    with TestClient(create_app(Gateway(load_config(config))), base_url="http://localhost") as client:
        r = client.post("/v1/rewards", json={"samples": [
            {"prompt": "a clip", "video": {"mp4": base64.b64encode((media / "cut.mp4").read_bytes()).decode()}}]})
    assert r.status_code == 422
    api = r.json()["error"]["errors"][0]
    assert api["field"] == "samples.0.video"
    assert message == f"video: {api['message']}", message  # not "1 validation error for SampleInput"


def test_the_summary_rows_add_up_and_no_name_is_cut(tmp_path, fake_backend, capsys):
    media = _folder(tmp_path, n=3)
    (media / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    (media / "broken.txt").write_text("a broken image")
    long_name = "image_quality_with_a_name_well_over_eighty_columns_when_tabled"
    config = _fake_and_dead(tmp_path, fake_backend.base_url, quality_name=long_name)
    rc = cli_main(["score", str(media), "-o", str(tmp_path / "run"), "--config", config, "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1
    assert long_name in err  # whole, not "image_quality_with_a…"
    assert "4 samples: 3 valid, 1 invalid (bad_input=1)" in err
    judge_row = next(line for line in err.splitlines() if long_name in line)
    assert [c.strip() for c in judge_row.split("│")[2:5]] == ["3", "3", "0"]  # scored, valid, invalid
    unscored = next(line for line in err.splitlines() if "(no judge ran)" in line)
    assert "bad_input=1" in unscored and [c.strip() for c in unscored.split("│")][4] == "1"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["unscored"] == {"samples": 1, "by_code": {"bad_input": 1}}


def test_default_judges_on_a_fresh_machine_say_once_what_cannot_score_and_how_to_start_it(tmp_path, capsys):
    media = _folder(tmp_path)
    run = tmp_path / "run"
    rc = cli_main(["score", str(media), "-o", str(run), "--config", _fresh_machine_config(tmp_path), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and not run.exists()  # nothing scored, no folder of invalid lines
    assert "2 of 2 judges cannot score here" in err
    assert err.count("image_quality, alignment:") == 1  # one entry for the judges of one backend
    assert "vllm serve Qwen/Qwen2.5-VL-7B-Instruct" in err
    assert "local heads that need no server (name them with --judges): ocr" in err
    assert "ejecting" not in err


def test_judges_that_can_score_go_on_with_one_warning_for_those_that_cannot(tmp_path, fake_backend, capsys,
                                                                            caplog):
    media = _folder(tmp_path)
    config = _fake_and_dead(tmp_path, fake_backend.base_url)
    with caplog.at_level(logging.WARNING):
        rc = cli_main(["score", str(media), "-o", str(tmp_path / "run"), "--config", config,
                       "--judges", "quality,dead", "--batch-size", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.count("1 of 2 judges cannot score here") == 1 and "can score here: quality" in err
    ejections = [r for r in caplog.records if "ejecting" in r.getMessage()]
    assert len(ejections) <= 1, [r.getMessage() for r in ejections]  # once per ejection, not per call
    assert all(r["scores"]["quality"]["valid"] for r in _rows(tmp_path / "run"))


# --- heads started for nothing, and the spurious "worker died" --------------------------------

def test_in_process_score_and_judges_start_no_head_they_do_not_use(tmp_path, fake_backend, monkeypatch, capsys):
    from judge_gateway.heads.supervisor import HeadSupervisor

    started = []
    monkeypatch.setattr(HeadSupervisor, "ensure_started", lambda self: started.append(self.name))
    media = _folder(tmp_path)
    config = _fake_and_dead(tmp_path, fake_backend.base_url)
    assert cli_main(["score", str(media), "-o", str(tmp_path / "run"), "--config", config, "--no-progress"]) == 0
    assert cli_main(["judges", "--config", config]) == 0
    out = capsys.readouterr().out
    assert started == []
    assert re.search(r"^ocr .*not loaded: a head loads at first use", out, re.MULTILINE)
    assert re.search(r"^quality .*default ready", out, re.MULTILINE)


async def test_a_head_closed_while_its_model_loads_is_not_reported_as_died(tmp_path, caplog):
    from judge_gateway.config import OcrOptions
    from judge_gateway.heads.supervisor import HeadSupervisor

    options = OcrOptions(python=fake_head_python(tmp_path), env={"JG_FAKE_HEAD_LOAD_S": "0.5"})
    worker = HeadSupervisor("ocr", "ocr", options)
    with caplog.at_level(logging.INFO, logger="judge_gateway"):
        assert (await worker.probe())[0] is False  # the probe starts the load
        while worker.pid is None:
            await asyncio.sleep(0.01)
        await worker.aclose()
        await asyncio.sleep(0.3)
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "died" in m or "restart" in m], messages
    assert worker.state == "closed"


def test_a_head_worker_imports_the_gateways_own_package_and_nothing_else(tmp_path):
    from judge_gateway.config import OcrOptions
    from judge_gateway.heads.supervisor import PACKAGE_DIR, HeadSupervisor

    env = HeadSupervisor("ocr", "ocr", OcrOptions(python="/some/head-venv/bin/python")).launch().env
    entries = env["PYTHONPATH"].split(":")
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(":") if p]
    assert entries[1:] == inherited  # one entry added, before the environment's own
    first = Path(entries[0])
    assert [p.name for p in first.iterdir()] == ["judge_gateway"]
    assert (first / "judge_gateway").resolve() == PACKAGE_DIR

    async def run() -> dict:
        worker = HeadSupervisor("fp", "ocr", OcrOptions(python=fake_head_python(tmp_path)))
        try:
            await worker.wait_ready()
            return dict(worker.info)
        finally:
            await worker.aclose()

    assert asyncio.run(run())["package"] == str(PACKAGE_DIR)


# --- judges --server, configs by name, serve's log --------------------------------------------

def test_judges_asks_a_running_server(tmp_path, fake_backend, capsys):
    from judge_gateway.gateway import Gateway
    from judge_gateway.server import create_app

    config = _fake_and_dead(tmp_path, fake_backend.base_url, ocr=False)  # a server probes its heads: none here
    with LiveServer(create_app(Gateway(load_config(config)))) as server:
        assert cli_main(["judges", "--server", server.url]) == 0
        out = capsys.readouterr().out
        assert cli_main(["judges", "--server", server.url, "quality", "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)
    assert re.search(r"^quality .* ready$", out, re.MULTILINE)
    # the server names the backend by replica, never by URL (backend URLs are not echoed to callers)
    assert re.search(r"^dead .*NOT READY \(replica 1 of 1: cannot connect", out, re.MULTILINE)
    assert "127.0.0.1:9" not in out
    assert "vllm serve Qwen/Qwen2.5-VL-7B-Instruct" in out
    assert [j["name"] for j in listed] == ["quality"] and listed[0]["ready"] is True


def test_shipped_configs_load_by_name_from_any_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert "cosmos_reason1" in load_config("cosmos_rl").judges
    assert load_config("default.toml").judges.keys() == load_config(None).judges.keys()
    with pytest.raises(ValueError, match=r"no shipped config of that name \(shipped: cosmos_rl, default"):
        load_config("cosmos")
    (tmp_path / "cosmos_rl").write_text('[judges.mine]\nkind = "ocr"\n')  # a file at the path wins
    assert list(load_config("cosmos_rl").judges) == ["mine"]
    assert cli_main(["configs"]) == 0 and "cosmos_rl" in capsys.readouterr().out
    assert cli_main(["configs", "cosmos_rl"]) == 0
    assert capsys.readouterr().out.startswith("# judge-gateway as a drop-in for cosmos-rl")


def test_up_hands_serve_the_shipped_config_it_was_named(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")  # its two vLLM servers (launch tables), then the gateway
    assert cli_main(["up", "--config", "cosmos_rl", "--dry-run"]) == 0
    cmd = next(line for line in capsys.readouterr().out.splitlines() if "judge_gateway.cli serve" in line)
    assert cmd.endswith(f"--config {DEFAULT_CONFIG_PATH.parent / 'cosmos_rl.toml'}"), cmd


def test_serve_says_which_config_and_judges_it_loaded():
    from judge_gateway.cli.serve import startup_lines

    lines = startup_lines(load_config("cosmos_rl"), "cosmos_rl")
    assert "shipped config `cosmos_rl`" in lines[1] and str(DEFAULT_CONFIG_PATH.parent) in lines[1]
    assert lines[2].startswith("9 judges; scored by default: none; on request: cosmos_reason1 (yes_no),")
    default = startup_lines(load_config(None), None)
    assert "scored by default: image_quality (yes_no), alignment (yes_no)" in default[2]


# --- OCR: version and video sampling ----------------------------------------------------------

def test_the_ocr_model_records_the_installed_rapidocr_version():
    from judge_gateway.config.head_options import OcrOptions
    from judge_gateway.heads.models.ocr import RapidOcrHead

    version = importlib.metadata.version("rapidocr")
    assert RapidOcrHead("ocr", OcrOptions(device="cpu")).load()["model"] == f"rapidocr {version} (PP-OCR)"


def test_ocr_reads_eight_frames_of_a_video_unless_the_judge_says_otherwise():
    from judge_gateway.heads.judge import OcrJudge
    from judge_gateway.media import sample_frame_indices

    default = validate_config({"judges": {"ocr": {"kind": "ocr"}}})
    judge = OcrJudge("ocr", default.judges["ocr"])
    idx, _ = sample_frame_indices(121, 24.0, judge.sampling)
    assert idx == [0, 17, 34, 51, 69, 86, 103, 120]
    assert default.model_dump(mode="json")["judges"]["ocr"]["video"]["num_frames"] == 8  # recorded in runs
    every = validate_config({"judges": {"ocr": {"kind": "ocr", "video": {"max_frames": 500}}}})
    assert len(sample_frame_indices(121, 24.0, OcrJudge("ocr", every.judges["ocr"]).sampling)[0]) == 121


# --- prompts diff / verify --------------------------------------------------------------------

def test_prompts_diff_shows_what_changed_between_two_versions(capsys):
    assert cli_main(["prompts", "diff", "vqa_alignment@1", "vqa_alignment@2"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("--- vqa_alignment@1 sha256:") and "+++ vqa_alignment@2 sha256:" in out
    assert '-user = \'<image>Does this figure show "{prompt}"?' in out
    assert cli_main(["prompts", "diff", "vqa_alignment@1", "vqa_alignment@2", "--rendered", "--prompt", "a cube"]) == 1
    assert '+[image]Is the image consistent with the text "a cube"?' in capsys.readouterr().out
    assert cli_main(["prompts", "diff", "image_quality@1", "image_quality@1"]) == 0


def test_verify_names_the_command_that_locks_a_new_template(tmp_path, monkeypatch, capsys):
    from tests.support.template_copy import templates_with_an_unlocked_version

    templates_with_an_unlocked_version(tmp_path, monkeypatch)
    assert cli_main(["prompts", "verify"]) == 1
    err = capsys.readouterr().err
    assert "release it with `judge-gateway prompts lock`" in err and "lock_new_templates()" not in err


# --- a folder: GIFs, other media, images without a prompt -------------------------------------

def test_a_folder_reads_gifs_names_what_it_skips_and_warns_of_missing_prompts(tmp_path, fake_backend, capsys):
    media = tmp_path / "media"
    media.mkdir()
    Image.new("RGB", (32, 24), "red").save(media / "still.gif")
    frames = [Image.new("RGB", (32, 24), c) for c in ("red", "green", "blue")]
    frames[0].save(media / "moving.gif", save_all=True, append_images=frames[1:], duration=100, loop=0)
    for name in ("still", "moving"):
        (media / f"{name}.txt").write_text(f"a {name} picture")
    Image.new("RGB", (32, 24), "white").save(media / "scan.bmp")
    (media / "notes.md").write_text("not media")
    write_image(media / "no_prompt.png")
    run = tmp_path / "run"
    rc = cli_main(["score", str(media), "-o", str(run), "--config", _fake_and_dead(tmp_path, fake_backend.base_url),
                   "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 0, err
    rows = {r["source"]: r for r in _rows(run)}
    assert set(rows) == {"moving.gif", "no_prompt.png", "still.gif"}
    assert rows["still.gif"]["image"] == "still.gif" and rows["moving.gif"]["video"] == "moving.gif"
    assert all(r["valid"] for r in rows.values())
    from judge_gateway.inputs import read_inputs

    moving = next(it for it in read_inputs(media).items if it.source == "moving.gif").to_sample(None)["video"]
    assert len(moving["frames"]) == 3 and moving["fps"] == pytest.approx(10.0)  # 100 ms a frame
    assert "skipped 1 file(s)" in err and "scan.bmp" in err and "notes.md" not in err
    assert "1 of 3 sample(s) have no prompt file beside them (no_prompt.png)" in err


# --- schema | head ----------------------------------------------------------------------------

def test_a_reader_that_leaves_early_gets_no_traceback():
    proc = subprocess.Popen([sys.executable, "-m", "judge_gateway.cli", "schema", "--request"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    proc.stdout.close()  # like `| head` that has read its lines: every write now fails
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


# --- a missing extra --------------------------------------------------------------------------

def test_a_missing_extra_is_named_with_its_pip_command(tmp_path, monkeypatch, capsys):
    from tests.support.scored_runs import build_runs

    built = build_runs(tmp_path, n=4)
    monkeypatch.setitem(sys.modules, "jinja2", None)  # as if the `browse` extra were not installed
    assert cli_main(["browse", str(built.a), "--export", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    # the command that works from here (judge-gateway is not on the package index): this checkout's extra
    checkout = Path(__file__).resolve().parents[2]
    assert f"browse needs the `browse` extra (missing: jinja2): pip install -e '{checkout}[browse]'" in err
    assert "Traceback" not in err and not (tmp_path / "r.html").exists()
    monkeypatch.setitem(sys.modules, "redis", None)
    config = write_config(tmp_path, '[store]\nkind = "redis"\nurl = "redis://127.0.0.1:1"\n[judges.ocr]\nkind = "ocr"\n')
    monkeypatch.setattr("uvicorn.run", lambda *a, **k: pytest.fail("served without its store"))
    assert cli_main(["serve", "--config", config, "--log-level", "warning"]) == 2
    assert f"store.kind = 'redis' needs the `redis` extra (missing: redis): pip install -e '{checkout}[redis]'" \
        in capsys.readouterr().err
