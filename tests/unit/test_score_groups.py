"""`score` never splits a group across requests: a comparative judge and a group transform see
the samples sharing a group_id together, whatever --batch-size says and in-process too, where each
ungrouped sample is otherwise its own call (for the progress bar)."""

from __future__ import annotations

from judge_gateway.cli.score import _scores_groups, request_units
from judge_gateway.inputs import InputItem


def _todo(groups: list[str | None]) -> list:
    return [(InputItem(source=f"s{i}", prompt="p", group_id=g), f"line{i}") for i, g in enumerate(groups)]


def _sources(units: list) -> list[list[str]]:
    return [[item.source for item, _ in unit] for unit in units]


def test_a_group_is_one_request_whatever_the_batch_size():
    todo = _todo(["a", None, "a", "b", None, "a", "b", None])
    # In-process, one sample a call: each ungrouped sample alone, each group whole (in input order).
    assert _sources(request_units(todo, batch_size=2, per_sample=True)) == [
        ["s0", "s2", "s5"], ["s1"], ["s3", "s6"], ["s4"], ["s7"]]
    # Batches of 2: the ungrouped samples two at a time (a batch sent once full); a group of 3
    # is not cut at 2.
    assert _sources(request_units(todo, batch_size=2, per_sample=False)) == [
        ["s0", "s2", "s5"], ["s3", "s6"], ["s1", "s4"], ["s7"]]


def test_every_sample_is_in_exactly_one_request():
    groups = [None if i % 3 == 0 else f"g{i % 5}" for i in range(41)]
    for per_sample in (True, False):
        units = request_units(_todo(groups), batch_size=4, per_sample=per_sample)
        sent = sorted(s for unit in _sources(units) for s in unit)
        assert sent == sorted(f"s{i}" for i in range(41))
        for unit in units:  # one group per request, or ungrouped samples only
            assert len({item.group_id for item, _ in unit}) == 1


def test_a_comparative_judge_keeps_in_process_batches():
    assert _scores_groups(["yes_no", "comparative"])
    assert not _scores_groups(["yes_no", "clip", "ocr"])
    assert not _scores_groups(["a_kind_this_version_does_not_know"])  # --server may name newer kinds
