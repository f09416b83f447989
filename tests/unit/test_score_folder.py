"""`judge-gateway score DIR -o RUN_DIR`: media formats, the run folder, resume, exit status."""

from __future__ import annotations

import json

import pytest

from judge_gateway.cli import main as cli_main
from tests.support.cli_configs import vlm_config, write_config
from tests.support.media_files import VIDEO_CODECS, write_image, write_video


def _config(tmp_path, base_url: str, model: str = "fake-yes") -> str:
    return write_config(tmp_path, vlm_config(base_url, model, {
        "quality": {"kind": "yes_no", "template": "image_quality@1", "options": {"video_first_frame": True}},
        "physics": {"kind": "yes_no", "template": "cosmos_reason1@1", "default": False}}))


def _rows(run_dir):
    return [json.loads(x) for x in (run_dir / "scores.jsonl").read_text().splitlines()]


def test_score_folder_of_every_video_container_and_images(tmp_path, fake_backend, capsys):
    media = tmp_path / "media"
    media.mkdir()
    for i, suffix in enumerate(VIDEO_CODECS):  # .mp4 .mov .avi .webm
        write_video(media / f"clip{i}{suffix}", seed=i)
        (media / f"clip{i}.txt").write_text(f"clip {suffix}")
    write_image(media / "still.png", seed=9)
    (media / "notes.md").write_text("not media")
    run = tmp_path / "run"
    rc = cli_main(["score", str(media), "-o", str(run), "--config", _config(tmp_path, fake_backend.base_url),
                   "--judges", "quality", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 0, err
    rows = _rows(run)
    assert [r["source"] for r in rows] == ["clip0.mp4", "clip1.mov", "clip2.avi", "clip3.webm", "still.png"]
    assert [r["index"] for r in rows] == [0, 1, 2, 3, 4]
    assert all(r["valid"] and r["scores"]["quality"]["valid"] for r in rows), rows
    # fake-yes: P(yes) = 0.7 + 0.1 of the 0.95 listed mass
    assert all(r["scores"]["quality"]["reward"] == pytest.approx(0.8 / 0.95) for r in rows)
    assert rows[2]["video"] == "clip2.avi" and rows[2]["prompt"] == "clip .avi" and rows[4]["image"] == "still.png"
    assert all(len(r["key"]) == 64 for r in rows)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["samples"] == 5 and summary["valid"] == 5 and summary["invalid"] == 0
    assert summary["judges"]["quality"]["mean_reward"] == pytest.approx(0.8 / 0.95)
    info = json.loads((run / "run.json").read_text())
    assert info["judges"] == ["quality"] and len(info["config_sha256"]) == 64
    assert info["templates"]["quality"]["id"] == "image_quality" and len(info["templates"]["quality"]["sha256"]) == 64
    assert info["input_root"] == str(media.resolve())


def test_score_resumes_without_rescoring_what_is_done(tmp_path, fake_backend, capsys):
    media = tmp_path / "media"
    media.mkdir()
    for i in range(6):
        write_image(media / f"{i}.png", seed=i)
    cfg = _config(tmp_path, fake_backend.base_url)
    run = tmp_path / "run"
    argv = ["score", str(media), "-o", str(run), "--config", cfg, "--judges", "quality", "--batch-size", "2",
            "--no-progress"]
    assert cli_main(argv) == 0
    first = _rows(run)
    # The run was killed after two samples: two lines, then a torn one.
    lines = (run / "scores.jsonl").read_text().splitlines()
    (run / "scores.jsonl").write_text("\n".join(lines[:2]) + "\n" + lines[2][:40])
    before = fake_backend.counters["requests"]
    capsys.readouterr()
    assert cli_main(argv) == 0
    assert "resuming: 2 of 6 samples already scored" in capsys.readouterr().err
    assert fake_backend.counters["requests"] - before == 4  # one chat request per sample not yet done
    assert _rows(run) == [*first[:2], *_rows(run)[2:]] and [r["source"] for r in _rows(run)] == [
        f"{i}.png" for i in range(6)]
    # A judge's transient failure (a timeout) is not done either: only that sample is sent again.
    rows = _rows(run)
    rows[4]["scores"]["quality"] = {**rows[4]["scores"]["quality"], "valid": False, "reward": None,
                                    "error": {"code": "timeout", "message": "deadline 1 s passed"}}
    rows[4]["valid"] = False
    (run / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = fake_backend.counters["requests"]
    assert cli_main(argv) == 0
    assert fake_backend.counters["requests"] - before == 1
    assert _rows(run)[4]["scores"]["quality"]["valid"]
    # Complete: nothing is sent at all.
    before = fake_backend.counters["requests"]
    assert cli_main(argv) == 0
    assert fake_backend.counters["requests"] == before
    assert json.loads((run / "summary.json").read_text())["samples"] == 6
    # New files (one a byte-identical copy): only they are sent; the lines follow the new order.
    write_image(media / "00.png", seed=99)
    (media / "3b.png").write_bytes((media / "3.png").read_bytes())
    before = fake_backend.counters["requests"]
    assert cli_main(argv) == 0
    assert fake_backend.counters["requests"] - before == 2
    rows = _rows(run)
    assert [r["source"] for r in rows] == ["0.png", "00.png", "1.png", "2.png", "3.png", "3b.png", "4.png", "5.png"]
    assert [r["index"] for r in rows] == list(range(8)) and rows[4]["key"] == rows[5]["key"]


def test_score_refuses_to_resume_with_other_judges(tmp_path, fake_backend, capsys):
    media = tmp_path / "media"
    media.mkdir()
    write_image(media / "a.png")
    cfg = _config(tmp_path, fake_backend.base_url)
    run = tmp_path / "run"
    assert cli_main(["score", str(media), "-o", str(run), "--config", cfg, "--judges", "quality",
                     "--no-progress"]) == 0
    capsys.readouterr()
    assert cli_main(["score", str(media), "-o", str(run), "--config", cfg, "--judges", "quality,physics",
                     "--no-progress"]) == 2
    assert "scored with other judges" in capsys.readouterr().err


def test_score_exits_nonzero_and_counts_invalid_by_code(tmp_path, fake_backend, capsys):
    media = tmp_path / "media"
    media.mkdir()
    write_image(media / "a.png", seed=1)
    write_image(media / "b.png", seed=2)
    (media / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42 truncated")
    run = tmp_path / "run"
    rc = cli_main(["score", str(media), "-o", str(run), "--config",
                   _config(tmp_path, fake_backend.base_url, model="fake-no-answer"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "error: 3 of 3 samples invalid (answer_missing=2, bad_input=1)" in err
    rows = {r["source"]: r for r in _rows(run)}
    assert rows["broken.mp4"]["error"]["code"] == "bad_input" and rows["broken.mp4"]["scores"] == {}
    assert rows["a.png"]["scores"]["quality"]["error"]["code"] == "answer_missing"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["invalid_by_code"] == {"answer_missing": 2, "bad_input": 1}
    assert summary["judges"]["quality"]["invalid_by_code"] == {"answer_missing": 2}


def test_score_shows_a_progress_bar(tmp_path, fake_backend, capsys):
    media = tmp_path / "media"
    media.mkdir()
    for i in range(3):
        write_image(media / f"{i}.png", seed=i)
    assert cli_main(["score", str(media), "-o", str(tmp_path / "run"), "--config",
                     _config(tmp_path, fake_backend.base_url), "--batch-size", "1"]) == 0
    err = capsys.readouterr().err
    assert "scoring: 100%" in err and "3/3" in err


def test_score_through_a_service(tmp_path, fake_backend, capsys):
    from judge_gateway.config import load_config
    from judge_gateway.gateway import Gateway
    from judge_gateway.server import create_app
    from tests.support.live_server import LiveServer

    media = tmp_path / "media"
    media.mkdir()
    write_video(media / "clip.webm", seed=3)
    write_image(media / "still.png", seed=4)
    app = create_app(Gateway(load_config(_config(tmp_path, fake_backend.base_url))), api_keys=["k"])
    run = tmp_path / "run"
    with LiveServer(app) as server:
        assert cli_main(["score", str(media), "-o", str(run), "--server", server.url, "--api-key", "k",
                         "--no-progress"]) == 2
        assert "with --server, name the judges" in capsys.readouterr().err
        assert cli_main(["score", str(media), "-o", str(run), "--server", server.url, "--api-key", "k",
                         "--judges", "quality", "--no-progress"]) == 0
    rows = _rows(run)
    assert [r["source"] for r in rows] == ["clip.webm", "still.png"]
    assert all(r["scores"]["quality"]["reward"] == pytest.approx(0.8 / 0.95) for r in rows)
    info = json.loads((run / "run.json").read_text())
    assert info["config_sha256"] is None and info["server"] == server.url
    assert info["templates"]["quality"]["id"] == "image_quality"


def _served(tmp_path, base_url: str, model: str, name: str):
    from judge_gateway.config import load_config
    from judge_gateway.gateway import Gateway
    from judge_gateway.server import create_app

    d = tmp_path / name
    d.mkdir()
    return create_app(Gateway(load_config(_config(d, base_url, model=model))), api_keys=["k"])


def test_resume_through_a_server_with_another_model_is_refused(tmp_path, fake_backend, capsys):
    """With --server there is no config hash: the models the server reports must match, or two
    models' scores would end up in one run folder."""
    from tests.support.live_server import LiveServer

    media = tmp_path / "media"
    media.mkdir()
    for i in range(2):
        write_image(media / f"{i}.png", seed=i)
    run = tmp_path / "run"
    argv = ["score", str(media), "-o", str(run), "--api-key", "k", "--judges", "quality", "--no-progress"]
    with LiveServer(_served(tmp_path, fake_backend.base_url, "fake-yes", "a")) as server:
        assert cli_main([*argv, "--server", server.url]) == 0
    first = _rows(run)
    assert json.loads((run / "run.json").read_text())["models"] == {"quality": "fake-yes"}
    # The run was killed after one sample; it is resumed through a server serving another model.
    (run / "scores.jsonl").write_text(json.dumps(first[0]) + "\n")
    capsys.readouterr()
    with LiveServer(_served(tmp_path, fake_backend.base_url, "fake-no", "b")) as server:
        assert cli_main([*argv, "--server", server.url]) == 2
    err = capsys.readouterr().err
    assert "scored with other models" in err and "fake-no" in err
    assert _rows(run) == first[:1]  # nothing mixed in


def test_an_unreadable_file_is_one_bad_input_sample(tmp_path, fake_backend, capsys):
    media = tmp_path / "media"
    media.mkdir()
    write_image(media / "a.png", seed=1)
    write_image(media / "c.png", seed=2)
    (media / "b.png").symlink_to(tmp_path / "gone.png")  # dangling
    run = tmp_path / "run"
    rc = cli_main(["score", str(media), "-o", str(run), "--config", _config(tmp_path, fake_backend.base_url),
                   "--judges", "quality", "--no-progress"])
    assert rc == 1
    assert "error: 1 of 3 samples invalid (bad_input=1)" in capsys.readouterr().err
    rows = {r["source"]: r for r in _rows(run)}
    assert rows["b.png"]["error"]["code"] == "bad_input" and rows["b.png"]["key"] == f"path:{media / 'b.png'}"
    assert rows["a.png"]["scores"]["quality"]["reward"] == pytest.approx(0.8 / 0.95)
    assert rows["c.png"]["valid"]


def test_a_server_returning_fewer_results_invalidates_the_missing_samples(tmp_path, fake_backend, capsys,
                                                                          monkeypatch):
    from judge_gateway import client as client_module

    create = client_module._AsyncRewards.create

    async def short(self, **kwargs):
        resp = await create(self, **kwargs)
        return resp.model_copy(update={"results": resp.results[:-1]})

    from judge_gateway.config import load_config
    from judge_gateway.gateway import Gateway
    from judge_gateway.server import create_app
    from tests.support.live_server import LiveServer

    monkeypatch.setattr(client_module._AsyncRewards, "create", short)
    media = tmp_path / "media"
    media.mkdir()
    for i in range(3):
        write_image(media / f"{i}.png", seed=i)
    run = tmp_path / "run"
    # Through a server: there a batch is one request (in-process, each sample is its own call).
    with LiveServer(create_app(Gateway(load_config(_config(tmp_path, fake_backend.base_url))))) as server:
        rc = cli_main(["score", str(media), "-o", str(run), "--server", server.url,
                       "--judges", "quality", "--batch-size", "3", "--no-progress"])
    assert rc == 1
    assert "error: 1 of 3 samples invalid (request_error=1)" in capsys.readouterr().err
    rows = _rows(run)
    assert [r["source"] for r in rows] == ["0.png", "1.png", "2.png"]
    assert [r["valid"] for r in rows] == [True, True, False]
    assert "returned 2 results for 3 samples" in rows[2]["request_error"]


def test_an_empty_input_exits_nonzero(tmp_path, fake_backend, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    rc = cli_main(["score", str(empty), "-o", str(tmp_path / "run"), "--config",
                   _config(tmp_path, fake_backend.base_url), "--judges", "quality", "--no-progress"])
    assert rc == 2 and "no samples" in capsys.readouterr().err


def test_a_crash_while_rewriting_scores_keeps_the_old_file(tmp_path, fake_backend, capsys, monkeypatch):
    """scores.jsonl is rewritten through a temporary file: a failure half-way through writing it
    (here: serialising the 4th line) leaves the previous file whole, never a truncated one."""
    import judge_gateway.runs as run_folder

    media = tmp_path / "media"
    media.mkdir()
    for i in range(6):
        write_image(media / f"{i}.png", seed=i)
    run = tmp_path / "run"
    argv = ["score", str(media), "-o", str(run), "--config", _config(tmp_path, fake_backend.base_url),
            "--judges", "quality", "--no-progress"]
    assert cli_main(argv) == 0
    before = (run / "scores.jsonl").read_text()

    class Failing:
        calls = 0

        @staticmethod
        def dumps(obj, **kw):
            if isinstance(obj, dict) and "scores" in obj:
                Failing.calls += 1
                if Failing.calls == 4:
                    raise RuntimeError("disk full")
            return json.dumps(obj, **kw)

        loads = staticmethod(json.loads)

    monkeypatch.setattr(run_folder, "json", Failing)
    with pytest.raises(RuntimeError, match="disk full"):
        cli_main(argv)
    assert (run / "scores.jsonl").read_text() == before and len(before.splitlines()) == 6


def test_summary_means_count_only_valid_samples():
    """combine.on_invalid = skip / fill gives an invalid sample a combined reward: reported on
    its own, never in the mean of the valid ones."""
    from judge_gateway.runs import ScoreLine, summarize

    def line(reward, valid):
        return {"index": 0, "reward": reward, "valid": valid,
                "scores": {"q": {"reward": reward if valid else None, "valid": valid,
                                 "error": None if valid else {"code": "parse_error"}}}}

    summary = summarize([ScoreLine.model_validate(line(0.9, True)), ScoreLine.model_validate(line(0.5, True)),
                         ScoreLine.model_validate(line(0.0, False)), ScoreLine.model_validate(line(0.1, False))],
                        ["q"])
    assert summary["mean_reward"] == pytest.approx(0.7)
    assert summary["invalid_with_reward"] == {"samples": 2, "mean_reward": pytest.approx(0.05)}
    assert summary["judges"]["q"]["mean_reward"] == pytest.approx(0.7)


def test_score_resumes_a_folder_an_older_version_wrote(tmp_path, fake_backend, capsys):
    """A run folder written before runs.ScoreLine: its done lines are kept with every field."""
    from judge_gateway.inputs import read_inputs, sample_key
    from tests.support.scored_runs import old_score_lines

    media = tmp_path / "media"
    media.mkdir()
    for i in range(4):
        write_image(media / f"{i}.png", seed=i)
    keys = [sample_key(item) for item in read_inputs(media).items]
    run = tmp_path / "run"
    run.mkdir()
    old = old_score_lines(keys)
    (run / "scores.jsonl").write_text("".join(json.dumps(x) + "\n" for x in old))
    (run / "run.json").write_text(json.dumps({"input": str(media), "judges": ["quality"]}))
    before = fake_backend.counters["requests"]
    argv = ["score", str(media), "-o", str(run), "--config", _config(tmp_path, fake_backend.base_url),
            "--judges", "quality", "--no-progress"]
    assert cli_main(argv) == 1  # the bad-input sample is done, and stays invalid
    assert "resuming: 2 of 4 samples already scored" in capsys.readouterr().err
    assert fake_backend.counters["requests"] - before == 2  # the request error and the timeout, again
    rows = [json.loads(t) for t in (run / "scores.jsonl").read_text().splitlines()]
    # the done lines keep every field they had, under the current input's prompt (none: "")
    assert rows[0] == {**old[0], "prompt": ""} and rows[1] == old[1]
    assert rows[2]["valid"] and rows[3]["valid"] and "request_error" not in rows[2]
