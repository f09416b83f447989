"""`prepare`'s parts without workers: the weights each kind names, the check of a weight, the
environments a config needs (and a venv two specs would share), the table."""

from __future__ import annotations

import pytest

from judge_gateway.cli import main
from judge_gateway.config import HEAD_KINDS, validate_config
from judge_gateway.envs import load_specs
from judge_gateway.prepare import Row, WeightRef, check_weight, environment_needs, format_table, judge_weights
from judge_gateway.prepare.weights import WEIGHT_OPTIONS


def _judge(kind: str, **options):
    return validate_config({"judges": {"j": {"kind": kind, "options": options}}}).judges["j"]


def test_every_head_kind_says_which_options_name_weights():
    assert set(WEIGHT_OPTIONS) == set(HEAD_KINDS)


def test_the_weights_each_kind_names_are_read_as_its_loader_reads_them():
    refs = {r.option: (r.ref, r.form) for r in judge_weights(_judge("image_reward"))}
    assert refs == {"options.checkpoint": ("THUDM/ImageReward/ImageReward.pt", "file"),
                    "options.med_config": ("THUDM/ImageReward/med_config.json", "file"),
                    "options.tokenizer": ("bert-base-uncased", "repo")}
    hpsv3 = {r.option: r.ref for r in judge_weights(_judge("hpsv3"))}
    assert hpsv3["options.base_model"] == "Qwen/Qwen2-VL-7B-Instruct"  # the package yaml's own
    open_clip = judge_weights(_judge("clip", library="open_clip", model="ViT-L-14", pretrained="openai"))
    assert [(r.option, r.form) for r in open_clip] == [("options.pretrained", "library")]  # model: an architecture
    local = judge_weights(_judge("hpsv2", checkpoint="/models/hps.pt"))
    assert [(r.ref, r.form) for r in local] == [("/models/hps.pt", "path")]
    assert judge_weights(_judge("ocr")) == []


def test_a_weight_is_local_missing_or_not_in_the_cache(tmp_path):
    file = tmp_path / "w.pt"
    file.write_bytes(b"x")
    assert check_weight(WeightRef("options.checkpoint", str(file), "path"), offline=True, download_dir=None).ok
    missing = check_weight(WeightRef("options.checkpoint", str(tmp_path / "no.pt"), "path"), offline=True,
                           download_dir=None)
    assert not missing.ok and missing.detail == f"options.checkpoint: {tmp_path / 'no.pt'} not found"
    bad = check_weight(WeightRef("options.checkpoint", "just-a-name.pt", "file"), offline=True, download_dir=None)
    assert not bad.ok and "neither a local path nor repo_id/filename" in bad.detail
    pytest.importorskip("huggingface_hub")
    cold = check_weight(WeightRef("options.model", "org/never-downloaded", "repo"), offline=True,
                        download_dir=tmp_path / "hub")
    assert not cold.ok and "not in the hub cache (--offline: nothing fetched)" in cold.detail


def test_one_venv_for_two_specs_is_a_problem_of_the_second_judge():
    cfg = validate_config({"judges": {
        "pick": {"kind": "pickscore", "options": {"python": ".venv-x/bin/python"}},
        "hps3": {"kind": "hpsv3", "options": {"python": ".venv-x/bin/python"}},
        "ocr": {"kind": "ocr"}}})
    rows = {n: Row(n, cfg.judges[n].kind) for n in cfg.judges}
    needs = environment_needs(cfg, list(cfg.judges), load_specs(), rows)
    assert [(n.spec, n.users) for n in needs] == [("heads", ["pick"])]
    assert rows["hps3"].problems and "is the 'heads' environment of pick, but hpsv3 needs 'hpsv3'" in rows["hps3"].problems[0]
    assert rows["ocr"].env is None  # no python of its own: the gateway's interpreter


def test_a_brought_class_runs_in_the_venv_it_names_which_prepare_never_builds():
    cfg = validate_config({"judges": {"mine": {"kind": "cosmos_rl_handler", "options": {
        "handler": "rewards:Mine", "python": "/srv/.venv-mine/bin/python"}}}})
    rows = {"mine": Row("mine", "cosmos_rl_handler")}
    assert environment_needs(cfg, ["mine"], load_specs(), rows) == []
    assert rows["mine"].env is None and rows["mine"].env_text == "yours: /srv/.venv-mine"
    assert judge_weights(cfg.judges["mine"]) == []


def test_the_table_has_a_row_per_judge():
    rows = [Row("ocr", "ocr", load="ok", probe="ok (reward 1)", seconds=2.04), Row("clip", "clip")]
    lines = format_table(rows).splitlines()
    assert lines[0].split() == ["judge", "env", "weights", "load", "probe", "time"]
    assert lines[1].split()[:2] == ["ocr", "gateway's"] and lines[1].endswith("2.0 s")
    assert lines[2].split()[-1] == "-"


def test_prepare_torch_cuda_dry_run_prints_the_index_and_pins(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the venvs are relative to it: a dry run must create none
    config = tmp_path / "c.toml"
    config.write_text('[judges.pick]\nkind = "pickscore"\noptions = { python = ".venv-heads/bin/python" }\n'
                      '[judges.h3]\nkind = "hpsv3"\noptions = { python = ".venv-hpsv3/bin/python" }\n')
    assert main(["prepare", "--config", str(config), "--torch", "cuda", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "torch 2.13.0 (cuda build: --torch cuda) from the configured package index" in out
    assert "environment heads for pick:" in out and "environment hpsv3 for h3:" in out
    assert "constraints: torch==2.13.0 torchvision==0.28.0 transformers==4.45.2" in out
    assert "pip install torch==2.13.0   # cuda build" in out
    assert "judge pick (pickscore): weights options.model=yuvalkirstain/PickScore_v1 (repo)" in out
    assert [p.name for p in tmp_path.iterdir()] == ["c.toml"]
    main(["prepare", "--config", str(config), "--torch", "cuda", "--torch-index",
          "https://download.pytorch.org/whl/cu126", "--dry-run"])
    assert "pip install --extra-index-url https://download.pytorch.org/whl/cu126 torch==2.13.0" in capsys.readouterr().out


def test_dry_run_of_the_cosmos_rl_config_lists_every_step_the_latent_decoder_and_vlm_weights_included(
        tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["prepare", "--config", "cosmos_rl", "--torch", "cuda", "--dry-run"]) == 0
    out = capsys.readouterr().out
    for env in ("vllm for cosmos_reason1, unified_reward", "heads for videoalign, pickscore, hpsv2, ocr",
                "hpsv3 for hpsv3", "imagereward for image_reward", "geneval for gen_eval",
                "latents for cosmos_rl.latents"):
        assert f"environment {env}:" in out, env
    assert "pip install -c constraints vllm==0.32.0" in out
    assert ("judge cosmos_reason1 (yes_no): weights launch.preset=nvidia/Cosmos-Reason1-7B-Reward (repo): fetch what "
            "is missing; then start its vLLM server(s) as `up` would") in out
    assert "judge unified_reward (final_score): weights launch.preset=CodeGoat24/UnifiedReward-qwen-7b (repo)" in out
    assert ("latent decoder cosmos_rl.latents: weights cosmos_rl.latents.wan2_1.checkpoint=Wan-AI/Wan2.1-T2V-1.3B-"
            "Diffusers (repo), cosmos_rl.latents.wan2_2.checkpoint=Wan-AI/Wan2.2-TI2V-5B-Diffusers (repo)") in out
    assert "options.detector_checkpoint=https://download.openmmlab.com/" in out and "(url)" in out
    assert "judge-gateway==" not in out  # environments get this judge-gateway, never the index's
    assert [p.name for p in tmp_path.iterdir()] == []  # nothing made


def test_offline_says_present_or_missing_never_fetched(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    url = "https://download.openmmlab.com/mmdetection/v3.0/x/detector_123.pth"
    missing = check_weight(WeightRef("options.detector_checkpoint", url, "url"), offline=True, download_dir=None)
    assert not missing.ok and missing.state == "missing"
    assert f"is not in torch hub's cache ({tmp_path / 'torch' / 'hub' / 'checkpoints' / 'detector_123.pth'}" in \
        missing.detail
    (tmp_path / "torch" / "hub" / "checkpoints").mkdir(parents=True)
    (tmp_path / "torch" / "hub" / "checkpoints" / "detector_123.pth").write_bytes(b"w")
    cached = check_weight(WeightRef("options.detector_checkpoint", url, "url"), offline=True, download_dir=None)
    assert cached.ok and cached.state == "cached"
    library = check_weight(WeightRef("options.clip_pretrained", "openai", "library"), offline=True, download_dir=None)
    assert library.ok and library.state == "library" and "fetch" not in library.detail
    row = Row("gen_eval", "gen_eval", weights=[cached, library])
    assert row.weights_text == "cached, library"


def test_a_gated_model_is_named_with_how_to_get_access(tmp_path, monkeypatch):
    """The Cosmos-Reason1 reward model is gated on the hub: the refusal says which model, that a
    token is missing (or lacks access), and the steps; never a bare HTTP error."""
    hub = pytest.importorskip("huggingface_hub")
    from huggingface_hub.errors import GatedRepoError

    def refuse(repo_id, **kwargs):  # what the hub raises for a gated repo without access (its HTTP reply aside)
        if kwargs.get("local_files_only"):
            raise FileNotFoundError("not cached")
        exc = GatedRepoError.__new__(GatedRepoError)
        Exception.__init__(exc, "401 Client Error. Cannot access gated repo")
        raise exc

    monkeypatch.setattr(hub, "snapshot_download", refuse)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no login there
    status = check_weight(WeightRef("launch.preset", "nvidia/Cosmos-Reason1-7B-Reward", "repo"), offline=False,
                          download_dir=tmp_path / "hub")
    assert not status.ok
    assert status.detail.startswith("launch.preset: nvidia/Cosmos-Reason1-7B-Reward is gated on the Hugging Face hub "
                                    "and no token is set: accept its terms on "
                                    "https://huggingface.co/nvidia/Cosmos-Reason1-7B-Reward"), status.detail
    assert "export HF_TOKEN=" in status.detail
    monkeypatch.setenv("HF_TOKEN", "hf_example")
    status = check_weight(WeightRef("launch.preset", "nvidia/Cosmos-Reason1-7B-Reward", "repo"), offline=False,
                          download_dir=tmp_path / "hub")
    assert "a token is set (HF_TOKEN or `hf auth login`) but its account has no access" in status.detail


async def test_a_launched_backend_that_cannot_start_here_is_that_judges_problem(tmp_path):
    """prepare starts a launched backend's servers for its probe (as `up` would); a launch table
    asking for GPUs on a machine without them is that judge's not-ready reason, not a crash."""
    from tests.support.fake_openai import free_port

    from judge_gateway.prepare.run import Options, _check

    cfg = validate_config({
        "backends": {"vlm": {"model": "m", "base_urls": [f"http://127.0.0.1:{free_port()}/v1"],
                             "launch": {"model": str(tmp_path), "gpus": 1}}},
        "judges": {"q": {"kind": "yes_no", "backend": "vlm", "template": "image_quality@1"}}})
    rows = {"q": Row("q", "yes_no")}
    import judge_gateway.launch.plan as plan

    original = plan.visible_gpus
    plan.visible_gpus = lambda environ=None: []  # a machine without GPUs, whatever this one has
    try:
        await _check(cfg, rows, Options(run_dir=tmp_path / "run"))
    finally:
        plan.visible_gpus = original
    assert rows["q"].load == "cannot start here"
    assert rows["q"].problems == [f"load: backend 'vlm' (http://127.0.0.1:{cfg.backends['vlm'].base_urls[0].split(':')[2].split('/')[0]}/v1) "
                                  "needs 1 GPU(s), 0 left of CUDA_VISIBLE_DEVICES=(none)"], rows["q"].problems
    skipped = {"q": Row("q", "yes_no")}
    await _check(cfg, skipped, Options(run_dir=tmp_path / "run", start=False))
    assert skipped["q"].load == "not started (--no-start)" and skipped["q"].ok
