"""The shipped qwen3_vl config: every new kind's judge on its model's launch preset, which `up`
turns into start_vllm.sh's command and `prepare` into the weights it fetches."""

from __future__ import annotations

from judge_gateway.config import load_config
from judge_gateway.launch import plan_up
from judge_gateway.prepare.run import preset_model
from judge_gateway.prepare.weights import backend_weights

MODELS = {
    "cosmos_reason2": ("nvidia/Cosmos-Reason2-8B", "16384", '{"image":1,"video":1}'),
    "unified_reward_2": ("CodeGoat24/UnifiedReward-2.0-qwen3vl-8b", "16384", '{"image":2,"video":1}'),
    "unified_reward_think": ("CodeGoat24/UnifiedReward-Think-qwen3vl-8b", "16384", '{"image":2,"video":1}'),
    "videoscore2": ("TIGER-Lab/VideoScore2", "16384", '{"video":1}'),
    "qwen3_vl": ("Qwen/Qwen3-VL-8B-Instruct", "8192", '{"image":2,"video":1}'),
}


def test_every_new_kind_is_configured_on_its_preset(tmp_path):
    cfg = load_config("qwen3_vl")
    kinds = {j.kind for j in cfg.judges.values()}
    assert {"yes_no", "multi_axis", "answer_probability", "checklist"} <= kinds
    assert all(not j.default for j in cfg.judges.values())
    plan = plan_up(cfg, "/cfg.toml", run_dir=tmp_path, visible=[str(i) for i in range(8)], port=9000)
    commands = {s.name.split("-")[1]: s.argv for s in plan.servers}
    for backend, (model, max_len, limit_mm) in MODELS.items():
        argv = commands[backend]
        flag = dict(zip(argv, argv[1:]))
        assert (flag["--model"], flag["--served-model-name"], flag["--max-model-len"]) == (model, model, max_len)
        assert flag["--limit-mm-per-prompt"] == limit_mm and cfg.backends[backend].model == model
        refs = backend_weights(cfg.backends[backend], preset_model(backend, cfg))
        assert [(r.ref, r.form, r.option) for r in refs] == [(model, "repo", "launch.preset")]
