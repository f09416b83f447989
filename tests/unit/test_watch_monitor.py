"""The watch's windows and alarm rules on score streams built here (each rule: fires on its
signature, stays quiet on a null stream and on look-alikes, waits for `persist`, resolves)."""

from __future__ import annotations

import numpy as np
import pytest

from judge_gateway.config import ConfigError, WatchConfig, validate_config
from judge_gateway.watch import RunMonitor, Window
from judge_gateway.watch.windows import LateSample, RunWindows, StepJump

PER_WINDOW = 12


def monitor(**alarms) -> RunMonitor:
    m = RunMonitor("r", WatchConfig(enabled=True, shadows={"train": ["shadow"]}, alarms=alarms))
    m.watch_pair("train", ["shadow"])
    return m


def feed(m: RunMonitor, windows: list[list[dict]]) -> dict[str, int]:
    """Seal each window in turn; the first window each alarm kind fired at."""
    first: dict[str, int] = {}
    for n, rows in enumerate(windows):
        _, fired = m.seal(Window(number=n, opened_at=float(n), steps=[n, n], rows=rows), float(n))
        for alarm in fired:
            first.setdefault(alarm.kind, n)
    return first


def stream(seed: int, n_windows: int, train_rise=0.0, shadow_rise=0.0, start=6, corr=0.0,
           invalid_from=None, invalid_rate=0.0, shadow_shift=0.0) -> list[list[dict]]:
    """Windows of PER_WINDOW samples; from window `start`, the training mean rises by train_rise per
    window (shadow_rise for the shadow), and the shadow shifts by shadow_shift at once."""
    rng = np.random.default_rng(seed)
    out = []
    for w in range(n_windows):
        k = max(0, w - start + 1)
        rows = []
        for _ in range(PER_WINDOW):
            base = rng.normal()
            t = 0.5 + 0.1 * base + k * train_rise + 0.1 * rng.normal()
            s = 0.5 + 0.1 * (corr * base + (1 - corr) * rng.normal()) + k * shadow_rise
            s += shadow_shift if w >= start else 0.0
            rows.append({"train": t, "shadow": None if (invalid_from is not None and w >= invalid_from
                                                        and rng.random() < invalid_rate) else s})
        out.append(rows)
    return out


def test_divergence_fires_when_training_rises_and_the_shadow_stays_flat():
    m = monitor()
    first = feed(m, stream(1, 14, train_rise=0.05, start=6))
    assert first.get("divergence") is not None and 6 <= first["divergence"] <= 6 + 3 + 1
    alarm = next(a for a in m.alarms if a.kind == "divergence")
    assert (alarm.judge, alarm.shadow, alarm.state) == ("train", "shadow", "firing")
    ev = alarm.evidence
    assert len(ev.windows) == 3 and len(ev.reference) == 3 and ev.windows[0] == ev.reference[-1] + 1
    assert ev.values["train_auc"] >= 0.65 and ev.values["train_z"] >= 3.0
    assert ev.values["shadow_auc"] - 0.5 <= 0.25 * (ev.values["train_auc"] - 0.5)
    assert len(ev.means["train"]) == 6 and ev.means["train"][-1] > ev.means["train"][0]
    assert "training judge train rose" in alarm.message and "shadow shadow" in alarm.message
    assert m.firing() == [alarm]


def test_no_divergence_when_the_shadow_rises_with_training():
    assert "divergence" not in feed(monitor(), stream(2, 14, train_rise=0.05, shadow_rise=0.05, start=6))


def test_null_streams_fire_no_alarm():
    for seed in range(20):
        assert feed(monitor(), stream(100 + seed, 16)) == {}, seed


def test_an_alarm_waits_for_persist_holds_while_the_hack_does_and_resolves_after_it_is_gone():
    m = monitor(persist=3)
    windows = stream(3, 12, train_rise=0.06, start=6)
    first = feed(m, windows)
    fired = first["divergence"]
    # the rule's first hold is at least persist - 1 seals before it fired
    m2 = monitor(persist=1)
    assert feed(m2, windows)["divergence"] <= fired - 2
    # the training reward stays high, no longer rising: against the baseline it still diverges
    high = [[{"train": 1.2 + 0.1 * r["train"], "shadow": r["shadow"]} for r in rows] for rows in stream(4, 6)]
    for n, rows in enumerate(high, start=12):
        m.seal(Window(number=n, opened_at=0.0, rows=rows), 0.0)
    alarm = next(a for a in m.alarms if a.kind == "divergence")
    assert alarm.state == "firing" and alarm.last_window == 17
    # the hack is gone (the policy rolled back): the rule stops holding and it resolves after 3 seals
    for n, rows in enumerate(stream(5, 9), start=18):
        m.seal(Window(number=n, opened_at=0.0, rows=rows), 0.0)
    assert alarm.state == "resolved" and 17 <= alarm.last_window < 18 + 8 and m.firing() == []


def test_a_hack_too_slow_for_n_windows_diverges_from_the_baseline():
    slow = stream(13, 24, train_rise=0.012, start=4)  # +0.012 per window: a tenth of a score's spread
    m = monitor()
    assert feed(m, slow).get("divergence") is not None
    alarm = next(a for a in m.alarms if a.kind == "divergence")
    assert alarm.evidence.reference == [0, 1, 2] and "against the baseline, windows 0-2" in alarm.message


def test_correlation_collapse():
    m = monitor()
    first = feed(m, stream(5, 6, corr=0.9) + stream(6, 8, corr=-0.9))  # agreement turns into disagreement
    assert first.get("correlation") is not None
    alarm = next(a for a in m.alarms if a.kind == "correlation")
    assert alarm.evidence.values["spearman_baseline"] > 0.5 and alarm.evidence.values["spearman_recent"] < 0.2
    # judges that never agreed give no correlation alarm, however their correlation moves
    assert "correlation" not in feed(monitor(), stream(7, 6, corr=0.0) + stream(8, 8, corr=-0.9))


def test_invalid_rate_jump():
    m = monitor()
    first = feed(m, stream(9, 12, invalid_from=6, invalid_rate=0.5))
    assert first.get("invalid_rate") is not None
    alarm = next(a for a in m.alarms if a.kind == "invalid_rate")
    assert alarm.judge == "shadow" and alarm.evidence.values["rate_baseline"] == 0.0
    assert alarm.evidence.values["rate_recent"] > 0.3
    report = m.reports[-1]
    assert report.judges["shadow"].invalid_rate == pytest.approx(
        sum(r["shadow"] is None for r in stream(9, 12, invalid_from=6, invalid_rate=0.5)[-1]) / PER_WINDOW)


def test_drift_of_a_shadow_and_drift_on():
    first = feed(monitor(), stream(10, 12, shadow_shift=0.3))
    assert first.get("drift") is not None
    # a training judge's own rise is not drift by default (it is meant to move) ...
    assert "drift" not in feed(monitor(), stream(11, 14, train_rise=0.05))
    # ... unless drift_on names it
    drifted = monitor(drift_on=["train"])
    assert "drift" in feed(drifted, stream(11, 14, train_rise=0.05))
    assert {a.judge for a in drifted.alarms if a.kind == "drift"} == {"train"}


def test_too_few_samples_are_not_judged():
    m = monitor(min_samples=40)  # 3 windows x 12 samples < 40
    assert feed(m, stream(12, 14, train_rise=0.1, shadow_shift=0.5, invalid_from=6, invalid_rate=0.5)) == {}


def test_window_reports():
    m = monitor()
    feed(m, stream(13, 5))
    r = m.reports[-1]
    assert r.window == 4 and r.steps == [4, 4] and r.samples == PER_WINDOW and not r.baseline
    assert [x.baseline for x in m.reports] == [True, True, True, False, False]
    j = r.judges["train"]
    assert j.scored == j.valid == PER_WINDOW and j.invalid_rate == 0.0 and j.q10 <= j.q50 <= j.q90
    assert j.drift_ks is not None and j.drift_w1 is not None and m.reports[0].judges["train"].drift_ks is None
    assert r.pairs[0].train == "train" and r.pairs[0].pairs == PER_WINDOW and r.pairs[0].spearman is not None


# ---- windows --------------------------------------------------------------------------------


def test_step_windows_close_on_a_later_step_and_seal_when_nothing_is_pending():
    w = RunWindows(steps_per_window=2, window_samples=100, window_s=60)
    a = w.assign(0, now=0.0)
    b = w.assign(1, now=0.1)
    assert a is b and w.mode == "step"
    c = w.assign(2, now=0.2)  # steps 2-3: the next window
    assert c is not a and a.closed and not c.closed
    assert w.sealable() == []  # window 0 still waits for its two samples
    w.add(a, {"train": 0.5})
    assert w.assign(1, now=0.3) is a  # a straggler of step 1 still joins its unsealed window
    w.add(a, {"train": 0.4})
    w.drop(a)
    assert w.sealable() == [a] and a.steps == [0, 1] and len(a.rows) == 2
    with pytest.raises(LateSample):
        w.assign(0, now=0.4)
    w.tick(now=61.0)  # no sample for window_s: the newest window closes too
    w.drop(c)
    assert w.sealable() == [c]


def test_one_request_cannot_move_the_step_clock():
    """A step far beyond the clock (2^53) is not windowed, however many samples the request
    carries; the run's later steps go on being windowed. A step behind a sealed window is late
    and moves nothing."""
    w = RunWindows(steps_per_window=1, window_samples=100, window_s=60, max_step_jump=1000, resync_requests=3)
    for step in range(3):
        w.assign(step, now=step, request=f"r{step}")
    for _ in range(8):  # one request, eight samples
        with pytest.raises(StepJump):
            w.assign(2**53, now=3.0, request="attacker")
    assert w.max_step == 2 and w.open[-1].key == 2
    later = [w.assign(step, now=4.0 + step, request=f"s{step}") for step in (3, 4, 5)]
    assert [x.key for x in later] == [3, 4, 5] and w.max_step == 5
    w.assign(1003, now=9.0, request="near")  # within max_step_jump: a trainer skipping steps
    for window in w.open:
        window.pending = 0
    assert [x.key for x in w.sealable()] == [0, 1, 2, 3, 4, 5]
    with pytest.raises(LateSample):
        w.assign(4, now=10.0, request="straggler")  # behind a sealed window: late, moves nothing
    assert w.max_step == 1003 and w.resyncs == 0


def test_the_clock_follows_a_jump_that_several_requests_agree_on():
    """A trainer that restarted at 0 (or resumed from a checkpoint far ahead): once 3 distinct
    requests in a row land near one another outside the clock, the windows follow them; a sample
    inside the clock in between starts the count again."""
    w = RunWindows(steps_per_window=1, window_samples=100, window_s=60, max_step_jump=1000, resync_requests=3)
    for step in range(100, 103):
        w.assign(step, now=0.0, request=f"r{step}")
    with pytest.raises(LateSample):
        w.assign(0, now=1.0, request="a")
    with pytest.raises(LateSample):
        w.assign(0, now=1.0, request="a")  # the same request again does not count twice
    w.assign(102, now=1.5, request="old")  # the clock's own trainer is still here: count again
    for request in ("b", "c"):
        with pytest.raises(LateSample):
            w.assign(1, now=2.0, request=request)
    window = w.assign(1, now=2.5, request="d")  # the third in a row: the clock restarts there
    assert w.resyncs == 1 and window.key == 1 and w.max_step == 1
    assert all(x.closed for x in w.open if x is not window)
    for request in ("e", "f", "g"):  # and far ahead, the same
        try:
            w.assign(10**9, now=3.0, request=request)
        except StepJump:
            pass
    assert w.resyncs == 2 and w.max_step == 10**9


def test_time_windows_close_on_count_or_time_and_say_steps_are_ignored():
    w = RunWindows(steps_per_window=1, window_samples=3, window_s=10)
    first = [w.assign(None, now=0.0) for _ in range(3)]
    assert len({id(x) for x in first}) == 1 and w.mode == "time"
    fourth = w.assign(None, now=1.0)
    assert fourth is not first[0] and first[0].closed
    w.assign(7, now=2.0)
    assert w.ignored_steps == 1
    w.tick(now=11.5)
    assert fourth.closed


# ---- config ---------------------------------------------------------------------------------


def test_watch_config_is_checked_once_naming_the_key():
    judges = {"q": {"kind": "ocr"}, "s": {"kind": "ocr"}}
    with pytest.raises(ConfigError, match=r"watch.shadows.q: no such shadow judge 'nope'"):
        validate_config({"judges": judges, "watch": {"enabled": True, "shadows": {"q": ["nope"]}}})
    with pytest.raises(ConfigError, match="watch.shadows.x: no such judge"):
        validate_config({"judges": judges, "watch": {"shadows": {"x": ["s"]}}})
    with pytest.raises(ConfigError, match="a judge cannot shadow itself"):
        validate_config({"judges": judges, "watch": {"shadows": {"q": ["q"]}}})
    with pytest.raises(ConfigError, match="enabled = true but `shadows`"):
        validate_config({"judges": judges, "watch": {"enabled": True}})
    with pytest.raises(ConfigError, match="watch.sample_rate"):
        validate_config({"judges": judges, "watch": {"sample_rate": 0}})
    with pytest.raises(ConfigError, match="watch.alarms.colour"):
        validate_config({"judges": judges, "watch": {"alarms": {"colour": 1}}})
    cfg = validate_config({"judges": judges, "watch": {"enabled": True, "shadows": {"q": ["s"]}}})
    assert cfg.watch.shadow_judges == ["s"] and not validate_config({"judges": judges}).watch.enabled
