"""cosmos-rl's real trainer-side reward client against a reward service, as a script.

Runs under .venv-cosmosrl (scripts/setup_cosmos_rl_client.sh), never in the gateway's venv:
reads a JSON spec on stdin, enqueues its payloads through
`cosmos_rl.reward.remote_calculator.RemoteRewardCalculator.compute_rewards`, pulls through
`get_results` (which calls `fetch_reward`), and writes what the trainer got as JSON to the
spec's `out` path (cosmos-rl logs to stdout).

Two shims, nothing else:
- Import: cosmos_rl's package `__init__` files import the whole trainer (vLLM, diffusers, CUDA
  kernels). Four packages are loaded bare (their `__init__` not run): `cosmos_rl`,
  `cosmos_rl.dispatcher.data`, `cosmos_rl.dispatcher.data.packer` and `cosmos_rl.dispatcher.algo`;
  every module remote_calculator.py imports is the real one. `packer.BaseDataPacker` is a
  placeholder class: only `setup()`'s annotations name it.
- Setup: `setup()` needs a full trainer Config, an RL algorithm and the Wan VAE (videos only), so
  the script sets what compute_rewards / fetch_reward / get_results read instead: `train_config`
  and `val_config` (the real `RemoteRewardConfig` with real `RewardFunctionConfig`s),
  `enqueue_url`, `fetch_url`, `token`, the five `uuid2*` dicts, and
  `minimum_trainable_completions` (1; get_results only checks it is >= 1 unless a payload sets
  `completion_trainable`, which these do not, so `rl_algo` is never used).

Spec: {"out", "enqueue_url", "fetch_url", "token", "step", "remote_reward": {RemoteRewardConfig fields},
       "payloads": [{"prompt": str, "images_npy": path to uint8 [n, H, W, 3]}],
       "wait_until_ready": bool (default false)}
Output: {"uuid", "is_validation", "step", "payloads": [{"prompt_idx", "rewards", "advantages"}],
         "pending_statuses": [status codes the waiting polls saw before a 200],
         "fetch_statuses": [status code of every pull the trainer itself made, in order],
         "fetch_s": seconds get_results took}

get_results is called as the trainer's dispatcher calls it after each rollout step: once, with
the uuid at the head of its queue; whatever fetch_reward raises inside it is the trainer's own
behaviour (cosmos-rl 0.4.7 stops a fetch at once on a 4xx other than 408/425/429, and its
get_results then fails on the empty batch). With `wait_until_ready`, the script first polls
the pull URL as cosmos-rl's example clients do (any non-200: wait, poll again), then lets
the trainer fetch.
"""

from __future__ import annotations

import importlib.machinery
import json
import sys
import time
from queue import Queue

BARE_PACKAGES = {"cosmos_rl", "cosmos_rl.dispatcher.data", "cosmos_rl.dispatcher.data.packer",
                 "cosmos_rl.dispatcher.algo"}


class _BarePackages:
    """A meta path finder: the packages above as namespaces over their real directories."""

    def find_spec(self, name, path=None, target=None):
        if name not in BARE_PACKAGES:
            return None
        real = importlib.machinery.PathFinder.find_spec(name, path)
        if real is None:
            return None
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = real.submodule_search_locations
        return spec


def load_calculator():
    sys.meta_path.insert(0, _BarePackages())
    from cosmos_rl.dispatcher.data import packer

    packer.BaseDataPacker = type("BaseDataPacker", (), {})  # only in setup()'s annotations
    from cosmos_rl.dispatcher.data.schema import RLPayload
    from cosmos_rl.policy.config import RemoteRewardConfig
    from cosmos_rl.reward.remote_calculator import RemoteRewardCalculator

    return RemoteRewardCalculator, RemoteRewardConfig, RLPayload


def main() -> None:
    import numpy as np
    import torch

    spec = json.load(sys.stdin)
    calculator_cls, config_cls, payload_cls = load_calculator()
    calc = calculator_cls()
    calc.train_config = calc.val_config = config_cls.model_validate(spec["remote_reward"])
    calc.enqueue_url, calc.fetch_url, calc.token = spec["enqueue_url"], spec["fetch_url"], spec["token"]
    calc.uuid2payload, calc.uuid2replica, calc.uuid2stage = {}, {}, {}
    calc.uuid2step, calc.uuid2completions_per_payload = {}, {}
    calc.minimum_trainable_completions = 1

    payloads = []
    for i, p in enumerate(spec["payloads"]):
        images = np.load(p["images_npy"])  # uint8 [n, H, W, 3]
        # the trainer's image completions: float [n, 3, H, W] in [0, 1] (x / 255 comes back exactly)
        completions = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0
        payloads.append(payload_cls(prompt={"prompt": p["prompt"]}, prompt_idx=i, completions=completions,
                                    extra_info={"modality": "image"}))
    uuid = calc.compute_rewards(payloads, is_validation=False, step=spec["step"])
    pending = _wait_until_ready(spec, uuid) if spec.get("wait_until_ready") else []
    fetched = _record_pulls(spec["fetch_url"])
    queue: Queue[str] = Queue()
    queue.put(uuid)
    started = time.monotonic()
    results, is_validation, step = calc.get_results(queue)
    with open(spec["out"], "w") as out:
        json.dump({"uuid": uuid, "is_validation": is_validation, "step": step, "pending_statuses": pending,
                   "fetch_statuses": fetched, "fetch_s": round(time.monotonic() - started, 2),
                   "payloads": [{"prompt_idx": r.prompt_idx, "rewards": r.rewards, "advantages": r.advantages}
                                for r in results]}, out)


def _record_pulls(fetch_url: str) -> list[int]:
    """The status of every POST to the pull URL from here on (the trainer's own polls), in order:
    requests.post is wrapped, not changed (fetch_reward builds its partial(requests.post) per pull)."""
    import requests

    seen: list[int] = []
    post = requests.post

    def recording(url, *args, **kwargs):
        response = post(url, *args, **kwargs)
        if url == fetch_url:
            seen.append(response.status_code)
        return response

    requests.post = recording
    return seen


def _wait_until_ready(spec: dict, uuid: str, timeout_s: float = 300.0) -> list[int]:
    """cosmos-rl's example clients' loop: pull each reward until a 200, any other status means
    not yet (reward_service/cosmos_rl_reward/example/image_client.py)."""

    import requests

    seen: list[int] = []
    deadline = time.monotonic() + timeout_s
    for fn in spec["remote_reward"]["reward_fns"]:
        while True:
            r = requests.post(spec["fetch_url"], data={"uuid": uuid, "type": fn["name"]},
                              headers={"Authorization": f"Bearer {spec['token']}"}, timeout=10)
            if r.status_code == 200:
                break
            seen.append(r.status_code)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{fn['name']} of {uuid} not ready after {timeout_s}s: {r.text}")
            time.sleep(0.2)
    return seen


if __name__ == "__main__":
    main()
