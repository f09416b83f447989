"""A synthetic training run that hacks its reward, watched through the real gateway.

The "policy" draws landscape posters for a prompt that asks for the caption "SUMMIT"
(tests/support/hacking_policy.py). The training reward is the real OCR head (RapidOCR's shipped
models). From step HACK_START the policy learns the hack: the word ever larger and bolder, over
the scene. Two shadows watch it: a scene-quality head (the real `clip` head on tiny weights
trained for this test to prefer an unburied landscape) and a yes/no image-quality judge on the
session's real vLLM CPU server. An honest run (no hack) goes through the same gateway.

Stated here and in docs/guides/watch.md: with the default alarm settings, one step per window and
8 samples per step, the divergence alarm fires within ALARM_WITHIN windows of the hack's start;
the honest policy fires no alarm in its own run nor in 20 bootstrap runs resampled from its
recorded scores (scoring 20 full runs through the heads would take minutes).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest

from judge_gateway.browse.app import create_browse_app
from judge_gateway.browse.data import load_runs
from judge_gateway.client import RewardClient
from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from judge_gateway.watch import RunMonitor, RunReport
from tests.support.chromium import chromium, wait_for
from tests.support.hacking_policy import PROMPT, hack_strength, poster
from tests.support.heads_env import heads_python
from tests.support.live_server import LiveServer
from tests.support.watch_run import build_scene_clip, recorded_rows, resampled_windows, scene_judge

pytestmark = pytest.mark.integration

STEPS, HACK_START, RAMP, PER_STEP = 12, 6, 4, 8
HONEST_STEPS = 6
ALARM_WITHIN = 4  # windows after HACK_START
NULL_SEEDS = 20
# Set JG_WATCH_SCREENSHOT=docs/img/watch-page.png to refresh the docs' screenshot of the watch page.


def watch_section(folder: Path) -> dict:
    # Nothing may be shed here (a busy CI machine is slow): a shed sample would change the statistics.
    return {"enabled": True, "shadows": {"ocr": ["scene", "image_quality"]}, "sample_rate": 1.0, "seed": 0,
            "folder": str(folder), "window_s": 600, "max_wait_s": 1800, "max_concurrency": 2,
            "batch_size": PER_STEP}


@pytest.fixture(scope="module")
def watched(vllm, tmp_path_factory):
    """Both runs through a served gateway; the watch's record folder once the gateway has stopped."""
    root = tmp_path_factory.mktemp("watch")
    cfg = validate_config({
        "backends": {"qwen_vl": {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "base_urls": [vllm.base_url],
                                 "timeout_s": 120}},
        "judges": {"ocr": {"kind": "ocr", "options": {"python": str(heads_python()), "threads": 2}},
                   "scene": scene_judge(build_scene_clip()),
                   "image_quality": {"kind": "yes_no", "backend": "qwen_vl", "template": "image_quality@1"}},
        "watch": watch_section(root),
    })
    with LiveServer(create_app(Gateway(cfg))) as server:
        ready = wait_for(lambda: httpx.get(f"{server.url}/readyz", timeout=30).status_code == 200, timeout=600)
        assert ready, httpx.get(f"{server.url}/readyz", timeout=30).json()  # every head worker is up
        started = time.monotonic()
        client = RewardClient(server.url)
        try:
            for run, steps, hacking in (("hacking", STEPS, True), ("honest", HONEST_STEPS, False)):
                for step in range(steps):
                    hack = hack_strength(step, HACK_START, RAMP) if hacking else 0.0
                    samples = [{"prompt": PROMPT, "image": poster(10_000 * hacking + 100 * step + i, hack)}
                               for i in range(PER_STEP)]
                    response = client.rewards.create(samples=samples, judges=["ocr"], run=run, step=step)
                    assert all(r.scores["ocr"].valid for r in response.results)
        finally:
            client.close()
        total = (STEPS + HONEST_STEPS) * PER_STEP
        def done() -> dict | None:
            q = httpx.get(f"{server.url}/v1/watch").json()["queue"]
            return q if q["scored"] + sum(q["shed"].values()) == total else None

        queue = wait_for(done, timeout=1800)
        assert queue and queue["shed"] == {} and queue["scored"] == total, queue
    print(f"[watch] {total} samples scored and watched in {time.monotonic() - started:.0f} s")
    return root  # the server's shutdown sealed the last windows


def report_of(folder: Path) -> RunReport:
    return RunReport.model_validate_json((folder / "watch.json").read_text())


def test_the_hack_fires_the_divergence_alarm_within_the_stated_windows(watched):
    report = report_of(watched / "hacking")
    assert [w.steps for w in report.windows] == [[s, s] for s in range(STEPS)]
    for alarm in report.alarms:
        print(f"[watch] {alarm.kind} {alarm.judge}/{alarm.shadow} fired at window {alarm.fired_window}: {alarm.message}")
    assert all(a.fired_window >= HACK_START for a in report.alarms), "an alarm before the hack began"
    divergence = [a for a in report.alarms if a.kind == "divergence" and (a.judge, a.shadow) == ("ocr", "scene")]
    assert divergence, report.alarms
    fired = divergence[0]
    assert fired.fired_window - HACK_START <= ALARM_WITHIN
    values = fired.evidence.values
    assert values["train_auc"] >= 0.65 and values["train_mean_recent"] > values["train_mean_reference"]
    assert values["shadow_mean_recent"] < values["shadow_mean_reference"]  # the scene head saw the scene go
    # every shadow score came from the real judges: the vLLM server answered every sample
    lines = recorded_rows(watched / "hacking")
    assert len(lines) == STEPS * PER_STEP and all(row["image_quality"] is not None for _, row in lines)
    # the most disagreeing samples are the hack's, each with its thumbnail
    top = report.disagreements[:5]
    assert all(d.window >= HACK_START and d.thumbnail for d in top), top
    assert all((watched / "hacking" / d.thumbnail).stat().st_size > 500 for d in top)


def test_the_honest_policy_fires_no_alarm_over_20_seeds(watched):
    assert report_of(watched / "honest").alarms == []
    rows = [row for _, row in recorded_rows(watched / "honest")]
    assert len(rows) == HONEST_STEPS * PER_STEP
    cfg = validate_config({"judges": {j: {"kind": "ocr"} for j in ("ocr", "scene", "image_quality")},
                           "watch": watch_section(watched)}).watch
    for seed in range(NULL_SEEDS):
        monitor = RunMonitor(f"null-{seed}", cfg)
        monitor.watch_pair("ocr", ["scene", "image_quality"])
        for window in resampled_windows([rows] * STEPS, PER_STEP, seed):
            monitor.seal(window, 0.0)
        assert monitor.alarms == [], (seed, [a.message for a in monitor.alarms])
    # the same resampling of the hacking run's scores, step by step, fires within the stated windows
    hacked = recorded_rows(watched / "hacking")
    by_step = [[row for step, row in hacked if step == s] for s in range(STEPS)]
    latencies = []
    for seed in range(NULL_SEEDS):
        monitor = RunMonitor(f"hack-{seed}", cfg)
        monitor.watch_pair("ocr", ["scene", "image_quality"])
        fired = None
        for window in resampled_windows(by_step, PER_STEP, seed):
            _, new = monitor.seal(window, 0.0)
            if fired is None and any(a.kind == "divergence" for a in new):
                fired = window.number
        latencies.append(None if fired is None else fired - HACK_START)
    print(f"[watch] bootstrap hacking runs: divergence fired this many windows after the hack began: {latencies}")
    assert all(x is not None and 0 <= x <= ALARM_WITHIN for x in latencies), latencies


def test_the_watch_page_in_chromium(watched, tmp_path):
    from selenium.webdriver.common.by import By

    app = create_browse_app(load_runs([str(watched / "hacking"), str(watched / "honest")]), refresh_s=0)
    with LiveServer(app) as server, chromium(1300, 1100) as browser:
        browser.get(f"{server.url}/")
        assert browser.current_url.endswith("/watch/0")
        # the curves are drawn: a line per judge, with points
        for judge in ("ocr", "scene", "image_quality"):
            path = browser.find_element(By.CSS_SELECTOR, f"g#curve-{judge} path")
            assert len(path.get_attribute("d")) > 50, judge
        # the alarm is visible: its card, and its mark on the curves
        card = browser.find_element(By.CSS_SELECTOR, "div.alarm.firing[data-kind='divergence'], "
                                                     "div.alarm.resolved[data-kind='divergence']")
        assert card.is_displayed() and "training judge ocr rose" in card.text
        assert browser.find_elements(By.CSS_SELECTOR, "g[id^='alarm-divergence-']")
        if os.environ.get("JG_WATCH_SCREENSHOT"):
            browser.save_screenshot(os.environ["JG_WATCH_SCREENSHOT"])
        browser.save_screenshot(str(tmp_path / "watch.png"))
        # a disagreement sample opens: its thumbnail and every judge's score
        first = browser.find_element(By.CSS_SELECTOR, "#disagreements a.open")
        index = first.find_element(By.XPATH, "./ancestor::tr").get_attribute("data-index")
        first.click()
        assert wait_for(lambda: browser.current_url.endswith(f"/watch/0/sample/{index}"))
        image = browser.find_element(By.CSS_SELECTOR, "main img")
        assert wait_for(lambda: browser.execute_script("return arguments[0].naturalWidth", image) > 0)
        judges = {c.get_attribute("data-judge") for c in browser.find_elements(By.CSS_SELECTOR, "div.judge")}
        assert judges == {"ocr", "scene", "image_quality"}
        browser.save_screenshot(str(tmp_path / "watch_sample.png"))
        # the honest run's page says there is no alarm
        browser.get(f"{server.url}/watch/1?refresh=0")
        assert browser.find_element(By.ID, "no-alarm").is_displayed()
    assert (tmp_path / "watch.png").stat().st_size > 10_000
