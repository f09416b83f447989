"""cosmos-rl's own rewards.toml runs unchanged: `judge-gateway serve --config rewards.toml`
recognises the format, maps every field (launcher/config.py's RewardArgs, DecodeArgs, Config)
onto ours and prints the mapping, and starts the Redis it names when that is local and not
running (as cosmos-rl's launcher starts its own), or refuses with the reason. The gateway serving such a
file against the peers' clients and the real trainer: tests/integration/test_conformance_heads.py."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from judge_gateway.cli import local_redis
from judge_gateway.config import ConfigError, load_config, load_config_report
from judge_gateway.config.cosmos_rl_toml import is_cosmos_rl_rewards, map_rewards_toml
from tests.support.cosmos_rl_rewards_toml import SHIPPED
from tests.support.fake_openai import free_port
from tests.support.health import wait_healthy

ROOT = Path(__file__).resolve().parents[2]

# Every field of cosmos-rl's format, every reward enabled.
EVERY_FIELD = """
host = "127.0.0.1"
port = 8099
redis_host = "localhost"
redis_port = 0
no_latent_decoder = false

[decode_args]
model_path = "https://huggingface.co/Wan-AI/Wan2.1-T2V-1.3B/resolve/main/Wan2.1_VAE.pth"
dtype = "bfloat16"
device = "cuda:1"
chunk_duration = 81
temporal_window = 16
load_mean_std = false
wan2pt2_model_path = "https://huggingface.co/Wan-AI/Wan2.2-TI2V-5B/resolve/main/Wan2.2_VAE.pth"
wan2pt2_credential_path = ""

[[reward_args]]
reward_type = "cosmos_reason1"
venv_python = "python"
model_path = "nvidia/Cosmos-Reason1-7B-Reward"
dtype = "float16"
endpoint_url = "http://10.0.0.5:8001/v1/"
enable = true

[[reward_args]]
reward_type = "dance_grpo"
venv_python = "/root/dance_grpo/bin/python"
model_path = "/workspace/VideoReward"
download_path = "/workspace"
setup_script = "setup/dance_grpo.sh"
work_dir = "evaluation_results"
tmp_dir = "/tmp"
dtype = "float16"
device = "cuda"
enable = true

[[reward_args]]
reward_type = "ocr"
venv_python = "/root/ocr/bin/python"
device = "cpu"
enable = true

[[reward_args]]
reward_type = "image_reward"
dtype = "float32"
device = "cuda"
enable = true

[[reward_args]]
reward_type = "gen_eval"
model_path = ""
download_path = "/workspace"
device = "cuda"
enable = true

[[reward_args]]
reward_type = "hpsv2"
model_path = ""
download_path = "/workspace"
device = "cuda"
dtype = "float16"
enable = true

[[reward_args]]
reward_type = "pickscore"
model_path = ""
device = "cuda"
dtype = "float32"
enable = true

[[reward_args]]
reward_type = "hpsv3"
download_path = "/workspace"
device = "cuda"
dtype = "float16"
enable = true

[[reward_args]]
reward_type = "unified_reward"
venv_python = "python"
endpoint_url = "http://10.0.0.6:8004/v1"
endpoint_api_key = "secret-key"
enable = true
"""


def _write(tmp_path: Path, text: str, name: str = "rewards.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_shipped_rewards_toml_is_recognised_and_mapped(tmp_path):
    cfg, mapped = load_config_report(_write(tmp_path, SHIPPED))
    assert mapped is not None and mapped.redis == ("localhost", 6379)
    assert sorted(cfg.judges) == ["cosmos_reason1", "videoalign"]  # the two enabled
    assert (cfg.server.host, cfg.server.port) == ("localhost", 8080)
    assert cfg.store.kind == "redis" and cfg.store.url == "redis://localhost:6379/0"
    assert cfg.backends["cosmos_reason1"].model == "nvidia/Cosmos-Reason1-7B-Reward"
    assert cfg.judges["cosmos_reason1"].template == "cosmos_reason1@2"
    assert cfg.judges["videoalign"].options.checkpoint == "/workspace/VideoReward"
    assert cfg.judges["videoalign"].options.dtype == "fp16" and cfg.judges["videoalign"].options.device == "cuda"
    assert cfg.cosmos_rl.latents.wan2_1.checkpoint == "Wan-AI/Wan2.1-T2V-1.3B-Diffusers"
    assert cfg.cosmos_rl.latents.dtype == "float16" and not cfg.flow_factory.enabled
    assert any("enable = false -> not configured" in line and "unified_reward" in line for line in mapped.lines)
    # our own configs are not taken for it
    assert not is_cosmos_rl_rewards({"server": {"host": "x"}, "judges": {}})
    assert load_config(ROOT / "configs" / "cosmos_rl.toml").store.kind == "memory"


def test_every_field_is_mapped_or_said_unused(tmp_path, monkeypatch):
    monkeypatch.delenv("JG_UNIFIED_REWARD_API_KEY", raising=False)
    cfg, mapped = load_config_report(_write(tmp_path, EVERY_FIELD))
    assert mapped is not None and mapped.redis is None and cfg.store.kind == "memory"  # redis_port = 0
    assert sorted(cfg.judges) == sorted(["cosmos_reason1", "videoalign", "ocr", "image_reward", "gen_eval",
                                         "hpsv2", "pickscore", "hpsv3", "unified_reward"])
    j = {n: cfg.judges[n].options for n in cfg.judges}
    assert cfg.backends["cosmos_reason1"].base_urls == ["http://10.0.0.5:8001/v1"]
    assert cfg.backends["unified_reward"].model == "UnifiedReward-7b-v1.5"
    assert cfg.backends["unified_reward"].api_key() == "secret-key"
    assert (j["videoalign"].dtype, j["image_reward"].dtype, j["pickscore"].dtype) == ("fp16", "fp32", "fp32")
    # cosmos-rl's hpsv3 handler (model/hpsv3.py 84-109 at 89f2e5b5) never passes its dtype on: the hpsv3
    # package's HPSv3_7B.yaml runs bfloat16, whatever the file's "float16" says
    assert j["hpsv3"].dtype == "bf16"
    assert j["hpsv2"].dtype == "fp32"  # cosmos-rl's hpsv2 runs float32 whatever dtype says
    assert j["ocr"].device == "cpu" and j["gen_eval"].device == "cuda"
    assert j["pickscore"].model == "yuvalkirstain/PickScore_v1"  # model_path "": cosmos-rl's hub ids
    assert cfg.cosmos_rl.latents.device == "cuda:1" and cfg.cosmos_rl.latents.dtype == "bfloat16"
    assert cfg.cosmos_rl.latents.wan2_2.checkpoint == "Wan-AI/Wan2.2-TI2V-5B-Diffusers"
    text = "\n".join(mapped.lines)
    for said in ("host = '127.0.0.1' -> server.host", "port = 8099 -> server.port", "redis_port = 0 ->",
                 "(dance_grpo).venv_python = '/root/dance_grpo/bin/python' -> not used",
                 "(dance_grpo).setup_script", "(dance_grpo).work_dir", "(dance_grpo).tmp_dir",
                 "(dance_grpo).model_path = '/workspace/VideoReward' -> judges.videoalign.options.checkpoint",
                 "(dance_grpo).download_path = '/workspace' has no Qwen2-VL-2B-Instruct",
                 "(hpsv2).dtype = 'float16' -> not used", "(cosmos_reason1).dtype = 'float16' -> not used",
                 "(hpsv3).dtype = 'float16' -> not used: judges.hpsv3.options.dtype = 'bf16'",
                 "a pull not ready yet -> 425",
                 "(unified_reward).endpoint_api_key -> backends.unified_reward.api_key_env",
                 "decode_args.dtype / device", "chunk_duration / temporal_window / wan2pt2_credential_path",
                 "(ocr): the request's ocr_use_gpu"):
        assert said in text, said
    assert "secret-key" not in text


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: "redis_password = 'x'\n" + t, "redis_password: not a field of cosmos-rl's rewards.toml"),
    (lambda t: t.replace('reward_type = "ocr"', 'reward_type = "ocr"\nuse_gpu = true'),
     r"reward_args\[2\].use_gpu: not a field of reward_args"),
    (lambda t: t.replace('reward_type = "hpsv3"', 'reward_type = "aesthetic"'),
     r"reward_args\[7\].reward_type: 'aesthetic' is not a reward cosmos-rl's reward service serves"),
    (lambda t: t.replace('dtype = "float32"\ndevice = "cuda"\nenable = true\n\n[[reward_args]]\nreward_type = "gen_eval"',
                         'dtype = "int8"\ndevice = "cuda"\nenable = true\n\n[[reward_args]]\nreward_type = "gen_eval"'),
     r"\(image_reward\).dtype: 'int8' is not one of float16, bfloat16, float32"),
    (lambda t: t.replace("http://10.0.0.6:8004/v1", "YOUR_ENDPOINT_URL"),
     r"\(unified_reward\).endpoint_url: 'YOUR_ENDPOINT_URL' is not an http\(s\) URL"),
    (lambda t: t.replace('reward_type = "hpsv3"', 'reward_type = "hpsv2"'), "'hpsv2' is enabled twice"),
    (lambda t: t.replace("enable = true", "enable = false"), "no entry is enabled"),
])
def test_what_cannot_be_mapped_is_refused_naming_the_field(tmp_path, edit, message):
    with pytest.raises(ConfigError, match=message):
        load_config(_write(tmp_path, edit(EVERY_FIELD)))


def test_the_mapping_agrees_with_configs_cosmos_rl_toml(tmp_path):
    """Both are 'cosmos-rl on its published weights': the same judges, kinds and options, but
    for what the file sets (devices, dtypes) and the VLM servers' addresses."""
    mapped = map_rewards_toml(__import__("tomllib").loads(EVERY_FIELD)).data
    shipped = load_config(ROOT / "configs" / "cosmos_rl.toml")
    for name, judge in mapped["judges"].items():
        ours = shipped.judges[name]
        assert judge["kind"] == ours.kind, name
        want = ours.options.model_dump(exclude_unset=True)
        got = {k: v for k, v in judge.get("options", {}).items() if k in want}
        for k in ("device", "dtype", "python") + (("checkpoint",) if name == "videoalign" else ()):
            got.pop(k, None), want.pop(k, None)  # set by the file
        assert got == {k: v for k, v in want.items() if k in got}, name
        if ours.template is not None:
            assert judge["template"] == ours.template, name


def test_an_overlay_table_sets_what_cosmos_rls_format_cannot_say(tmp_path):
    """The docs' example overlay (docs/integrations/cosmos-rl.md), on the shipped file with hpsv2 on."""
    page = (ROOT / "docs" / "integrations" / "cosmos-rl.md").read_text()
    overlay = next(b for b in re.findall(r"```toml\n(.*?)```", page, re.S) if b.startswith("[judge_gateway."))
    shipped = SHIPPED.replace('reward_type = "hpsv2"', 'reward_type = "hpsv2"\nenable = true', 1)
    shipped = re.sub(r'(reward_type = "hpsv2"\nenable = true\n(?:.*\n)*?)enable = false', r"\1", shipped, count=1)
    cfg, mapped = load_config_report(_write(tmp_path, shipped + "\n" + overlay))
    assert cfg.server.allow_networks == ["10.0.0.0/8"]
    assert cfg.judges["hpsv2"].options.python == "/opt/venvs/heads/bin/python"
    assert mapped.lines[-1] == "[judge_gateway]: merged over the mapping (judges, server)"


# ---- the Redis it names ---------------------------------------------------------------------


class _NotRedis:
    """A TCP server that answers anything with an HTTP line."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            conn.close()


def test_a_redis_that_is_not_there_is_started_or_refused(tmp_path, monkeypatch):
    other = _NotRedis()
    with pytest.raises(local_redis.RedisUnavailable, match=r"which is not Redis \(it answered b'HTTP/1.1 400"):
        local_redis.ensure_redis("127.0.0.1", other.port, tmp_path)
    other.sock.close()
    with pytest.raises(local_redis.RedisUnavailable, match=r"Redis at 192\.0\.2\.1:6379, which is (not answering|unreachable)"):
        local_redis.ensure_redis("192.0.2.1", 6379, tmp_path)  # TEST-NET: never routed
    monkeypatch.setattr(local_redis.shutil, "which", lambda name: None)
    with pytest.raises(local_redis.RedisUnavailable, match="redis-server is not installed"):
        local_redis.ensure_redis("localhost", free_port(), tmp_path)


def test_serve_prints_the_mapping_and_starts_its_redis(tmp_path):
    """The real command on a rewards.toml naming a Redis on a free local port: it prints what each
    field became, starts redis-server there (data in ./run/redis-PORT), serves, and stops it."""
    if local_redis.shutil.which("redis-server") is None:
        raise RuntimeError("redis-server is not installed (scripts/test.sh installs it: apt-get install -y redis-server)")
    redis_port, port = free_port(), free_port()
    text = SHIPPED.replace("port=8080", f"port={port}").replace("redis_port=6379", f"redis_port={redis_port}")
    path = _write(tmp_path, text)
    log = tmp_path / "serve.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JG_API_KEYS": ""}
    proc = subprocess.Popen([sys.executable, "-m", "judge_gateway.cli", "serve", "--config", str(path)], cwd=tmp_path,
                            env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        try:
            wait_healthy(f"http://127.0.0.1:{port}", proc, 120)
        except RuntimeError as err:
            raise AssertionError(f"{err}\n{log.read_text()}") from None
        assert local_redis.probe("127.0.0.1", redis_port) == "redis"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    out = log.read_text()
    assert "cosmos-rl reward service config (rewards.toml), mapped onto judge-gateway's:" in out
    assert f"redis_port = {redis_port} -> store.kind = 'redis'" in out
    assert f"Redis at localhost:{redis_port}: started" in out
    assert (tmp_path / "run" / f"redis-{redis_port}" / "appendonlydir").exists()
    deadline = time.monotonic() + 10
    while local_redis.probe("127.0.0.1", redis_port) != "closed":  # stopped with serve
        assert time.monotonic() < deadline
        time.sleep(0.1)
