"""judges.NAME.residency at config load, and what `up` starts for a colocated backend: vLLM's
sleep mode (--enable-sleep-mode) and its dev endpoints (VLLM_SERVER_DEV_MODE=1), never on vLLM's
CPU build, which refuses sleep mode (vllm/config/model.py: "Sleep mode is not supported on current
platform.")."""

from __future__ import annotations

import pytest

from judge_gateway.config import ConfigError, validate_config
from judge_gateway.launch import plan_up
from judge_gateway.runs import config_sha256


def config(residency: object = "colocated", gpus: int = 1, other: object | None = None) -> dict:
    judges = {
        "alignment": {"kind": "yes_no", "backend": "qwen_vl", "template": "vqa_alignment@1", "residency": residency},
        "pickscore": {"kind": "pickscore", "options": {"device": "cuda"}, "residency": "colocated"},
    }
    if other is not None:
        judges["quality"] = {"kind": "yes_no", "backend": "qwen_vl", "template": "image_quality@1", "residency": other}
    return {"backends": {"qwen_vl": {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "base_urls": ["http://127.0.0.1:8005/v1"],
                                     "launch": {"preset": "qwen_vl", "gpus": gpus}}},
            "judges": judges}


def test_the_shorthand_and_the_table_mean_the_same():
    short = validate_config(config("colocated")).judges["alignment"].residency
    table = validate_config(config({"mode": "colocated"})).judges["alignment"].residency
    assert short == table and short.colocated and short.level == 1 and short.idle_sleep_s == 60.0
    assert not validate_config({"judges": {"c": {"kind": "clip"}}}).judges["c"].residency.colocated


def test_an_unknown_residency_is_refused_with_the_choices():
    with pytest.raises(ConfigError, match="judges.alignment.residency.*'asleep' is not a residency"):
        validate_config(config("asleep"))
    with pytest.raises(ConfigError, match="judges.alignment.residency.level"):
        validate_config(config({"mode": "colocated", "level": 3}))


def test_judges_on_one_backend_must_share_their_residency():
    with pytest.raises(ConfigError, match="judges.quality.residency: judges 'alignment' and 'quality' share backend"):
        validate_config(config("colocated", other="resident"))
    validate_config(config("colocated", other="colocated"))


def test_a_colocated_backend_on_vllms_cpu_build_is_refused_at_load():
    with pytest.raises(ConfigError, match="launch.gpus = 0.*refuses --enable-sleep-mode: keep it resident"):
        validate_config(config("colocated", gpus=0))
    validate_config(config("resident", gpus=0))


def test_residency_is_no_part_of_the_config_hash():
    """A woken judge scores bit for bit as a resident one: a score folder resumes across the change."""
    colocated, resident = validate_config(config("colocated")), validate_config(config("resident"))
    assert colocated.judges["alignment"].residency != resident.judges["alignment"].residency
    assert config_sha256(colocated.model_dump(mode="json")) == config_sha256(resident.model_dump(mode="json"))


def test_up_starts_a_colocated_backend_with_sleep_mode_and_dev_endpoints(tmp_path):
    plan = plan_up(validate_config(config("colocated")), "/cfg.toml", run_dir=tmp_path, visible=["0", "1"])
    server = plan.servers[0]
    assert "--enable-sleep-mode" in server.argv and server.env["VLLM_SERVER_DEV_MODE"] == "1"
    resident = plan_up(validate_config(config("resident")), "/cfg.toml", run_dir=tmp_path, visible=["0", "1"])
    assert "--enable-sleep-mode" not in resident.servers[0].argv
    assert "VLLM_SERVER_DEV_MODE" not in resident.servers[0].env
