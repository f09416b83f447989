"""runs.RunFolder and runs.ScoreLine against run folders written before them: every line an older
`score` or watch wrote loads and keeps every field (resuming one: test_score_folder.py)."""

from __future__ import annotations

import json

from judge_gateway import runs
from judge_gateway.browse.data import load_run
from tests.support.scored_runs import OLD_WATCH_LINE, old_score_lines


def test_old_lines_load_and_are_written_back_with_every_field(tmp_path):
    lines = [*old_score_lines(["k0", "k1", "k2", "k3"]), OLD_WATCH_LINE]
    (tmp_path / "scores.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"index": 8, "sou')
    folder = runs.RunFolder(tmp_path)
    read, unreadable = folder.read_lines()
    assert unreadable == 0 and [x.index for x in read] == [0, 1, 2, 3, 7]  # the torn last line is dropped
    assert [json.loads(x.to_json()) for x in read] == lines
    assert [x.done for x in read] == [True, True, False, False, True]
    assert [x.error_codes() for x in read] == [[], ["bad_input"], ["request_error"], ["timeout"], []]
    assert [x.error_codes() for x in read] == [runs.sample_error_codes(x) for x in lines]
    folder.write_lines(read)
    assert [json.loads(t) for t in (tmp_path / "scores.jsonl").read_text().splitlines()] == lines
    run = load_run(tmp_path)
    assert [x["index"] for x in run.lines] == [0, 1, 2, 3, 7] and run.judges == ["quality"]
    summary = runs.summarize(read, ["quality"])
    assert summary["samples"] == 5 and summary["invalid_by_code"] == {"bad_input": 1, "request_error": 1,
                                                                     "timeout": 1}


def test_a_line_that_is_no_score_line_is_counted_not_kept(tmp_path):
    (tmp_path / "scores.jsonl").write_text('{"index": "zero"}\n[1, 2]\n{"index": 4, "scores": {"q": 1}}\n'
                                           '{"index": 5}\n')
    read, unreadable = runs.RunFolder(tmp_path).read_lines()
    assert [x.index for x in read] == [5] and unreadable == 2  # the list is not a JSON object at all
