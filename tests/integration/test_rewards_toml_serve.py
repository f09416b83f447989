"""cosmos-rl's own rewards.toml, served: `judge-gateway serve --config rewards.toml` (the real
command, a file in cosmos-rl's format) maps it, starts the Redis it names, and then the
cosmos-rl's README request shapes (image, latent video with `fps`, GenEval) and cosmos-rl's real
trainer class (.venv-cosmosrl) are answered: a pull that is not ready is 425 (what that trainer
polls through), `/api/reward/pin` is 200. The models are the tests' tiny ones: cosmos-rl's format names them
through its own fields (model_path, download_path, endpoint_url, decode_args.model_path) and,
where it has none, the `[judge_gateway]` overlay table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from judge_gateway.cli import local_redis
from judge_gateway.config.cosmos_rl_toml import GENEVAL_CKPT
from tests.support.fake_openai import free_port
from tests.support.health import wait_healthy
from tests.support.heads_env import (
    build_random_geneval,
    build_tiny_heads,
    build_tiny_videoalign,
    build_tiny_wan,
    geneval_python,
    heads_python,
    latents_python,
    python_path,
    venv_python,
    videoalign_checkpoint,
)
from tests.support.protocol_clients import enqueue_body

pytestmark = [pytest.mark.integration, pytest.mark.needs_geneval_venv]
ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "tests" / "support" / "cosmos_rl_trainer.py"
FINAL_REGEX = r"[a-z ]{5,30}\nFinal Score: [1-4]\.[0-9]"
# The README's requests (reward_service/README.md 5.2), their tensors made to the tiny models' sizes.
README_IMAGE = {"prompts": ["a photo of a cat", "a beautiful sunset"],
                "reward_fn": {"hpsv2": 1.0, "pickscore": 1.0, "unified_reward": 1.0}, "media_type": "image"}
README_VIDEO = {"prompts": ["prompt text"], "reward_fn": {"cosmos_reason1": 1.0, "dance_grpo": 1.0},
                "video_infos": [{"fps": 4}], "media_type": "latent"}
README_GENEVAL = {"prompts": ["a photo of a brown giraffe and a white stop sign"], "reward_fn": {"gen_eval": 1.0},
                  "media_type": "image", "geneval_tags": ["single_object"],
                  "geneval_includes": [[{"class": "giraffe", "count": 1, "color": "brown"},
                                        {"class": "stop sign", "count": 1, "color": "black"}]],
                  "geneval_only_strict": False}


def rewards_toml(tmp: Path, vllm_url: str, port: int, redis_port: int) -> str:
    heads, videoalign = build_tiny_heads("tiny"), build_tiny_videoalign()
    geneval, wan = build_random_geneval(), build_tiny_wan()
    # cosmos-rl's download_path layout: hpsv2/ckpts/HPS_v2.1_compressed.pt, reward_ckpts/<detector>.pth
    (tmp / "hpsv2" / "ckpts").mkdir(parents=True)
    (tmp / "hpsv2" / "ckpts" / "HPS_v2.1_compressed.pt").symlink_to(heads / "openclip.pt")
    (tmp / "reward_ckpts").mkdir()
    (tmp / "reward_ckpts" / GENEVAL_CKPT).symlink_to(geneval / "mask2former_random.pth")
    clip_cfg = heads / "openclip_cfg" / "jg-tiny-clip.json"
    return f'''host="127.0.0.1"
port={port}
redis_host="localhost"
redis_port={redis_port}

[[reward_args]]
reward_type = "cosmos_reason1"
venv_python = "python"
model_path = "nvidia/Cosmos-Reason1-7B-Reward"
endpoint_url = "{vllm_url}"
dtype = "float16"
enable = true

[[reward_args]]
reward_type = "dance_grpo"
venv_python = "/root/dance_grpo/bin/python"
model_path = "{videoalign_checkpoint(videoalign)}"
download_path = "{tmp}"
dtype = "float32"
device = "cpu"
enable = true

[[reward_args]]
reward_type = "hpsv2"
model_path = ""
download_path = "{tmp}"
device = "cpu"
enable = true

[[reward_args]]
reward_type = "pickscore"
model_path = "{heads / 'hf_clip'}"
device = "cpu"
dtype = "float32"
enable = true

[[reward_args]]
reward_type = "gen_eval"
download_path = "{tmp}"
device = "cpu"
enable = true

[[reward_args]]
reward_type = "ocr"
device = "cpu"
enable = true

[[reward_args]]
reward_type = "image_reward"
dtype = "float32"
enable = false

[[reward_args]]
reward_type = "unified_reward"
venv_python = "python"
endpoint_url = "{vllm_url}"
endpoint_api_key = "EMPTY"
enable = true

[decode_args]
model_path = "{wan / 'wan21'}"
dtype = "float32"
device = "cpu"

# what cosmos-rl's format cannot say: our venvs, the tiny CLIP architecture, the test server's names
[judge_gateway.cosmos_rl.latents]
python = "{latents_python()}"
[judge_gateway.backends.unified_reward]
model = "CodeGoat24/UnifiedReward-qwen-7b"
[judge_gateway.judges.unified_reward.options]
guided_regex = {json.dumps(FINAL_REGEX)}
max_tokens = 60
[judge_gateway.judges.videoalign.options]
python = "{heads_python()}"
[judge_gateway.judges.pickscore.options]
python = "{heads_python()}"
[judge_gateway.judges.ocr.options]
python = "{heads_python()}"
[judge_gateway.judges.hpsv2.options]
python = "{heads_python()}"
model = "jg-tiny-clip"
model_config_file = "{clip_cfg}"
[judge_gateway.judges.gen_eval.options]
python = "{geneval_python()}"
clip_model = "jg-tiny-clip"
clip_pretrained = "{heads / 'openclip.pt'}"
clip_model_config_file = "{clip_cfg}"
'''


@pytest.fixture(scope="module")
def served(vllm, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rewards-toml")
    port, redis_port = free_port(), free_port()
    (tmp / "rewards.toml").write_text(rewards_toml(tmp, vllm.base_url, port, redis_port))
    log = tmp / "serve.log"
    env = {**os.environ, "PYTHONPATH": python_path(), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "JG_API_KEYS": ""}
    proc = subprocess.Popen([sys.executable, "-m", "judge_gateway.cli", "serve", "--config", str(tmp / "rewards.toml")],
                            cwd=tmp, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, 120)
    except RuntimeError as err:
        raise AssertionError(f"{err}\n{log.read_text()[-4000:]}") from None
    yield url, tmp, redis_port
    proc.terminate()
    proc.wait(timeout=60)


def _enqueue(url: str, meta: dict, arr: np.ndarray, timeout: float = 600) -> str:
    """An enqueue as cosmos-rl's trainer sends it (network_util.make_request_with_retry sends a 5xx
    again): a 503 with Retry-After, a head still loading past cosmos_rl.load_wait_s on 2 busy
    cores, is sent again after the pause it names."""
    deadline = time.monotonic() + timeout
    while True:
        r = httpx.post(f"{url}/api/reward/enqueue", content=enqueue_body(meta, arr), timeout=60,
                       headers={"Content-Type": "application/octet-stream", "Authorization": "Bearer None"})
        if r.status_code != 503 or time.monotonic() > deadline:
            break
        assert "Retry-After" in r.headers, r.headers
        time.sleep(float(r.headers["Retry-After"]))
    assert r.status_code == 200, r.text
    return r.json()["uuid"]


def _pull_until_200(url: str, uid: str, reward: str, timeout: float = 900) -> tuple[dict, list[int]]:
    """The README's example client: pull (form fields) until 200; what it saw before."""
    seen, deadline = [], time.monotonic() + timeout
    while True:
        r = httpx.post(f"{url}/api/reward/pull", data={"uuid": uid, "type": reward}, timeout=30)
        if r.status_code == 200:
            return r.json(), seen
        seen.append((r.status_code, r.json()["message"]))
        assert time.monotonic() < deadline, seen[-1]
        time.sleep(0.3)


def test_the_mapping_was_printed_and_its_redis_started(served):
    url, tmp, redis_port = served
    out = (tmp / "serve.log").read_text()
    assert "cosmos-rl reward service config (rewards.toml), mapped onto judge-gateway's:" in out
    for said in ("reward_args[0] (cosmos_reason1).dtype = 'float16' -> not used",
                 "reward_args[1] (dance_grpo).venv_python = '/root/dance_grpo/bin/python' -> not used",
                 "reward_args[3] (pickscore).model_path", "reward_args[6] (image_reward): enable = false",
                 "(unified_reward).endpoint_api_key", "decode_args.model_path", "[judge_gateway]: merged",
                 f"Redis at localhost:{redis_port}: started"):
        assert said in out, said
    assert local_redis.probe("127.0.0.1", redis_port) == "redis"
    r = httpx.post(f"{url}/api/reward/pin", data={"info_data": json.dumps(README_IMAGE)}, timeout=10)
    assert r.status_code == 200 and r.json()["message"] == "Ping request received"


def test_readme_image_request(served):
    url, _, _ = served
    images = np.random.default_rng(1).integers(0, 256, (2, 48, 40, 3), dtype=np.uint8)
    uid = _enqueue(url, README_IMAGE, images)
    first = httpx.post(f"{url}/api/reward/pull", data={"uuid": uid, "type": "hpsv2"}, timeout=30)
    # 425 (cosmos_rl.pending_status's default, which the mapping keeps): what cosmos-rl's trainer polls through
    assert first.status_code == 425 and first.json()["message"].startswith(f"Not found scores for {uid}")
    for reward, key in (("hpsv2", "hpsv2"), ("pickscore", "pickscore"), ("unified_reward", "unified_reward")):
        body, _ = _pull_until_200(url, uid, reward)
        assert body["valid"] == [True, True], (reward, body["errors"])
        assert len(body["scores"][key]) == 2 and body["type"] == reward
        assert body["input_info"]["shape"] == [2, 48, 40, 3] and body["input_info"]["dtype"] == "torch.uint8"


def test_readme_video_request_as_latents(served):
    url, _, _ = served
    latents = np.random.default_rng(2).standard_normal((1, 16, 4, 4, 4)).astype(np.float16)  # 13 frames of 32x32
    uid = _enqueue(url, README_VIDEO, latents)
    for reward, keys in (("cosmos_reason1", ("prediction", "no_score", "yes_logit", "no_logit")),
                         ("dance_grpo", ("vq_reward", "mq_reward", "ta_reward", "overall_reward"))):
        body, _ = _pull_until_200(url, uid, reward)
        assert body["valid"] == [True], (reward, body["errors"])
        assert set(body["scores"]) == set(keys) and all(len(v) == 1 for v in body["scores"].values())
        assert body["input_info"]["video_infos"] == [{"fps": 4}]


def test_readme_geneval_request(served):
    url, _, _ = served
    image = np.random.default_rng(3).integers(0, 256, (1, 64, 96, 3), dtype=np.uint8)
    body, _ = _pull_until_200(url, _enqueue(url, README_GENEVAL, image), "gen_eval")
    assert body["valid"] == [True], body["errors"]
    s = body["scores"]
    assert set(s) == {"gen_eval_score", "gen_eval_reward", "gen_eval_strict", "gen_eval_group"}
    assert s["gen_eval_group"]["two_object"] == [-10.0] and s["gen_eval_group"]["single_object"] in ([0.0], [1.0])


# The README's GenEval body before cosmos-rl 28d72cf6 renamed its fields (reward_service/README.md
# at 833ddb86): one `prompt`, a `tag` and the image's `include` list.
README_GENEVAL_SEED = {"prompt": "a photo of a brown giraffe and a white stop sign", "reward_fn": {"gen_eval": 1.0},
                       "media_type": "image", "tag": "single_object",
                       "include": [{"class": "giraffe", "count": 1, "color": "brown"},
                                   {"class": "stop sign", "count": 1, "color": "black"}]}


def test_readme_seed_geneval_request(served):
    """`tag` and `include` are read as the README documents them (not reported ignored) and score
    as the code's `geneval_tags` / `geneval_includes` do on the same image."""
    url, _, _ = served
    image = np.random.default_rng(3).integers(0, 256, (1, 64, 96, 3), dtype=np.uint8)
    seed, _ = _pull_until_200(url, _enqueue(url, README_GENEVAL_SEED, image), "gen_eval")
    code, _ = _pull_until_200(url, _enqueue(url, README_GENEVAL, image), "gen_eval")
    assert seed["valid"] == [True], seed["errors"]
    assert "ignored_fields" not in seed
    assert seed["scores"] == code["scores"]
    assert seed["judge_scores"][0]["details"]["tag"] == "single_object"


def test_the_real_trainer_class(served, tmp_path):
    """RemoteRewardCalculator (cosmos-rl 0.4.7) enqueues and fetches on its own: the mapped file
    answers a pull that is not ready with 425, which the trainer polls through. The rewards it
    computes from `scores` are the judges' native raw numbers through cosmos-rl's formulas
    (pickscore: raw / 26, model/pickscore.py 96-111; hpsv2: the cosine, model/hpsv2.py 206-210)."""
    url, _, _ = served
    images = np.random.default_rng(4).integers(0, 256, (3, 48, 40, 3), dtype=np.uint8)
    np.save(tmp_path / "payload.npy", images)
    spec = {"out": str(tmp_path / "trainer.json"), "enqueue_url": f"{url}/api/reward/enqueue",
            "fetch_url": f"{url}/api/reward/pull", "token": "None", "step": 3,
            "remote_reward": {"reward_fns": [{"name": "pickscore", "score_key": "pickscore", "weight": 1.0},
                                             {"name": "hpsv2", "weight": 0.5}]},
            "payloads": [{"prompt": "a lighthouse at night", "images_npy": str(tmp_path / "payload.npy")}]}
    python = venv_python("JG_COSMOSRL_VENV", ".venv-cosmosrl", "setup_cosmos_rl_client.sh")
    proc = subprocess.run([str(python), str(DRIVER)], input=json.dumps(spec), capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": ""}, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads((tmp_path / "trainer.json").read_text())
    # one fetch per reward type: 425 while pending, then a 200 for pickscore and one for hpsv2
    statuses = out["fetch_statuses"]
    assert set(statuses) <= {200, 425} and statuses.count(200) == 2 and statuses[-1] == 200, statuses
    pick = httpx.post(f"{url}/api/reward/pull", data={"uuid": out["uuid"], "type": "pickscore"}, timeout=30).json()
    hps = httpx.post(f"{url}/api/reward/pull", data={"uuid": out["uuid"], "type": "hpsv2"}, timeout=30).json()
    want = [p["raw"] / 26 + 0.5 * h["raw"] for p, h in zip(pick["judge_scores"], hps["judge_scores"])]
    assert out["payloads"][0]["rewards"] == pytest.approx(want, rel=1e-6)  # float32 in the trainer
