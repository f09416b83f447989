"""cosmos-rl's reward-service config (`rewards.toml`: reward_service/cosmos_rl_reward/configs/,
its fields in launcher/config.py) read as a judge-gateway config.

`judge-gateway serve --config rewards.toml` recognises the format (a `[[reward_args]]` array, or
cosmos-rl's top-level keys and none of ours) and maps every field onto our sections, saying
for each what it became and why (`RewardsToml.lines`, which serve prints). Each enabled
`reward_args` entry becomes the judge its reward name maps to (as configs/cosmos_rl.toml has them:
weights by hub id, a worker venv per head kind); `host`/`port` the server's bind; `redis_host`/
`redis_port` a Redis result store (serve starts a local one that is not running, as
cosmos-rl's launcher does, or refuses a remote one that does not answer); `decode_args` the Wan decoders.
What cosmos-rl's format cannot say (tiny test models, an allow-list) goes in an optional
`[judge_gateway]` table of our own sections, merged over the mapping: cosmos-rl's launcher ignores
unknown tables, so the same file still runs there.
"""

from __future__ import annotations

import copy
import os
from urllib.parse import urlsplit
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import ConfigurationError

# cosmos-rl's RewardArgs / DecodeArgs / Config fields (launcher/config.py), with its defaults.
REWARD_ARGS_DEFAULTS: dict[str, Any] = {
    "reward_type": "cosmos_reason1", "venv_python": "python", "model_path": "nvidia/Cosmos-Reason1-7B-Reward",
    "download_path": "/workspace", "setup_script": "", "dtype": "float16", "work_dir": "evaluation_results",
    "tmp_dir": "/tmp", "device": "cuda", "endpoint_url": "", "endpoint_api_key": "", "enable": True,
}
DECODE_ARGS_DEFAULTS: dict[str, Any] = {
    "model_path": "https://huggingface.co/Wan-AI/Wan2.1-T2V-1.3B/resolve/main/Wan2.1_VAE.pth",
    "dtype": "float16", "device": "cuda", "chunk_duration": 81, "temporal_window": 16, "load_mean_std": False,
    "wan2pt2_model_path": "", "wan2pt2_credential_path": "",
}
TOP_LEVEL = ("host", "port", "redis_host", "redis_port", "reward_args", "decode_args", "no_latent_decoder")
OVERLAY = "judge_gateway"
DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
# The reward name -> our judge (configs/cosmos_rl.toml and protocols.DEFAULT_COSMOS_REWARDS).
JUDGE_OF = {"cosmos_reason1": "cosmos_reason1", "dance_grpo": "videoalign", "hpsv2": "hpsv2", "hpsv3": "hpsv3",
            "pickscore": "pickscore", "image_reward": "image_reward", "ocr": "ocr", "gen_eval": "gen_eval",
            "unified_reward": "unified_reward"}
VIDEO_REWARDS = ("cosmos_reason1", "dance_grpo")  # cosmos-rl's NEEDS_LATENT_DECODER
VLM_PORTS = {"cosmos_reason1": 8001, "unified_reward": 8004}  # scripts/start_vllm.sh's presets
# How `judge-gateway up` serves each VLM reward on this machine (as configs/cosmos_rl.toml: the
# preset's model, one GPU, a context holding the judge's visual budget and its reply).
VLM_LAUNCH = {"cosmos_reason1": {"preset": "cosmos_reason1", "gpus": 1, "max_model_len": 16384,
                                 "limit_mm_per_prompt": {"video": 1}},
              "unified_reward": {"preset": "unified_reward", "gpus": 1, "max_model_len": 8192,
                                 "limit_mm_per_prompt": {"image": 1}}}
PRESET_MODELS = {"cosmos_reason1": "nvidia/Cosmos-Reason1-7B-Reward", "unified_reward": "CodeGoat24/UnifiedReward-qwen-7b"}
# cosmos-rl's unified_reward reads the first match of this (model/unified_reward.py 48-60).
UNIFIED_REWARD_PATTERN = r"Final Score:\s*([1-5](?:\.\d+)?)"
GENEVAL_CKPT = "mask2former_swin-s-p4-w7-224_lsj_8x2_50e_coco_20220504_001756-743b7d99.pth"
# What each head kind runs under when the file names no usable interpreter (configs/cosmos_rl.toml).
VENVS = {"videoalign": ".venv-heads/bin/python", "pickscore": ".venv-heads/bin/python",
         "hpsv2": ".venv-heads/bin/python", "hpsv3": ".venv-hpsv3/bin/python",
         "image_reward": ".venv-imagereward/bin/python", "ocr": ".venv-heads/bin/python",
         "gen_eval": ".venv-geneval/bin/python"}
# Fields each reward's handler in cosmos-rl reads (model/*.py); the others it stores unused.
USES_DTYPE = ("dance_grpo", "pickscore", "image_reward")
# cosmos-rl's hpsv3 handler (model/hpsv3.py 84-109) stores `dtype` but never passes it on: the hpsv3
# package's HPSv3_7B.yaml runs the model in bfloat16 whatever rewards.toml says.
FIXED_DTYPE = {"hpsv3": "bf16"}


class RewardsTomlError(ConfigurationError):
    """A rewards.toml that cannot be mapped; the message names the field."""


@dataclass
class RewardsToml:
    """The mapped config (our sections, validated by the caller), what each field became, and
    the Redis cosmos-rl's reward service would start (host, port)."""

    data: dict[str, Any]
    lines: list[str] = field(default_factory=list)
    redis: tuple[str, int] | None = None


def is_cosmos_rl_rewards(data: dict[str, Any]) -> bool:
    """cosmos-rl's format: a `reward_args` array, or its top-level keys and none of ours."""
    if isinstance(data.get("reward_args"), list):
        return True
    ours = {"server", "judges", "backends", "cosmos_rl", "flow_factory", "store", "media", "combine"}
    return bool(set(data) & set(TOP_LEVEL)) and not set(data) & ours


def map_rewards_toml(data: dict[str, Any], *, source: str = "rewards.toml") -> RewardsToml:
    unknown = sorted(set(data) - set(TOP_LEVEL) - {OVERLAY})
    if unknown:
        raise _error(source, unknown[0], f"not a field of cosmos-rl's rewards.toml "
                                f"({', '.join(TOP_LEVEL)}; our own sections go in [{OVERLAY}])")
    out = RewardsToml(data={
        "server": {"max_body_bytes": 1 << 30},  # batches of latents or videos are large
        "media": {"max_request_pixels": 1 << 31},
        "backends": {}, "judges": {}, "flow_factory": {"enabled": False},
    })
    _server(data, out)
    entries = data.get("reward_args", [{}])  # cosmos-rl's default: one cosmos_reason1 entry
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise _error(source, "reward_args", "must be an array of tables ([[reward_args]])")
    enabled: list[str] = []
    for i, entry in enumerate(entries):
        name = _reward(source, i, entry, out)
        if name is not None:
            if name in enabled:
                raise _error(source, f"reward_args[{i}].reward_type",
                                        f"{name!r} is enabled twice; keep one entry per reward")
            enabled.append(name)
    if not enabled:
        raise _error(source, "reward_args", "no entry is enabled: nothing to serve")
    _decoder(source, data, enabled, out)
    out.lines.append("a pull not ready yet -> 425 (cosmos_rl.pending_status: what cosmos-rl's trainer polls "
                     "through; the service answers 400, which that trainer gives up on)")
    overlay = data.get(OVERLAY)
    if overlay is not None:
        if not isinstance(overlay, dict):
            raise _error(source, OVERLAY, "must be a table of judge-gateway config sections")
        _merge(out.data, overlay)
        out.lines.append(f"[{OVERLAY}]: merged over the mapping ({', '.join(sorted(overlay)) or 'empty'})")
    return out


def _error(source: str, where: str, why: str) -> RewardsTomlError:
    return RewardsTomlError(f"{source}: {where}: {why}")


def _server(data: dict[str, Any], out: RewardsToml) -> None:
    host = str(data.get("host", "localhost"))
    port = int(data.get("port", 8080))
    out.data["server"].update({"host": host, "port": port})
    out.lines.append(f"host = {host!r} -> server.host (cosmos-rl's service binds 0.0.0.0 whatever it says; here "
                     "a host beyond loopback needs API keys or server.allow_networks)")
    out.lines.append(f"port = {port} -> server.port (cosmos-rl's service takes the next free port when it is busy; "
                     "here serve fails instead, as the trainer's URL names this one)")
    redis_host = str(data.get("redis_host", "localhost"))
    redis_port = int(data.get("redis_port", 6379))
    if redis_port <= 0:
        out.lines.append(f"redis_port = {redis_port} -> store.kind = 'memory' (cosmos-rl's service keeps scores in "
                         "memory without a Redis port, too)")
        return
    out.data["store"] = {"kind": "redis", "url": f"redis://{redis_host}:{redis_port}/0", "url_env": None}
    out.redis = (redis_host, redis_port)
    out.lines.append(f"redis_host = {redis_host!r}, redis_port = {redis_port} -> store.kind = 'redis', "
                     f"url = redis://{redis_host}:{redis_port}/0 (started here when it is local and not "
                     "running, as cosmos-rl's reward service starts its own; a remote one must answer)")


def _reward(source: str, i: int, entry: dict[str, Any], out: RewardsToml) -> str | None:
    where = f"reward_args[{i}]"
    unknown = sorted(set(entry) - set(REWARD_ARGS_DEFAULTS))
    if unknown:
        raise _error(source, f"{where}.{unknown[0]}",
                                f"not a field of reward_args ({', '.join(REWARD_ARGS_DEFAULTS)})")
    args = {**REWARD_ARGS_DEFAULTS, **entry}
    name = str(args["reward_type"])
    if name not in JUDGE_OF:
        raise _error(source, f"{where}.reward_type",
                                f"{name!r} is not a reward cosmos-rl's reward service serves ({', '.join(JUDGE_OF)})")
    where = f"reward_args[{i}] ({name})"
    if not isinstance(args["enable"], bool):
        raise _error(source, f"{where}.enable", f"must be true or false, got {args['enable']!r}")
    if not args["enable"]:
        out.lines.append(f"{where}: enable = false -> not configured (its enqueues get 400 'not configured')")
        return None
    judge = JUDGE_OF[name]
    given = set(entry)
    if name in ("cosmos_reason1", "unified_reward"):
        _vlm(source, where, name, args, given, out)
    else:
        _head(source, where, name, judge, args, given, out)
    for key in ("setup_script", "work_dir", "tmp_dir"):
        if key in given:
            out.lines.append(f"{where}.{key} = {args[key]!r} -> not used (cosmos-rl's environment set-up "
                             "and scratch folders; judge-gateway's are scripts/setup_*.sh and its run folders)")
    return name


def _vlm(source: str, where: str, name: str, args: dict[str, Any], given: set[str], out: RewardsToml) -> None:
    url = str(args["endpoint_url"]) or f"http://127.0.0.1:{VLM_PORTS[name]}/v1"
    if not url.startswith(("http://", "https://")):
        raise _error(source, f"{where}.endpoint_url",
                                f"{args['endpoint_url']!r} is not an http(s) URL of an OpenAI-compatible server")
    url = url.rstrip("/")
    if name == "cosmos_reason1":
        model = str(args["model_path"])
        backend = {"model": model, "base_urls": [url], "timeout_s": 120, "max_concurrency": 32}
        out.data["judges"]["cosmos_reason1"] = {
            "kind": "yes_no", "backend": "cosmos_reason1", "template": "cosmos_reason1@2", "deadline_s": 120,
            "default": False, "options": {"top_logprobs": 20, "min_answer_mass": 0.5, "counting": "exact"},
            "video": {"max_frames": 160, "total_pixels": 14450688, "even_frames": True}}
        out.lines.append(f"{where}.model_path = {model!r} -> backends.cosmos_reason1.model, served by vLLM at {url} "
                         "(scripts/start_vllm.sh start --preset cosmos_reason1); the request is cosmos-rl's "
                         "(cosmos_reason1@2), its no_score from the exact Yes/No logprobs")
    else:
        # cosmos-rl's service sends model="UnifiedReward-7b-v1.5" to its endpoint whatever model_path says
        backend = {"model": "UnifiedReward-7b-v1.5", "base_urls": [url], "timeout_s": 180, "max_concurrency": 32}
        out.data["judges"]["unified_reward"] = {
            "kind": "final_score", "backend": "unified_reward", "template": "unified_reward@3", "deadline_s": 180,
            "default": False, "image": {"data_url_mime": "image"},
            "options": {"occurrence": "first", "peer_regex": UNIFIED_REWARD_PATTERN}}
        out.lines.append(f"{where}.endpoint_url = {url!r} -> backends.unified_reward.base_urls, model "
                         "'UnifiedReward-7b-v1.5' (what cosmos-rl's service sends); its question and parse as "
                         "cosmos-rl's")
    if args["endpoint_api_key"]:
        env = f"JG_{name.upper()}_API_KEY"
        source = "the environment's value, which wins" if os.environ.get(env) else "set from the file"
        os.environ.setdefault(env, str(args["endpoint_api_key"]))
        backend["api_key_env"] = env
        out.lines.append(f"{where}.endpoint_api_key -> backends.{name}.api_key_env = {env} ({source})")
    _launch(where, name, url, args, given, backend, out)
    out.data["backends"][name] = backend
    for key in ("venv_python", "dtype", "device", "download_path"):
        if key in given:
            out.lines.append(f"{where}.{key} = {args[key]!r} -> not used (vLLM serves this model: its dtype and "
                             "devices are scripts/start_vllm.sh's)")


def _launch(where: str, name: str, url: str, args: dict[str, Any], given: set[str], backend: dict[str, Any],
            out: RewardsToml) -> None:
    """A launch table for a server on this machine: `judge-gateway up` starts it, `prepare` builds
    its venv, fetches its model and probes it. A URL on another host is someone else's server."""
    parsed = urlsplit(url)
    if parsed.hostname not in ("127.0.0.1", "localhost", "::1", "0.0.0.0") or parsed.port is None:
        out.lines.append(f"{where}: {url} is another host's server -> no launch table (`judge-gateway up` "
                         "starts no server for it)")
        return
    launch = dict(VLM_LAUNCH[name])
    weights = PRESET_MODELS[name]
    if name == "cosmos_reason1" and args["model_path"] != weights:
        launch["model"] = weights = str(args["model_path"])
    elif name == "unified_reward" and "model_path" in given:
        launch["model"] = weights = str(args["model_path"])
    backend["launch"] = launch
    served = f"as {backend['model']!r}" if backend["model"] != weights else "under its own name"
    out.lines.append(f"{where} -> backends.{name}.launch: `judge-gateway up` serves {weights} ({served}) at {url} "
                     f"(one GPU, max_model_len {launch['max_model_len']}); `prepare` fetches it"
                     + (" (model_path: the weights it serves; cosmos-rl's service ignores it)"
                        if name == "unified_reward" and "model_path" in given else "")
                     + "; a server of your own there: `serve`, not `up`")


def _head(source: str, where: str, name: str, judge: str, args: dict[str, Any], given: set[str],
          out: RewardsToml) -> None:
    options: dict[str, Any] = {"python": VENVS[judge], "device": str(args["device"])}
    download = str(args["download_path"])
    note = out.lines.append
    if "venv_python" in given:
        note(f"{where}.venv_python = {args['venv_python']!r} -> not used: the worker runs judge-gateway's own "
             f"code under {VENVS[judge]} (scripts/setup_*.sh builds it; override in [{OVERLAY}])")
    if name in USES_DTYPE:
        dtype = DTYPES.get(str(args["dtype"]))
        if dtype is None:
            raise _error(source, f"{where}.dtype",
                                    f"{args['dtype']!r} is not one of {', '.join(DTYPES)}")
        options["dtype"] = dtype
        note(f"{where}.dtype = {args['dtype']!r} -> judges.{judge}.options.dtype = {dtype!r}")
    elif name in FIXED_DTYPE:
        options["dtype"] = FIXED_DTYPE[name]
        said = f"{where}.dtype = {args['dtype']!r} -> not used: " if "dtype" in given else f"{where}: "
        note(f"{said}judges.{judge}.options.dtype = {FIXED_DTYPE[name]!r} (cosmos-rl's {name} never passes its "
             "dtype on; the hpsv3 package's config runs bfloat16)")
    elif "dtype" in given:
        note(f"{where}.dtype = {args['dtype']!r} -> not used (cosmos-rl's {name} ignores it too)")
    note(f"{where}.device = {args['device']!r} -> judges.{judge}.options.device")
    model_path = str(args["model_path"]) if "model_path" in given else ""
    if name == "dance_grpo":
        options["checkpoint"] = str(args["model_path"])
        note(f"{where}.model_path = {args['model_path']!r} -> judges.videoalign.options.checkpoint")
        base = os.path.join(download, "Qwen2-VL-2B-Instruct")
        if os.path.isdir(base):
            options["base_model"] = base
            note(f"{where}.download_path -> judges.videoalign.options.base_model = {base!r} "
                 "(cosmos-rl's service links it as ./Qwen2-VL-2B-Instruct)")
        elif "download_path" in given:
            note(f"{where}.download_path = {download!r} has no Qwen2-VL-2B-Instruct: the base model is the one "
                 "the checkpoint's model_config.json names")
    elif name == "hpsv2":
        ckpt = os.path.join(download, "hpsv2", "ckpts", "HPS_v2.1_compressed.pt")
        options |= {"model": "ViT-H-14", "checkpoint": ckpt if os.path.isfile(ckpt) else "xswu/HPSv2/HPS_v2.1_compressed.pt"}
        note(f"{where}.download_path -> judges.hpsv2.options.checkpoint = {options['checkpoint']!r} "
             f"({'its' if os.path.isfile(ckpt) else 'no'} hpsv2/ckpts/HPS_v2.1_compressed.pt there"
             f"{'' if os.path.isfile(ckpt) else ': the hub copy'})")
    elif name == "hpsv3":
        ckpt = os.path.join(download, "hpsv3", "HPSv3.safetensors")
        options["checkpoint"] = ckpt if os.path.isfile(ckpt) else "MizzenAI/HPSv3/HPSv3.safetensors"
        note(f"{where}.download_path -> judges.hpsv3.options.checkpoint = {options['checkpoint']!r}")
    elif name == "pickscore":
        if model_path:  # cosmos-rl's service ignores it and loads yuvalkirstain/PickScore_v1
            options |= {"model": model_path, "processor": model_path}
            note(f"{where}.model_path = {model_path!r} -> judges.pickscore.options.model and processor (cosmos-rl's "
                 "service ignores it: an empty one keeps its hub ids)")
    elif name == "gen_eval":
        ckpt = os.path.join(download, "reward_ckpts", GENEVAL_CKPT)
        if os.path.isfile(ckpt):
            options["detector_checkpoint"] = ckpt
        else:
            options["detector_checkpoint"] = ("https://download.openmmlab.com/mmdetection/v3.0/mask2former/"
                                              "mask2former_swin-s-p4-w7-224_8xb2-lsj-50e_coco/mask2former_swin-s-p4"
                                              "-w7-224_8xb2-lsj-50e_coco_20220504_001756-c9d0c4f2.pth")
        options |= {"clip_model": "ViT-L-14", "clip_pretrained": "openai"}
        note(f"{where}.download_path -> judges.gen_eval.options.detector_checkpoint = "
             f"{options['detector_checkpoint']!r} (the detector config is mmdet's shipped Mask2Former Swin-S; "
             "classes are COCO's, as cosmos-rl's object_names.txt)")
    elif name == "ocr":
        note(f"{where}: the request's ocr_use_gpu picks a GPU OCR judge when cosmos_rl.rewards.ocr.gpu_judge "
             "names one; otherwise it is reported (envelope `notes`, /metrics)")
    if model_path and name not in ("dance_grpo", "pickscore"):
        note(f"{where}.model_path = {model_path!r} -> not used (cosmos-rl's {name} ignores it too)")
    if "download_path" in given and name not in ("dance_grpo", "hpsv2", "hpsv3", "gen_eval"):
        note(f"{where}.download_path = {download!r} -> not used (cosmos-rl's {name} ignores it too)")
    for key in ("endpoint_url", "endpoint_api_key"):
        if key in given:
            note(f"{where}.{key} -> not used (a local model)")
    out.data["judges"][judge] = {"kind": judge, "default": False, "options": options}  # head judges are named by kind


def _decoder(source: str, data: dict[str, Any], enabled: list[str], out: RewardsToml) -> None:
    args = {**DECODE_ARGS_DEFAULTS, **(data.get("decode_args") or {})}
    unknown = sorted(set(data.get("decode_args") or {}) - set(DECODE_ARGS_DEFAULTS))
    if unknown:
        raise _error(source, f"decode_args.{unknown[0]}", f"not a field of decode_args "
                                f"({', '.join(DECODE_ARGS_DEFAULTS)})")
    video = [n for n in enabled if n in VIDEO_REWARDS]
    if data.get("no_latent_decoder") or not video:
        why = "no_latent_decoder = true" if data.get("no_latent_decoder") else "no enabled reward needs latents"
        out.lines.append(f"decode_args -> no latent decoder ({why}); latent enqueues get 400")
        return
    latents: dict[str, Any] = {"python": ".venv-latents/bin/python", "device": str(args["device"]),
                               "dtype": str(args["dtype"]), "wan2_1": _vae(str(args["model_path"]), "2.1")}
    if latents["dtype"] not in DTYPES:
        raise _error(source, "decode_args.dtype", f"{args['dtype']!r} is not one of {', '.join(DTYPES)}")
    if args["load_mean_std"]:
        latents["wan2_1"]["load_mean_std"] = True  # its statistics files come from [judge_gateway]
    if args["wan2pt2_model_path"]:
        latents["wan2_2"] = _vae(str(args["wan2pt2_model_path"]), "2.2")
    out.data["cosmos_rl"] = {"latents": latents}
    out.lines.append(f"decode_args.model_path = {args['model_path']!r} -> cosmos_rl.latents.wan2_1 = "
                     f"{latents['wan2_1']['checkpoint']!r} (diffusers' AutoencoderKLWan; cosmos-rl's .pth is the "
                     f"same VAE), decoded under .venv-latents ({', '.join(video)} take videos)")
    out.lines.append(f"decode_args.dtype / device = {args['dtype']!r} / {args['device']!r} -> cosmos_rl.latents")
    out.lines.append("decode_args.chunk_duration / temporal_window / wan2pt2_credential_path -> not used (the "
                     "encoder's and s3 settings; decoding needs neither)")


def _vae(path: str, version: str) -> dict[str, Any]:
    """A diffusers VAE folder as given; cosmos-rl's single-file .pth (or its URL) -> the same VAE's
    diffusers release."""
    if os.path.isdir(path):
        return {"checkpoint": path}
    hub = "Wan-AI/Wan2.1-T2V-1.3B-Diffusers" if version == "2.1" else "Wan-AI/Wan2.2-TI2V-5B-Diffusers"
    return {"checkpoint": hub, "subfolder": "vae"}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> None:
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
