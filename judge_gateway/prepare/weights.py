"""The model weights a judge names, and fetching them ahead of time.

Each head kind's options name weights in one of three forms, read the way its loader reads them:
`file` (a local file, or `repo_id/filename` on the Hugging Face hub), `repo` (a local folder, or
a hub repo id) and `path` (local only). An http(s) URL (OpenMMLab's zoo) is a `url`: fetched
into torch hub's checkpoint folder, where the loader (mmengine's load_from_http) looks for it. A
value the kind's library resolves by itself (an open_clip pretrained tag) is listed as `library`:
the load check fetches it, through that library. Downloads go through huggingface_hub (resumable,
with its progress bars) into `--download-dir` or the hub cache; offline, only the caches are read,
and a status says present or missing, never fetched. A gated hub model (the Cosmos-Reason1
reward model) that the token cannot read is named with how to get access.
"""

from __future__ import annotations

import os
import shutil
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..config import BackendConfig, GatewayConfig, JudgeConfig

Form = Literal["file", "repo", "path", "url", "library"]
State = Literal["local", "cached", "downloaded", "library", "missing"]

# What a kind's default base model is when its options leave it to the package's own config.
HPSV3_DEFAULT_BASE = "Qwen/Qwen2-VL-7B-Instruct"


@dataclass(frozen=True)
class WeightRef:
    option: str  # where the config names it, e.g. "options.checkpoint"
    ref: str
    form: Form
    subfolder: str | None = None


@dataclass
class WeightStatus:
    ref: WeightRef
    ok: bool
    detail: str  # "local", "cached", "downloaded 1.2 GB in 40 s", or why it is missing
    seconds: float = 0.0
    state: State = "missing"  # what the table shows of a weight that is there


def _looks_local(ref: str) -> bool:
    return ref.startswith((".", "/", "~")) or Path(ref).expanduser().exists()


# A rule reads one option: (its form, its value), or no value when the option names no weight there.
Rule = Callable[[Any, Any], tuple[Form, Any]]


def _as(form: Form) -> Rule:
    return lambda o, v: (form, v)


def _transformers(form: Form) -> Rule:
    # open_clip's `model` is an architecture name, not a weight.
    return lambda o, v: (form, v if o.library == "transformers" else None)


def _tag_or_path(o: Any, v: Any) -> tuple[Form, Any]:
    return ("path" if v and _looks_local(v) else "library"), v


def _url_or_file(o: Any, v: Any) -> tuple[Form, Any]:
    return ("url" if v.startswith(("http://", "https://")) else "file"), v


def _hpsv3_base(o: Any, v: Any) -> tuple[Form, Any]:
    return "repo", v or (None if o.config else HPSV3_DEFAULT_BASE)


# Per head kind, the options that name weights, read as its loader reads them.
WEIGHT_OPTIONS: dict[str, tuple[tuple[str, Rule], ...]] = {
    "clip": (("model", _transformers("repo")), ("processor", _transformers("repo")), ("pretrained", _tag_or_path),
             ("model_config_file", _as("path"))),
    "pickscore": (("model", _as("repo")), ("processor", _as("repo"))),
    "hpsv2": (("checkpoint", _as("file")), ("model_config_file", _as("path"))),
    "hpsv3": (("checkpoint", _as("file")), ("base_model", _hpsv3_base), ("config", _as("path"))),
    "gen_eval": (("detector_checkpoint", _url_or_file), ("clip_pretrained", _tag_or_path),
                 ("clip_model_config_file", _as("path"))),
    "videoalign": (("checkpoint", _as("repo")), ("base_model", _as("repo"))),
    "image_reward": (("checkpoint", _as("file")), ("med_config", _as("file")), ("tokenizer", _as("repo"))),
    "ocr": (),  # RapidOCR's models ship in its wheel
    # Classes you bring load what their own params name: nothing prepare can know to fetch.
    "custom": (), "flow_factory_model": (), "cosmos_rl_handler": (),
}


def judge_weights(cfg: JudgeConfig) -> list[WeightRef]:
    """The weights a head judge's options name (VLM judges: their backend's, see backend_weights)."""
    refs = []
    for option, rule in WEIGHT_OPTIONS.get(cfg.kind, ()):
        form, value = rule(cfg.options, getattr(cfg.options, option))
        if value:
            local = form not in ("library", "url") and value.startswith((".", "/", "~"))
            refs.append(WeightRef(f"options.{option}", value, "path" if local else form))
    return refs


def backend_weights(backend: BackendConfig, preset_model: str | None) -> list[WeightRef]:
    """The model a launched backend serves (launch.model, else its preset's)."""
    launch = backend.launch
    model = (launch.model if launch else None) or preset_model
    if not model:
        return []
    return [WeightRef("launch.model" if launch and launch.model else "launch.preset", model,
                      "path" if _looks_local(model) else "repo")]


def latent_weights(cfg: GatewayConfig) -> list[WeightRef]:
    latents = cfg.cosmos_rl.latents
    if latents is None:
        return []
    refs = []
    for name in ("wan2_1", "wan2_2"):
        vae = getattr(latents, name, None)
        if vae is not None:
            ref = vae.checkpoint
            refs.append(WeightRef(f"cosmos_rl.latents.{name}.checkpoint", ref,
                                  "path" if _looks_local(ref) else "repo", getattr(vae, "subfolder", None)))
    return refs


def _size(paths: list[Path]) -> str:
    total = sum(p.stat().st_size for p in paths if p.is_file())
    return f"{total / 1e9:.1f} GB" if total >= 1e8 else f"{total / 1e6:.1f} MB"


def torch_hub_checkpoint(url: str) -> Path:
    """Where torch.hub (and mmengine, its copy) keeps a URL's checkpoint: $TORCH_HOME, else
    $XDG_CACHE_HOME/torch, else ~/.cache/torch; then hub/checkpoints/<file name>."""
    home = os.environ.get("TORCH_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                        os.path.expanduser("~/.cache"), "torch")
    return Path(home) / "hub" / "checkpoints" / url.split("?")[0].rstrip("/").rsplit("/", 1)[-1]


def _url(ref: WeightRef, offline: bool, started: float) -> WeightStatus:
    target = torch_hub_checkpoint(ref.ref)
    if target.is_file():
        return WeightStatus(ref, True, f"cached ({target})", state="cached")
    if offline:
        return WeightStatus(ref, False, f"{ref.option}: {ref.ref} is not in torch hub's cache ({target}; "
                                        "--offline: nothing fetched)")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    try:
        with urllib.request.urlopen(ref.ref, timeout=60) as reply, partial.open("wb") as out:  # noqa: S310 - a configured URL
            shutil.copyfileobj(reply, out, 1 << 20)
        partial.replace(target)
    except (OSError, ValueError) as exc:
        partial.unlink(missing_ok=True)
        return WeightStatus(ref, False, f"{ref.option}: cannot fetch {ref.ref}: {type(exc).__name__}: {exc}",
                            time.monotonic() - started)
    seconds = time.monotonic() - started
    return WeightStatus(ref, True, f"downloaded {_size([target])} in {seconds:.0f} s", seconds, state="downloaded")


def _gated(ref: WeightRef, repo: str, exc: BaseException) -> str | None:
    """The way to get access, when the hub refused a gated (or private) repo."""
    try:
        from huggingface_hub import get_token
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError
    except ImportError:  # pragma: no cover - every version we accept has both
        return None
    if not isinstance(exc, (GatedRepoError, RepositoryNotFoundError)):
        return None
    token = "a token is set (HF_TOKEN or `hf auth login`) but its account has no access" if get_token() else \
        "no token is set"
    what = "is gated" if isinstance(exc, GatedRepoError) else "is private, gated or does not exist"
    return (f"{ref.option}: {repo} {what} on the Hugging Face hub and {token}: accept its terms on "
            f"https://huggingface.co/{repo} with your account, create a read token "
            "(https://huggingface.co/settings/tokens), then `export HF_TOKEN=hf_...` (or `hf auth login`) "
            "and run prepare again")


def check_weight(ref: WeightRef, *, offline: bool, download_dir: Path | None) -> WeightStatus:
    """Present locally or in a cache; else fetched (online) or reported missing (offline)."""
    started = time.monotonic()
    if ref.form == "library":
        how = "its own cache; the load check shows whether it is there" if offline else "the load check fetches it"
        return WeightStatus(ref, True, f"library's own ({how})", state="library")
    if ref.form == "url":
        return _url(ref, offline, started)
    path = Path(ref.ref).expanduser()
    if ref.form == "path" or path.exists():
        ok = path.is_dir() if ref.form == "repo" else path.exists()
        return WeightStatus(ref, ok, "local" if ok else f"{ref.option}: {ref.ref} not found",
                            state="local" if ok else "missing")
    parts = ref.ref.split("/")
    if (ref.form == "file" and len(parts) < 3) or (ref.form == "repo" and len(parts) > 2):
        want = "repo_id/filename" if ref.form == "file" else "a hub repo id (org/name, or a legacy name)"
        return WeightStatus(ref, False, f"{ref.option}: {ref.ref!r} is neither a local path nor {want}")
    try:
        import huggingface_hub as hub
        from huggingface_hub.utils import HfHubHTTPError  # noqa: F401  (present in every version we accept)
    except ImportError:
        return WeightStatus(ref, False, "huggingface_hub is not installed here (pip install huggingface_hub)")
    cache = str(download_dir) if download_dir else None
    repo, filename = "/".join(parts[:2]), "/".join(parts[2:])
    try:
        if ref.form == "file":
            got = hub.hf_hub_download(repo, filename, cache_dir=cache, local_files_only=True)
            return WeightStatus(ref, True, "cached", time.monotonic() - started, "cached") if got else _missing(ref)
        got = hub.snapshot_download(ref.ref, cache_dir=cache, local_files_only=True)
        return WeightStatus(ref, True, "cached", time.monotonic() - started, "cached")
    except Exception:  # noqa: BLE001 - not in the cache, in any of the ways the hub says it
        if offline:
            return _missing(ref)
    try:
        if ref.form == "file":
            path = Path(hub.hf_hub_download(repo, filename, cache_dir=cache))
            files = [path]
        else:
            folder = Path(hub.snapshot_download(ref.ref, cache_dir=cache))
            files = [p for p in folder.rglob("*") if p.is_file()]
    except Exception as exc:  # noqa: BLE001 - unknown repo, gated model, no network: the reason is shown
        gated = _gated(ref, repo if ref.form == "file" else ref.ref, exc)
        return WeightStatus(ref, False, gated or f"{ref.option}: cannot fetch {ref.ref!r}: {type(exc).__name__}: "
                            f"{exc}", time.monotonic() - started)
    seconds = time.monotonic() - started
    return WeightStatus(ref, True, f"downloaded {_size(files)} in {seconds:.0f} s", seconds, state="downloaded")


def _missing(ref: WeightRef) -> WeightStatus:
    return WeightStatus(ref, False, f"{ref.option}: {ref.ref} is not in the hub cache (--offline: nothing fetched)")
