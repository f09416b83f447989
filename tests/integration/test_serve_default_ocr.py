"""`judge-gateway serve` on the embedded default config scores a real reward on a machine with no
GPU, no vLLM and no download: the `ocr` head (RapidOCR, its models inside its wheel) under the
serving interpreter. `.venv-heads` stands in for bootstrap's `.venv` here: both have the `ocr`
extra (rapidocr + onnxruntime) next to judge-gateway."""

from __future__ import annotations

import base64
import json
import os
import subprocess

import httpx

from tests.support.fake_openai import free_port
from tests.support.heads_env import ROOT, heads_python, text_image_png
from tests.support.health import wait_healthy


def test_embedded_default_scores_ocr_with_no_gpu_and_no_download(tmp_path):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    # No --config: the embedded default. Run from elsewhere: nothing is found by a relative path.
    proc = subprocess.Popen([str(heads_python()), "-m", "judge_gateway.cli", "serve", "--port", str(port),
                             "--log-level", "warning"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, 60)
        hello = base64.b64encode(text_image_png("Hello World")).decode()
        body = {"samples": [{"prompt": 'a sign that says "Hello World"', "image": hello},
                            {"prompt": 'a sign that says "Goodbye Moon"', "image": hello}],
                "judges": ["ocr"]}
        r = httpx.post(f"{url}/v1/rewards", json=body, timeout=180)
        assert r.status_code == 200, r.text
        right, wrong = r.json()["results"]
        assert right["valid"] is True and right["reward"] == 1.0, right
        assert right["scores"]["ocr"]["details"]["recognized"].replace(" ", "").lower() == "helloworld"
        assert right["scores"]["ocr"]["model"].startswith("rapidocr")
        assert wrong["valid"] is True and wrong["reward"] <= 0.5, wrong
        judges = {j["name"]: j for j in httpx.get(f"{url}/v1/judges", timeout=30).json()["judges"]}
        assert judges["ocr"]["ready"] is True
        assert judges["image_quality"]["ready"] is False  # no vLLM here, and that is fine
        _score_the_quickstart_samples(tmp_path, url)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _score_the_quickstart_samples(tmp_path, url: str) -> None:
    """The quickstart's folder (`judge-gateway samples`), scored by the real OCR head of the service
    above: the signs drawn as their prompt asks score 1, the misspelt ones less."""
    from judge_gateway.cli import main as cli_main
    from judge_gateway.cli.samples import SAMPLES
    from judge_gateway.heads.ocr_text import extract_target_text

    folder, run = tmp_path / "samples", tmp_path / "run"
    assert cli_main(["samples", str(folder)]) == 0
    assert cli_main(["score", str(folder), "-o", str(run), "--server", url, "--judges", "ocr", "--no-progress"]) == 0
    rows = {json.loads(x)["source"]: json.loads(x) for x in (run / "scores.jsonl").read_text().splitlines()}
    for stem, prompt, drawn in SAMPLES:
        reward = rows[f"{stem}.png"]["scores"]["ocr"]["reward"]
        if extract_target_text(prompt) == drawn:
            assert reward == 1.0, (stem, rows[f"{stem}.png"])
        else:
            assert 0.5 < reward < 1.0, (stem, rows[f"{stem}.png"])
