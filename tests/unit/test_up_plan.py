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
    assert ("backend elsewhere: not started: it has no launch table ([backends.elsewhere.launch]: the preset or "
            "model, GPUs and context `up` starts its vLLM server with), so it is a server you run yourself") in text
    assert "  head pickscore (pickscore): worker under the gateway's interpreter, on cuda (GPU 6)" in text


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


GUIDE = ROOT / "docs" / "guides" / "gpu-node.md"
QUOTE = re.compile(r"<!-- example: (\S+) -->\n```\w+\n(.*?)\n```", re.S)


def test_the_gpu_node_guides_configs_are_the_shipped_ones_quoted_as_they_are():
    """Issue 33: the guide's own cosmos-rl config had a template that answered `answer_missing`
    on every sample and half the pixel budget; now it quotes the shipped configs, verbatim (they
    are served and scored in tests/integration/test_gpu_node_guide.py)."""
    text = GUIDE.read_text()
    quotes = QUOTE.findall(text)
    assert {path for path, _ in quotes} == {"configs/cosmos_rl.toml", "configs/flow_factory.toml"}
    for path, block in quotes:
        assert block in (ROOT / path).read_text(), f"the guide's quote of {path} is not in the file:\n{block}"
    joined = "\n".join(block for _, block in quotes)
    assert 'template = "cosmos_reason1@2"' in joined and "total_pixels = 14450688" in joined
    assert 'options = { occurrence = "first"' in joined


def test_the_gpu_node_guides_plans_are_what_up_prints(tmp_path, monkeypatch, capsys):
    text = GUIDE.read_text()
    import tomllib

    launch = tomllib.loads(re.findall(r"```toml\n(.*?)```", text, re.S)[0])
    assert [p.name for p in plan_up(validate_config(launch), None, run_dir=tmp_path, visible=EIGHT).servers] == [
        "vllm-my_judge-8101", "vllm-my_judge-8102"]
    flow = plan_up(validate_config(tomllib.loads((ROOT / "configs" / "flow_factory.toml").read_text())), None,
                   run_dir=tmp_path, visible=EIGHT)
    assert [(p.backend, p.gpus) for p in flow.servers] == [("qwen_vl", ["0"]), ("rational_rewards_t2i", ["1"]),
                                                          ("rational_rewards_edit", ["2"])]
    # the guide's 8-GPU dry run of the cosmos_rl config is today's output (its paths aside)
    shown = re.search(r"judge-gateway up --config cosmos_rl --dry-run` on an 8-GPU node.*?```text\n(.*?)```", text,
                      re.S).group(1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
    monkeypatch.chdir(tmp_path)
    assert main(["up", "--config", "cosmos_rl", "--dry-run"]) == 0
    out = capsys.readouterr().out

    def shape(lines: str) -> list[str]:
        return [re.sub(r"(/\S*)?/(\.venv[\w-]*|configs|judge_gateway/shipped_configs|run)/", "/", line).replace(
            "python3 -m", "/bin/python -m").split(" --config ")[0] for line in lines.strip().splitlines()]

    assert shape(shown)[1:] == shape(out)[1:]


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


def test_the_shipped_cosmos_rl_config_on_eight_gpus_lists_servers_heads_and_the_latent_decoder(tmp_path, capsys,
                                                                                             monkeypatch):
    """The issue's "must show": `up --config cosmos_rl --dry-run` on a node with 8 GPUs (the GPU list
    given the way up reads it, CUDA_VISIBLE_DEVICES): both VLM servers, every head, the decoder."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
    monkeypatch.chdir(tmp_path)
    assert main(["up", "--config", "cosmos_rl", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "vLLM vllm-cosmos_reason1-8001: backend cosmos_reason1, GPUs 0" in out
    assert "vLLM vllm-unified_reward-8004: backend unified_reward, GPUs 1" in out
    assert re.search(r"--model nvidia/Cosmos-Reason1-7B-Reward .*--max-model-len 16384 --limit-mm-per-prompt "
                     r"'\{\"video\":1\}'", out), out
    assert "gateway: http://127.0.0.1:8080, GPUs 2,3,4,5,6,7" in out
    for head in ("videoalign", "pickscore", "hpsv2", "hpsv3", "image_reward", "gen_eval"):
        assert re.search(rf"head {head} \({head}\): worker under \.venv-\w+/bin/python, on cuda \(GPU 2\)", out), head
    assert "head ocr (ocr): worker under .venv-heads/bin/python, on cpu" in out
    assert ("latent decoder (cosmos-rl): worker under .venv-latents/bin/python, on cuda (GPU 2) "
            "(wan2_1 Wan-AI/Wan2.1-T2V-1.3B-Diffusers, wan2_2 Wan-AI/Wan2.2-TI2V-5B-Diffusers)") in out
    assert "not started" not in out  # every backend of the shipped config has a launch table


async def test_up_refuses_to_start_a_server_where_one_already_answers(tmp_path):
    """A server of one's own on a launch table's port: `up` says so before starting anything."""
    from judge_gateway.launch import UpPlan, run_up

    async def healthy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(healthy, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        plan = UpPlan([ProcessPlan("vllm-x-1", [sys.executable, "-c", "raise SystemExit(9)"], {},
                                   f"http://127.0.0.1:{port}/health")], None, [], tmp_path)
        said: list[str] = []
        assert await run_up(plan, grace_s=1, say=said.append) == 1
    finally:
        server.close()
    assert any(f"vllm-x-1: something already answers http://127.0.0.1:{port}/health" in m for m in said), said
    assert not any("starting 1 vLLM server" in m for m in said)
