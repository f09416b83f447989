"""`judge-gateway up`: the plan (servers, GPUs, ports, commands from start_vllm.sh), the launch
table's checks, and one supervised child (health, restart after a kill, stop leaving nothing)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from judge_gateway.cli import main
from judge_gateway.config import VLLM_PRESETS, BackendConfig, validate_config
from judge_gateway.launch import Child, LaunchError, ProcessPlan, alive, descendants, plan_up
from tests.support.vllm_server import free_port

ROOT = Path(__file__).resolve().parents[2]
EIGHT = [str(i) for i in range(8)]


def node_config(**cosmos_launch) -> dict:
    """An 8-GPU node: Cosmos-Reason1 on two TP-2 servers, Qwen2.5-VL on two one-GPU servers, a head."""
    return {
        "backends": {
            "cosmos_reason1": {"model": "nvidia/Cosmos-Reason1-7B-Reward",
                               "base_urls": ["http://127.0.0.1:8001/v1", "http://127.0.0.1:8011/v1"],
                               "launch": {"preset": "cosmos_reason1", "gpus": 2, "gpu_memory_utilization": 0.9,
                                          **cosmos_launch}},
            "qwen_vl": {"model": "Qwen/Qwen2.5-VL-7B-Instruct",
                        "base_urls": ["http://127.0.0.1:8005/v1", "http://127.0.0.1:8015/v1"],
                        "launch": {"preset": "qwen_vl"}},
            "elsewhere": {"model": "RationalRewards-8B-T2I", "base_urls": ["http://10.1.2.3:8002/v1"]},
        },
        "judges": {
            "cosmos_reason1": {"kind": "yes_no", "backend": "cosmos_reason1", "template": "cosmos_reason1@1"},
            "alignment": {"kind": "yes_no", "backend": "qwen_vl", "template": "vqa_alignment@1"},
            "pickscore": {"kind": "pickscore", "options": {"device": "cuda"}},
        },
    }


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_eight_gpus_are_placed_in_order_and_the_rest_go_to_the_gateway(tmp_path):
    cfg = validate_config(node_config())
    plan = plan_up(cfg, "/cfg.toml", run_dir=tmp_path, visible=EIGHT, port=9000)
    placed = [(p.name, p.gpus, p.env.get("CUDA_VISIBLE_DEVICES"), p.health_url) for p in plan.servers]
    assert placed == [
        ("vllm-cosmos_reason1-8001", ["0", "1"], "0,1", "http://127.0.0.1:8001/health"),
        ("vllm-cosmos_reason1-8011", ["2", "3"], "2,3", "http://127.0.0.1:8011/health"),
        ("vllm-qwen_vl-8005", ["4"], "4", "http://127.0.0.1:8005/health"),
        ("vllm-qwen_vl-8015", ["5"], "5", "http://127.0.0.1:8015/health"),
    ]
    cosmos = plan.servers[0].argv
    assert cosmos[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]  # start_vllm.sh's own command
    assert _flag(cosmos, "--model") == "nvidia/Cosmos-Reason1-7B-Reward"  # the preset's model
    assert _flag(cosmos, "--port") == "8001" and _flag(cosmos, "--tensor-parallel-size") == "2"
    assert _flag(cosmos, "--gpu-memory-utilization") == "0.9" and _flag(cosmos, "--max-model-len") == "16384"
    assert _flag(cosmos, "--served-model-name") == "nvidia/Cosmos-Reason1-7B-Reward"
    qwen = plan.servers[2].argv
    assert _flag(qwen, "--limit-mm-per-prompt") == '{"image":2,"video":1}' and "--tensor-parallel-size" not in qwen
    assert plan.external == ["elsewhere"]
    g = plan.gateway
    assert g is not None and g.gpus == ["6", "7"] and g.env == {"CUDA_VISIBLE_DEVICES": "6,7"}
    assert g.argv[:4] == [sys.executable, "-m", "judge_gateway.cli", "serve"] and _flag(g.argv, "--port") == "9000"
    text = plan.describe()
    assert "vLLM vllm-cosmos_reason1-8011: backend cosmos_reason1, GPUs 2,3" in text
    assert "gateway: http://127.0.0.1:9000, GPUs 6,7" in text
    assert "backend elsewhere: no launch table, an external server (not started)" in text


def test_the_video_path_s_flags_reach_the_servers(tmp_path):
    """A launched backend takes JPEG frame lists (its servers trust request media_io_kwargs) unless
    its video_input says mp4; api_server_count runs that many vLLM API servers (vLLM's serve entry)."""
    data = node_config(api_server_count=4)
    data["backends"]["qwen_vl"]["video_input"] = "mp4"
    plan = plan_up(validate_config(data), "/cfg.toml", run_dir=tmp_path, visible=EIGHT, port=9000)
    cosmos, qwen = plan.servers[0].argv, plan.servers[2].argv
    assert "--trust-request-mm-kwargs" in cosmos and _flag(cosmos, "--api-server-count") == "4"
    assert cosmos[1:5] == ["-m", "vllm.entrypoints.cli.main", "serve", "nvidia/Cosmos-Reason1-7B-Reward"]
    assert "--trust-request-mm-kwargs" not in qwen and "--api-server-count" not in qwen
    assert qwen[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]


def test_up_dry_run_prints_the_plan_for_eight_gpus(tmp_path, capsys, monkeypatch):
    config = tmp_path / "node.toml"
    config.write_text(textwrap.dedent("""
        [backends.cosmos_reason1]
        model = "nvidia/Cosmos-Reason1-7B-Reward"
        base_urls = ["http://127.0.0.1:8001/v1", "http://127.0.0.1:8011/v1", "http://127.0.0.1:8021/v1"]
        launch = { preset = "cosmos_reason1", gpus = 2 }
        [judges.cosmos_reason1]
        kind = "yes_no"
        backend = "cosmos_reason1"
        template = "cosmos_reason1@1"
    """))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
    # Flow-Factory launcher variables in the caller's shell are not the plan's
    monkeypatch.setenv("PORT", "7777")
    monkeypatch.setenv("DATA_PARALLEL_SIZE", "8")
    monkeypatch.chdir(tmp_path)
    assert main(["up", "--config", str(config), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "GPUs visible: 0, 1, 2, 3, 4, 5, 6, 7" in out
    for port, gpus in ((8001, "0,1"), (8011, "2,3"), (8021, "4,5")):
        assert f"vLLM vllm-cosmos_reason1-{port}: backend cosmos_reason1, GPUs {gpus}" in out
        assert f"env: CUDA_VISIBLE_DEVICES={gpus}" in out
        assert re.search(rf"cmd: .* --port {port} .*--tensor-parallel-size 2", out)
    # one server per base URL: no data-parallel replicas counted from the node's 8 visible GPUs
    assert "--data-parallel-size 4" not in out and "--data-parallel-size 8" not in out
    assert out.count("--data-parallel-size 1") == 3
    assert "gateway: http://127.0.0.1:8080, GPUs 6,7" in out
    assert not (tmp_path / "run" / "up").exists() or not list((tmp_path / "run" / "up").glob("*.pid"))


def test_too_few_gpus_is_refused_with_the_count(tmp_path):
    cfg = validate_config(node_config())
    with pytest.raises(LaunchError, match=r"backend 'qwen_vl' \(http://127.0.0.1:8015/v1\) needs 1 GPU\(s\), 0 left"):
        plan_up(cfg, None, run_dir=tmp_path, visible=["0", "1", "2", "3", "4"])
    shared = plan_up(cfg, None, run_dir=tmp_path, visible=EIGHT[:6])
    assert shared.gateway is not None and shared.gateway.gpus == EIGHT[:6]
    assert any("no GPU is left for the gateway's head workers" in n for n in shared.notes)


def test_a_launch_table_is_checked_at_load():
    with pytest.raises(ValidationError, match="must name a loopback host and a port"):
        BackendConfig(model="m", base_urls=["http://10.0.0.5:8001/v1"], launch={"preset": "qwen_vl"})
    with pytest.raises(ValidationError, match="unknown preset 'qwen'"):
        BackendConfig(model="m", base_urls=["http://127.0.0.1:8001/v1"], launch={"preset": "qwen"})
    with pytest.raises(ValidationError, match="launch needs a preset or a model"):
        BackendConfig(model="m", base_urls=["http://127.0.0.1:8001/v1"], launch={"gpus": 2})


def test_the_presets_are_start_vllm_shs():
    usage = (ROOT / "scripts" / "start_vllm.sh").read_text()
    listed = re.findall(r"^  ([a-z0-9_]+) +\S+/\S+ +port", usage, re.M)
    assert tuple(listed) == VLLM_PRESETS


FAKE_SERVER = textwrap.dedent("""
    import http.server, subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # a worker of its own
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
        def log_message(self, *a): pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
""")


async def test_a_child_that_dies_is_restarted_and_a_stop_leaves_no_process(tmp_path):
    port = free_port()
    plan = ProcessPlan("fake", [sys.executable, "-c", FAKE_SERVER, str(port)], {}, f"http://127.0.0.1:{port}/health",
                       startup_timeout_s=30, restart_backoff_s=0.2)
    said: list[str] = []
    child = Child(plan, tmp_path, said.append)
    stop = asyncio.Event()
    await child.start()
    await child.wait_healthy(stop)
    first = child.pid
    assert first is not None and (tmp_path / "fake.pid").read_text().strip() == str(first)
    supervisor = asyncio.create_task(child.supervise(stop))
    os.killpg(first, signal.SIGKILL)
    for _ in range(300):
        if child.restarts == 1 and child.state == "ready":
            break
        await asyncio.sleep(0.05)
    assert child.restarts == 1 and child.state == "ready" and child.pid != first, said
    assert any(f"fake (pid {first}) died with code -9" in m for m in said)
    family = [child.pid, *descendants(child.pid)]
    assert len(family) == 2
    stop.set()
    await supervisor
    await child.stop(grace_s=5)
    assert not [p for p in family if alive(p)]
    assert not (tmp_path / "fake.pid").exists()
    assert "up starts fake" in (tmp_path / "fake.log").read_text()


async def test_a_child_that_exits_at_start_says_why(tmp_path):
    plan = ProcessPlan("bad", [sys.executable, "-c", "import sys; print('no model here'); sys.exit(4)"], {},
                       f"http://127.0.0.1:{free_port()}/health", startup_timeout_s=30)
    child = Child(plan, tmp_path, lambda _: None)
    await child.start()
    from judge_gateway.launch import StartFailed

    with pytest.raises(StartFailed, match=r"(?s)bad exited with code 4 before answering.*no model here"):
        await child.wait_healthy(asyncio.Event())
    await child.stop(grace_s=1)


def _guide_configs() -> list[dict]:
    import tomllib

    text = (ROOT / "docs" / "guides" / "gpu-node.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    return [tomllib.loads(b) for b in blocks if "[backends." in b]


def test_the_gpu_node_guide_configs_load_and_plan_as_it_says(tmp_path):
    launch, cosmos, flow = _guide_configs()
    assert [p.name for p in plan_up(validate_config(launch), None, run_dir=tmp_path, visible=EIGHT).servers] == [
        "vllm-my_judge-8101", "vllm-my_judge-8102"]
    plan = plan_up(validate_config(cosmos), None, run_dir=tmp_path, visible=EIGHT, host="0.0.0.0")
    assert [(p.name, p.gpus) for p in plan.servers] == [
        ("vllm-cosmos_reason1-8001", ["0"]), ("vllm-cosmos_reason1-8011", ["1"]), ("vllm-unified_reward-8004", ["2"])]
    assert plan.gateway is not None and plan.gateway.gpus == ["3", "4", "5", "6", "7"]
    assert "gateway: http://0.0.0.0:8080, GPUs 3,4,5,6,7" in plan.describe()
    plan = plan_up(validate_config(flow), None, run_dir=tmp_path, visible=EIGHT)
    assert [p.gpus for p in plan.servers] == [["0"], ["1"], ["2"], ["3"]]
    assert plan.gateway is not None and plan.gateway.gpus == ["4", "5", "6", "7"]


def test_start_vllm_sh_ships_inside_the_package():
    """A wheel carries launch/start_vllm.sh (package data); in a checkout it is scripts/start_vllm.sh
    itself, resolved, so the script's own REPO_ROOT is the checkout."""
    import tomllib

    from judge_gateway.launch.plan import start_script

    root = Path(__file__).resolve().parents[2]
    assert start_script() == (root / "scripts" / "start_vllm.sh").resolve()
    packaged = root / "judge_gateway" / "launch" / "start_vllm.sh"
    assert packaged.read_bytes() == (root / "scripts" / "start_vllm.sh").read_bytes()
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "launch/start_vllm.sh" in data["judge_gateway"]
