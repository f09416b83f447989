"""GenEval's rules (judge_gateway/heads/geneval/rules.py) on synthetic detections."""

from __future__ import annotations

import pytest

from judge_gateway.heads.geneval import rules as R


def det(*objs, cls_colors=None):
    """objs: (box, score[, colour]) tuples -> one class's detections."""
    d = {"boxes": [list(o[0]) for o in objs], "scores": [o[1] for o in objs]}
    if any(len(o) > 2 for o in objs):
        d["colors"] = [o[2] if len(o) > 2 else None for o in objs]
    return d


def box_at(cx, cy, size=10):
    return (cx - size / 2, cy - size / 2, cx + size / 2, cy + size / 2)


def run(tag, includes, detections, exclude=None):
    return R.evaluate(R.parse_metadata(tag, includes, exclude), detections)


def dogs(n, score=0.95):
    return {"dog": det(*[(box_at(20 + 30 * i, 50), score) for i in range(n)])}


# ---- counting (the must-show cases) --------------------------------------------------------------


def test_counting_two_dogs_is_correct():
    r = run("counting", [{"class": "dog", "count": 2}], dogs(2))
    assert r.correct is True and r.strict is True and r.score == 1.0
    assert r.group(1.0) == {"single_object": None, "two_object": None, "counting": 1.0, "colors": None,
                            "position": None, "color_attr": None}


def test_counting_three_dogs_is_wrong_and_not_strict():
    r = run("counting", [{"class": "dog", "count": 2}], dogs(3))
    assert r.correct is False and r.strict is False
    assert 0 < r.score < 1  # 2 of 3 found objects were asked for
    assert any("dog" in reason and "found 3" in reason for reason in r.reasons)


def test_counting_one_dog_fails_with_the_include_named():
    r = run("counting", [{"class": "dog", "count": 2}], dogs(1))
    assert (r.correct, r.strict, r.score) == (False, False, 0.5)
    assert r.checks[0]["passed"] is False and "include[0] (2 x dog)" in r.checks[0]["reason"]


def test_counting_uses_the_0_9_threshold():
    d = {"dog": det((box_at(20, 50), 0.95), (box_at(60, 50), 0.95), (box_at(90, 50), 0.85))}
    r = run("counting", [{"class": "dog", "count": 2}], d)
    assert r.correct and r.strict and r.threshold == 0.9
    # Under the 0.3 threshold of the other tags that third dog counts.
    r2 = run("single_object", [{"class": "dog", "count": 1}], d)
    assert r2.correct and not r2.strict and r2.checks[0]["found"] == 3


def test_counting_explicit_exclude_is_honoured():
    # GenEval's own counting metadata carries exclude {count: N + 1}; here a looser one.
    r = run("counting", [{"class": "dog", "count": 2}], dogs(3), exclude=[{"class": "dog", "count": 4}])
    assert r.correct and not r.strict


# ---- thresholds and the 16-per-class cap ------------------------------------------------------


def test_box_threshold_is_strictly_above_0_3():
    d = {"cat": det((box_at(20, 20), 0.3)), "dog": det((box_at(50, 50), 0.31))}
    r = run("two_object", [{"class": "cat", "count": 1}, {"class": "dog", "count": 1}], d)
    assert not r.correct and r.score == 0.5
    assert r.checks[0]["passed"] is False and r.checks[1]["passed"] is True
    assert "cat" in r.checks[0]["reason"]


def test_at_most_16_objects_per_class():
    many = {"apple": det(*[(box_at(5 + 5 * i, 50, 4), 0.99) for i in range(20)])}
    assert len(R.select_objects(many, 0.3)["apple"]) == 16
    r = run("counting", [{"class": "apple", "count": 16}], many)
    assert r.correct and r.strict  # 20 detected, 16 kept: GenEval cannot see a 17th
    r = run("counting", [{"class": "apple", "count": 17}], many)
    assert not r.correct


def test_cap_keeps_the_most_confident():
    objs = [(box_at(5 + 5 * i, 50, 4), 0.4 + 0.01 * i) for i in range(20)]
    kept = R.select_objects({"apple": det(*objs)}, 0.3)["apple"]
    assert [round(o.score, 2) for o in kept] == [round(0.4 + 0.01 * i, 2) for i in range(19, 3, -1)]


# ---- single / two objects ---------------------------------------------------------------------


def test_single_object():
    assert run("single_object", [{"class": "cat", "count": 1}], {"cat": det((box_at(5, 5), 0.5))}).correct
    r = run("single_object", [{"class": "cat", "count": 1}], {"dog": det((box_at(5, 5), 0.9))})
    assert not r.correct and r.score == 0.0 and "expected 1 cat, found 0" in r.checks[0]["reason"]


def test_two_object():
    d = {"cat": det((box_at(5, 5), 0.5)), "dog": det((box_at(50, 5), 0.9))}
    r = run("two_object", [{"class": "cat", "count": 1}, {"class": "dog", "count": 1}], d)
    assert r.correct and r.strict and r.score == 1.0


# ---- colours ----------------------------------------------------------------------------------


def test_colors_fail_names_the_include():
    d = {"car": det((box_at(50, 50), 0.9, "blue"))}
    r = run("colors", [{"class": "car", "count": 1, "color": "red"}], d)
    assert r.correct is False and r.strict is False and r.score == 0.5
    check = r.checks[0]
    assert check["passed"] is False and check["colors"] == ["blue"]
    assert check["reason"].startswith("include[0] (1 x red car)") and "blue" in check["reason"]


def test_colors_pass_and_only_the_most_confident_count():
    d = {"car": det((box_at(20, 50), 0.9, "red"), (box_at(60, 50), 0.5, "blue"))}
    r = run("colors", [{"class": "car", "count": 1, "color": "red"}], d)
    assert r.correct and not r.strict  # two cars where one was asked for


def test_color_attr():
    d = {"bench": det((box_at(20, 50), 0.8, "green")), "vase": det((box_at(70, 50), 0.8, "purple"))}
    inc = [{"class": "bench", "count": 1, "color": "green"}, {"class": "vase", "count": 1, "color": "purple"}]
    assert run("color_attr", inc, d).correct
    d["vase"]["colors"] = ["pink"]
    r = run("color_attr", inc, d)
    assert not r.correct and r.score == 0.75 and r.checks[0]["passed"] and not r.checks[1]["passed"]
    assert "include[1] (1 x purple vase)" in r.checks[1]["reason"]


# ---- position ---------------------------------------------------------------------------------


def test_relations_by_centres():
    a, b = R.Obj(box_at(10, 50), 1.0), R.Obj(box_at(50, 50), 1.0)
    assert R.relations(a, b) == {"left of"} and R.relations(b, a) == {"right of"}
    up, down = R.Obj(box_at(50, 10), 1.0), R.Obj(box_at(50, 90), 1.0)
    assert R.relations(up, down) == {"above"} and R.relations(down, up) == {"below"}
    diag = R.Obj(box_at(10, 10), 1.0)
    assert R.relations(diag, b) == {"left of", "above"}


def test_position_margin_0_1():
    # Boxes 10 wide: margin 0.1 x (10 + 10) = 2. Centres 2 apart: inside the margin. The shrunk
    # offset must exceed half the raw one: 4 apart gives (4 - 2) / 4 = 0.5, no relation;
    # 4.5 apart gives 2.5 / 4.5 > 0.5, "left of".
    b = R.Obj(box_at(50, 50), 1.0)
    assert R.relations(R.Obj(box_at(48, 50), 1.0), b) == set()
    assert R.relations(R.Obj(box_at(46, 50), 1.0), b) == set()
    assert R.relations(R.Obj(box_at(45.5, 50), 1.0), b) == {"left of"}
    # Larger boxes, larger margin: 40 wide gives a margin of 8, so 4.5 apart is no relation.
    assert R.relations(R.Obj(box_at(45.5, 50, 40), 1.0), R.Obj(box_at(50, 50, 40), 1.0)) == set()
    # Mostly vertical offset: the horizontal part is too small to count.
    assert R.relations(R.Obj(box_at(45, 80), 1.0), b) == {"below"}


def test_position_tag():
    inc = [{"class": "dog", "count": 1}, {"class": "cat", "count": 1, "position": ["left of", 0]}]
    d = {"dog": det((box_at(80, 50), 0.9)), "cat": det((box_at(20, 50), 0.9))}
    r = run("position", inc, d)
    assert r.correct and r.strict and r.score == 1.0
    d = {"dog": det((box_at(20, 50), 0.9)), "cat": det((box_at(80, 50), 0.9))}
    r = run("position", inc, d)
    assert not r.correct and r.score == 0.75
    assert "include[1]" in r.checks[1]["reason"] and "right of" in r.checks[1]["reason"]


def test_position_without_its_target():
    inc = [{"class": "dog", "count": 1}, {"class": "cat", "count": 1, "position": ["above", 0]}]
    r = run("position", inc, {"cat": det((box_at(20, 50), 0.9))})
    assert not r.correct and r.score == 0.25
    assert "include[0] (1 x dog) was not matched" in r.checks[1]["reason"]


# ---- metadata validation / not applicable -----------------------------------------------------


@pytest.mark.parametrize("tag, includes, fragment", [
    ("shapes", [{"class": "dog", "count": 1}], "tag must be one of"),
    (None, [{"class": "dog", "count": 1}], "tag must be one of"),
    ("counting", [], "non-empty list"),
    ("counting", [{"count": 2}], "include[0].class"),
    ("counting", [{"class": "dog", "count": 0}], "include[0].count"),
    ("counting", [{"class": "dog", "count": 1.5}], "include[0].count"),
    ("colors", [{"class": "car", "count": 1, "color": "teal"}], "include[0].color"),
    ("position", [{"class": "dog", "count": 1, "position": ["above", 0]}], "earlier include"),
    ("position", [{"class": "dog"}, {"class": "cat", "position": ["behind", 0]}], "relation"),
    ("position", [{"class": "dog"}, {"class": "cat", "position": ["above", 1]}], "earlier include"),
    ("counting", [{"class": "dog", "count": 1, "size": 3}], "unknown key"),
])
def test_bad_metadata(tag, includes, fragment):
    with pytest.raises(R.GenEvalInputError, match=None) as exc:
        R.parse_metadata(tag, includes)
    assert fragment in str(exc.value)


def test_group_never_minus_ten():
    r = run("colors", [{"class": "car", "count": 1, "color": "red"}], {})
    g = r.group(0.0)
    assert g["colors"] == 0.0 and all(v is None for k, v in g.items() if k != "colors")
    assert -10.0 not in g.values()


def test_count_defaults_to_one_and_single_include_dict():
    meta = R.parse_metadata("single_object", {"class": "cat"})
    assert meta.includes == (R.Include("cat", 1),) and meta.excludes == ()


def test_mismatched_detections_rejected():
    with pytest.raises(R.GenEvalInputError):
        R.select_objects({"dog": {"boxes": [[0, 0, 1, 1]], "scores": []}}, 0.3)
