"""The [ray] section: typed, checked at load, and needing no Ray installed (this runs under .venv)."""

from __future__ import annotations

import subprocess
import sys

from pathlib import Path

import pytest

from judge_gateway.config import ConfigError, validate_config

HEAD = {"kind": "ocr", "default": False, "options": {"device": "cpu"}}
VLM = {"kind": "yes_no", "backend": "qwen", "template": "image_quality@1"}
BACKENDS = {"qwen": {"model": "m", "base_urls": ["http://127.0.0.1:9/v1"]}}


def config(ray: dict, store: dict | None = None, **extra) -> dict:
    return {"backends": BACKENDS, "judges": {"ocr": HEAD, "quality": VLM},
            "store": store or {"kind": "redis", "url": "redis://127.0.0.1:6379/0", "queue": {"enabled": True}},
            "ray": ray, **extra}


def test_a_ray_section_loads_typed_with_its_defaults():
    cfg = validate_config(config({"address": "10.0.0.1:6379", "gateway": {"num_replicas": 4, "num_cpus": 2},
                                  "heads": {"ocr": {"autoscaling": {"min_replicas": 1, "max_replicas": 8},
                                                    "num_gpus": 0.5}}}))
    assert cfg.ray is not None and cfg.ray.address == "10.0.0.1:6379"
    assert cfg.ray.gateway.replica_bounds() == (4, 4) and cfg.ray.gateway.num_cpus == 2.0
    ocr = cfg.ray.heads["ocr"]
    assert ocr.replica_bounds() == (1, 8) and ocr.num_gpus == 0.5 and ocr.max_ongoing_requests == 64
    assert ocr.autoscaling is not None and ocr.autoscaling.target_ongoing_requests == 8.0
    assert (cfg.ray.http_host, cfg.ray.http_port, cfg.ray.head_call_retries) == ("127.0.0.1", 8000, 2)


def test_without_a_ray_section_there_is_none_and_loading_one_imports_no_ray():
    cfg = validate_config({"judges": {"ocr": HEAD}})
    assert cfg.ray is None
    code = ("import sys; from judge_gateway.config import validate_config; "
            f"validate_config({config({'gateway': {'num_replicas': 2}})!r}); assert 'ray' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("ray, store, expected", [
    ({"heads": {"nope": {}}}, None, "ray.heads.nope: no such judge"),
    ({"heads": {"quality": {}}}, None, "ray.heads.quality: not a head judge (VLM judges stay URLs"),
    ({"gateway": {"num_replicas": 2}}, {"kind": "memory"},
     'ray.gateway: 2 replicas serving cosmos-rl need store.kind = "redis"'),
    ({"gateway": {"autoscaling": {"min_replicas": 1, "max_replicas": 3}}}, {"kind": "memory"},
     'ray.gateway: 3 replicas serving cosmos-rl need store.kind = "redis"'),
    ({"gateway": {"num_replicas": 2}}, {"kind": "redis", "url": "redis://127.0.0.1:6379/0"},
     "ray.gateway: 2 replicas serving cosmos-rl need store.queue.enabled = true"),
    ({"gateway": {"num_replicas": 2, "autoscaling": {}}}, None, "set num_replicas or autoscaling, not both"),
    ({"gateway": {"autoscaling": {"min_replicas": 3, "max_replicas": 2}}}, None,
     "min_replicas = 3 exceeds max_replicas = 2"),
    ({"gateway": {"num_gpus": -1}}, None, "ray.gateway.num_gpus"),
    ({"gateway": {"replicas": 2}}, None, "ray.gateway.replicas: Extra inputs are not permitted"),
    ({"http_port": 0}, None, "ray.http_port"),
])
def test_bad_ray_sections_are_refused_at_load_naming_the_key(ray, store, expected):
    with pytest.raises(ConfigError) as err:
        validate_config(config(ray, store))
    assert expected in str(err.value)


def test_one_gateway_replica_or_no_cosmos_rl_may_keep_the_memory_store():
    validate_config(config({"gateway": {"num_replicas": 1}}, {"kind": "memory"}))
    validate_config(config({"gateway": {"num_replicas": 3}}, {"kind": "memory"}, cosmos_rl={"enabled": False}))


def test_serve_ray_and_ray_status_are_commands():
    from judge_gateway.cli import build_parser

    args = build_parser().parse_args(["serve", "--ray", "10.0.0.1:6379"])
    assert args.ray == "10.0.0.1:6379"
    assert build_parser().parse_args(["serve", "--ray"]).ray == ""  # the [ray] section's address
    assert build_parser().parse_args(["serve"]).ray is None  # one machine, the default
    args = build_parser().parse_args(["ray-status", "--address", "auto", "--json"])
    assert args.address == "auto" and args.json


def test_serve_with_a_ray_section_deploys_on_ray_never_on_one_machine(tmp_path, capsys, monkeypatch):
    """A [ray] section is never silently served on one machine: `serve` takes the Ray path (here,
    with Ray hidden, it says which extra is missing instead of starting uvicorn)."""
    from judge_gateway import cli

    path = tmp_path / "ray.toml"
    path.write_text('[judges.ocr]\nkind = "ocr"\ndefault = false\n\n[ray]\naddress = "127.0.0.1:1"\n')
    monkeypatch.setitem(sys.modules, "ray", None)  # as where the extra is not installed
    monkeypatch.setitem(sys.modules, "judge_gateway.ray_mode.deploy", None)
    monkeypatch.setattr("uvicorn.run", lambda *a, **k: pytest.fail("served on one machine"))
    assert cli.main(["serve", "--config", str(path)]) == 2
    checkout = Path(__file__).resolve().parents[2]  # the command that works from here: not the package index
    assert f"Ray mode needs the `ray` extra (pip install -e '{checkout}[ray]'" in capsys.readouterr().err


def test_serve_on_ray_warns_that_host_and_port_are_unused(tmp_path, capsys, monkeypatch):
    """Serve's proxy listens on ray.http_host / http_port: --host/--port and server.host/port given
    with [ray] are said to be unused (not silently ignored, nor checked as if uvicorn bound them)."""
    from judge_gateway import cli

    path = tmp_path / "ray.toml"
    path.write_text('[server]\nport = 8123\n\n[judges.ocr]\nkind = "ocr"\ndefault = false\n\n'
                    '[ray]\naddress = "127.0.0.1:1"\n')
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setitem(sys.modules, "judge_gateway.ray_mode.deploy", None)
    assert cli.main(["serve", "--config", str(path), "--host", "127.0.0.1"]) == 2
    err = capsys.readouterr().err
    assert "warning: --host, server.port not used in Ray mode: Serve's proxy listens on ray.http_host / " \
           "ray.http_port" in err
    assert "Ray mode needs the `ray` extra" in err
