"""cosmos-rl's real trainer client (`RemoteRewardCalculator` from the cosmos-rl PyPI package, in
.venv-cosmosrl) against the gateway over HTTP, on the real CPU vLLM and the real OCR head.

The trainer reads only `scores` and trains on whatever stands there: these tests check that
what it computes is the gateway's own reward for valid samples and the configured policy's value
for invalid ones (group_mean, sentinel, fill_value), never a 0.0 nobody chose.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.support.heads_env import heads_python, text_image_png, venv_python
from tests.support.served_gateway import ServedGateway

pytestmark = pytest.mark.integration
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "tests" / "support" / "cosmos_rl_trainer.py"
# the tiny model's answers, parseable; below 5 so that / 5 is not a round 1.0
FINAL_REGEX = r"[a-z ]{5,30}\nFinal Score: [1-4]\.[0-9]"
QUOTED = 'a sign that says "Hello World"'
UNQUOTED = "a sign on a wall"  # no quoted text: OCR is not applicable, the sample is invalid
FILL_VALUE = 0.3  # all-invalid requests under group_mean: a constant, visibly not 0.0


def config(vllm_url: str) -> dict:
    unified = {"kind": "final_score", "backend": "unified", "template": "unified_reward@1", "default": False,
               "image": {"max_pixels": 12544}}
    return {
        "backends": {"unified": {"model": "CodeGoat24/UnifiedReward-qwen-7b", "base_urls": [vllm_url],
                                 "timeout_s": 120}},
        "judges": {
            "ocr": {"kind": "ocr", "options": {"python": str(heads_python()), "threads": 2}},
            "unified_reward": {**unified, "options": {"guided_regex": FINAL_REGEX, "max_tokens": 60}},
            # the tiny random model, free to answer: no "Final Score:", a parse_error every time
            "unified_free": {**unified, "options": {"max_tokens": 16}},
        },
        "cosmos_rl": {
            # pending_status: the default, 425, which cosmos-rl's trainer polls through
            # (test_trainer_and_the_pending_status below shows 400 too)
            "fill_value": FILL_VALUE,
            "rewards": {
                "ocr_sentinel": {"judge": "ocr", "keys": {"ocr_reward": "reward"}, "on_invalid": "sentinel"},
                "unified_free": {"judge": "unified_free",
                                 "keys": {"unified_reward": {"source": "raw", "scale": 0.2}}},
            },
        },
    }


@pytest.fixture(scope="module")
def trainer_python() -> Path:
    return venv_python("JG_COSMOSRL_VENV", ".venv-cosmosrl", "setup_cosmos_rl_client.sh")


@pytest.fixture(scope="module")
def served(vllm):
    s = ServedGateway(config(vllm.base_url))
    yield s
    s.stop()


def _pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def ocr_groups() -> list[tuple[str, np.ndarray]]:
    """Two GRPO groups (payloads): three renderings of a quoted text, two of an unquoted prompt."""
    size = (384, 128)
    rendered = [text_image_png(t, size) for t in ("Hello World", "Hello Wold", "Goodbye")]
    return [(QUOTED, np.stack([_pixels(p) for p in rendered])),
            (UNQUOTED, np.stack([_pixels(p) for p in rendered[:2]]))]


def run_trainer(python: Path, served: ServedGateway, groups, reward_fns: list[dict], tmp_path: Path,
                wait_until_ready: bool = False, fails_with: str | None = None, timeout_s: float = 300) -> dict:
    payloads = []
    for i, (prompt, images) in enumerate(groups):
        path = tmp_path / f"payload{i}.npy"
        np.save(path, images)
        payloads.append({"prompt": prompt, "images_npy": str(path)})
    spec = {"out": str(tmp_path / "trainer.json"), "enqueue_url": f"{served.url}/api/reward/enqueue",
            "fetch_url": f"{served.url}/api/reward/pull", "token": "None", "step": 7,
            "remote_reward": {"reward_fns": reward_fns}, "payloads": payloads, "wait_until_ready": wait_until_ready}
    proc = subprocess.run([str(python), str(DRIVER)], input=json.dumps(spec), capture_output=True, text=True,
                          timeout=timeout_s, env={**os.environ, "PYTHONPATH": ""}, check=False)
    if fails_with is not None:
        assert proc.returncode != 0 and fails_with in proc.stderr, proc.stderr[-4000:]
        return {}
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    return json.loads((tmp_path / "trainer.json").read_text())


def pulled(served: ServedGateway, uid: str, reward: str) -> dict:
    r = httpx.post(f"{served.url}/api/reward/pull", data={"uuid": uid, "type": reward}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def advantages(rewards: list[float]) -> list[float]:
    """remote_calculator's legacy advantage: (r - mean) / (std + 1e-4), torch's unbiased std."""
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1))
    return [(r - mean) / (std + 1e-4) for r in rewards]


def test_trainer_gets_the_ocr_reward_and_group_mean_fills(trainer_python, served, tmp_path):
    out = run_trainer(trainer_python, served, ocr_groups(),
                      [{"name": "ocr", "score_key": "ocr_reward", "weight": 1.0}], tmp_path)
    assert out["step"] == 7 and out["is_validation"] is False
    quoted, unquoted = out["payloads"]
    body = pulled(served, out["uuid"], "ocr")
    cells = body["judge_scores"]
    assert body["valid"] == [True, True, True, False, False]
    assert [c["error"]["code"] for c in cells[3:]] == ["not_applicable"] * 2
    gateway = [c["reward"] for c in cells[:3]]
    assert gateway[0] >= 0.9 and gateway[2] < gateway[0]  # real, different OCR rewards
    # what the trainer computed from `scores` is the gateway's own reward
    assert quoted["rewards"] == pytest.approx(gateway, abs=1e-6)
    assert quoted["advantages"] == pytest.approx(advantages(gateway), abs=1e-4)
    # group_mean: no valid sample with that prompt, so the request's valid mean, one constant
    # over the group: zero advantage, and not 0.0
    mean = sum(gateway) / 3
    assert unquoted["rewards"] == pytest.approx([mean, mean], abs=1e-6) and mean > 0.3
    assert unquoted["advantages"] == [0.0, 0.0]
    assert body["filled_by"] == [None, None, None, "request_mean", "request_mean"]
    assert body["on_invalid"] == "group_mean"


def test_trainer_gets_the_sentinel_where_configured(trainer_python, served, tmp_path):
    out = run_trainer(trainer_python, served, ocr_groups(),
                      [{"name": "ocr_sentinel", "score_key": "ocr_reward", "weight": 1.0}], tmp_path)
    quoted, unquoted = out["payloads"]
    body = pulled(served, out["uuid"], "ocr_sentinel")
    assert quoted["rewards"] == pytest.approx([c["reward"] for c in body["judge_scores"][:3]], abs=1e-6)
    assert unquoted["rewards"] == [-1.0, -1.0]  # cosmos-rl's error value, as configured
    assert body["filled_by"][3:] == ["sentinel", "sentinel"]


def test_trainer_sums_vlm_rewards_on_cosmos_rls_scale(trainer_python, served, tmp_path):
    """unified_reward (real vLLM, a parseable final score) is score / 5 as cosmos-rl serves it;
    a judge that cannot parse its answer for any sample gets fill_value, a constant."""
    rng = np.random.default_rng(5)
    groups = [("a red apple", rng.integers(0, 256, (2, 64, 64, 3), dtype=np.uint8)),
              ("a blue car", rng.integers(0, 256, (2, 64, 64, 3), dtype=np.uint8))]
    out = run_trainer(trainer_python, served, groups,
                      [{"name": "unified_reward", "weight": 1.0}, {"name": "unified_free", "weight": 2.0,
                                                                   "score_key": "unified_reward"}], tmp_path)
    scored = pulled(served, out["uuid"], "unified_reward")
    free = pulled(served, out["uuid"], "unified_free")
    assert scored["valid"] == [True] * 4, scored["errors"]
    assert free["valid"] == [False] * 4 and all(e.startswith("parse_error") for e in free["errors"])
    assert free["filled_by"] == ["fill_value"] * 4
    raw = [c["raw"] for c in scored["judge_scores"]]
    assert all(1.0 <= r < 5.0 for r in raw)
    trainer = [r for p in out["payloads"] for r in p["rewards"]]
    assert trainer == pytest.approx([r / 5 + 2 * FILL_VALUE for r in raw], abs=1e-6)


def test_trainer_and_the_pending_status(trainer_python, fake_backend, tmp_path):
    """cosmos-rl's reward service answers a pull that is not ready with 400 (its README's "400 Not
    Ready"), which the gateway answers with pending_status = 400. cosmos-rl's trainer (0.4.7)
    fetching such a pull fails: make_request_with_retry (cosmos_rl/utils/network_util.py 56-124 in
    the 0.4.7 wheel) re-raises any 4xx but 408/425/429 at once and get_results then indexes an
    empty batch. Polled as cosmos-rl's example clients poll (any non-200: again) until ready, the
    same trainer class fetches the result; with the default, 425, it polls through on its own."""
    from tests.support.fault_gateway import fault_config

    data = fault_config(fake_backend.base_url)
    data["judges"]["stalled"]["deadline_s"] = 3.0  # pending for 3 s, then invalid (the fake never answers)
    # not scored again: a timeout is transient, and by default it is re-scored until the request's deadline
    data["cosmos_rl"] = {"retry_attempts": 0}
    groups = [("a red apple", np.zeros((2, 16, 16, 3), dtype=np.uint8))]
    fns = [{"name": "stalled", "weight": 1.0}]
    readme = ServedGateway({**data, "cosmos_rl": {**data["cosmos_rl"], "pending_status": 400}})
    try:
        run_trainer(trainer_python, readme, groups, fns, tmp_path, fails_with="IndexError")
        out = run_trainer(trainer_python, readme, groups, fns, tmp_path, wait_until_ready=True)
        assert out["pending_statuses"] and set(out["pending_statuses"]) == {400}
        assert out["payloads"][0]["rewards"] == [0.0, 0.0]  # invalid: fill_value, one constant
    finally:
        readme.stop()
    trainer = ServedGateway(data)  # the default pending status
    try:
        out = run_trainer(trainer_python, trainer, groups, fns, tmp_path)
        assert out["payloads"][0]["rewards"] == [0.0, 0.0]
        assert out["fetch_statuses"][-1] == 200 and set(out["fetch_statuses"][:-1]) == {425}
    finally:
        trainer.stop()


# A GRPO step of text renderings: 4 prompts x 8 completions, enough OCR (~0.1-0.3 s an image on
# the CPU) that the result is pending for several of the trainer's polls.
SIGNS = [('a sign that says "Hello World"', ["Hello World", "Hello Wold", "Helo World", "Goodbye"]),
         ('a shop front reading "Open Late"', ["Open Late", "OPEN LATE", "Open Lane", "Closed"]),
         ('a poster with the words "Big Sale', ["Big Sale", "Bg Sale", "Big Sail", "Small"]),  # one quote
         ('a neon sign "24/7 Diner" at night', ["24/7 Diner", "24/7 Dinner", "Diner", "Cafe"])]


def test_the_trainer_against_the_shipped_cosmos_rl_config(trainer_python, tmp_path):
    """cosmos-rl 0.4.7's RemoteRewardCalculator against `judge-gateway serve --config cosmos_rl`:
    the shipped config as it is (only the port is chosen, `--port`, so that the test never meets
    another server on 8080). Its `ocr` reward (RapidOCR on the CPU, models in its wheel) needs no
    download; the first enqueue waits for the OCR worker's load (cosmos_rl.load_wait_s). The
    trainer's own polls see 425 while the step is scored and then 200, and the rewards it computes
    are the judge's native rewards, each cosmos-rl's OCR formula on the recognised text
    (tests/support/peer_formulas.py, model/ocr.py 41-79)."""
    from tests.support import peer_formulas as peer
    from tests.support.fake_openai import free_port
    from tests.support.health import wait_healthy

    port = free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "JG_API_KEYS": ""}
    proc = subprocess.Popen([sys.executable, "-m", "judge_gateway.cli", "serve", "--config", "cosmos_rl",
                             "--port", str(port)], cwd=ROOT, env=env, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    served = type("Served", (), {"url": url})()
    try:
        try:
            wait_healthy(url, proc, 120)
        except RuntimeError as err:
            raise AssertionError(f"{err}\n{log.read_text()[-4000:]}") from None
        groups = []
        for prompt, texts in SIGNS:
            rendered = [_pixels(text_image_png(t, (384, 128))) for t in texts * 2]
            groups.append((prompt, np.stack(rendered)))
        # the timeout is a margin for a loaded machine (OCR took ~11 s an image at a load of 30)
        out = run_trainer(trainer_python, served, groups, [{"name": "ocr", "score_key": "ocr_reward", "weight": 1.0}],
                          tmp_path, timeout_s=900)
        statuses = out["fetch_statuses"]
        print(f"[trainer] shipped cosmos_rl config: {len(statuses)} pulls by the trainer ({statuses}), "
              f"get_results {out['fetch_s']} s", file=sys.stderr)
        assert statuses[-1] == 200 and set(statuses[:-1]) == {425} and len(statuses) >= 3, statuses
        body = pulled(served, out["uuid"], "ocr")
        assert body["valid"] == [True] * 32, body["errors"]
        cells = body["judge_scores"]
        trainer = [r for p in out["payloads"] for r in p["rewards"]]
        assert trainer == pytest.approx([c["reward"] for c in cells], abs=1e-6)  # float32 in the trainer
        prompts = [prompt for prompt, texts in SIGNS for _ in texts * 2]
        assert [c["reward"] for c in cells] == [
            pytest.approx(peer.ocr(p, [(c["details"]["recognized"], 1.0)]), rel=1e-12, abs=1e-12)
            for p, c in zip(prompts, cells)]
        assert len({round(r, 6) for r in trainer}) > 4  # real, different rewards
        for payload, (prompt, texts) in zip(out["payloads"], SIGNS):
            assert payload["advantages"] == pytest.approx(advantages(payload["rewards"]), abs=1e-4)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
