"""Loading a config: read the TOML, validate each section (models.py), then check what spans
sections (backends, templates, profiles, protocols, Ray) and report every problem at once, each
naming its key."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..exceptions import ConfigurationError
from .cosmos_rl_toml import RewardsToml, RewardsTomlError, is_cosmos_rl_rewards, map_rewards_toml
from .models import GatewayConfig, JudgeConfig
from .protocols import check_protocols
from .ray import check_ray
from .residency import check_residency
from .watch import check_watch
from .comparative_options import ComparativeOptions
from .vlm_options import AnswerProbabilityOptions, AspectWeightOptions, CriticOptions, VLMOptions

# The configs shipped inside the package (the repository's configs/ folder), loadable by name.
SHIPPED_CONFIGS_DIR = Path(__file__).resolve().parent.parent / "shipped_configs"
DEFAULT_CONFIG_PATH = SHIPPED_CONFIGS_DIR / "default.toml"


class ConfigError(ConfigurationError):
    """A configuration that cannot be used; the message names the key."""


def _loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def _format_validation(err: ValidationError, prefix: tuple[Any, ...] = ()) -> str:
    lines = []
    for e in err.errors():
        lines.append(f"{_loc(prefix + tuple(e['loc']))}: {e['msg']}")
    return "; ".join(lines)


def validate_config(data: dict[str, Any], *, source: str = "<config>") -> GatewayConfig:
    """Validate a parsed TOML document; raise ConfigError naming every offending key. Relative
    paths of your own folders ([prompts] dirs, a brought head's pythonpath) are taken from the
    folder of `source` when it is a file, else from the working directory."""
    context = {"base_dir": str(Path(source).resolve().parent) if Path(source).is_file() else None}
    try:
        cfg = GatewayConfig.model_validate(data, context=context)
    except ValidationError as err:
        # A judge's kind and options are checked inside its section. When only judge sections
        # failed, the checks across sections still run over the other judges, so that every
        # problem is reported at once.
        section = _format_validation(err)
        locs = [e["loc"] for e in err.errors()]
        if not all(len(loc) > 1 and loc[0] == "judges" for loc in locs):
            raise ConfigError(f"{source}: {section}") from None
        broken = {loc[1] for loc in locs}
        rest = {**data, "judges": {n: j for n, j in data["judges"].items() if n not in broken}}
        try:
            cfg = GatewayConfig.model_validate(rest, context=context)
        except ValidationError:  # no section spans judges; kept for safety
            raise ConfigError(f"{source}: {section}") from None
        problems = [section] + _check_across(cfg, list(data["judges"]), source)
        raise ConfigError(f"{source}: " + "; ".join(problems))

    problems = _check_across(cfg, list(cfg.judges), source)
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))
    return cfg


def _check_across(cfg: GatewayConfig, configured: list[str], source: str) -> list[str]:
    """The checks across sections, over the judges in cfg. `configured` names every judge of the
    config, those whose own section failed (left out of cfg) too: nothing that names one of those
    is reported as unknown."""
    problems: list[str] = []
    broken = set(configured) - set(cfg.judges)
    for name, judge in cfg.judges.items():
        problems += _check_judge(name, judge, cfg, source, broken)
    problems += check_protocols(set(configured), cfg.cosmos_rl, cfg.flow_factory, cfg.store)
    heads = {n for n, j in cfg.judges.items() if j.kind_spec.runs_on == "head"}
    problems += check_ray(cfg.ray, heads | broken, set(configured),
                          cfg.store.kind, cfg.cosmos_rl.enabled, cfg.store.queue.enabled)
    problems += check_watch(cfg.watch, set(configured))
    problems += check_residency(cfg.judges, cfg.backends)
    host = cfg.server.host
    if not cfg.server.public_bind_ok(cfg.server.resolved_api_keys()):
        problems.append(
            f"server.host: {host!r} exposes the service beyond loopback without API keys; set "
            "server.api_keys (or the api_keys_env variable), server.allow_networks (the peers' "
            "networks), or allow_unauthenticated_public = true"
        )
    for name in cfg.eval.thresholds:
        if name not in configured:
            problems.append(f"eval.thresholds.{name}: no such judge (configured: {', '.join(configured)})")
    return problems


def _check_judge(name: str, judge: JudgeConfig, cfg: GatewayConfig, source: str,
                 broken: set[str]) -> list[str]:
    """What a judge's own section cannot check: its backend and template (a VLM kind's), and the
    options that name a template, profile or another judge (`broken`: judges whose own section
    failed, named without complaint)."""
    key = f"judges.{name}"
    spec = judge.kind_spec
    if spec.runs_on == "head":
        return [f"{key}.{field}: not used by head kind {judge.kind!r} (heads run locally)"
                for field in ("backend", "template") if getattr(judge, field) is not None]
    from ..prompts import TemplateError, load_template  # local: prompts import is not free

    problems = []
    if not judge.backend:
        problems.append(f"{key}.backend: required for kind {judge.kind!r}")
    elif judge.backend not in cfg.backends:
        known = ", ".join(cfg.backends) or "none configured"
        problems.append(f"{key}.backend: unknown backend {judge.backend!r} (known: {known})")
    if not judge.template:
        return problems + [f"{key}.template: required for kind {judge.kind!r} (pin `family@version`)"]
    try:
        template = load_template(judge.template, judge.template_dirs)
    except TemplateError as err:
        return problems + [f"{key}.template: {err}"]
    opts = judge.options
    assert isinstance(opts, VLMOptions)
    if template.kind != spec.template_kind:
        problems.append(f"{key}.template: {judge.template} is a {template.kind!r} template, "
                        f"but the judge's kind is {judge.kind!r}")
    elif isinstance(opts, AspectWeightOptions):
        names = {a.name for a in template.aspects}
        for aspect in opts.aspect_weights or {}:
            if aspect not in names:
                problems.append(f"{key}.options.aspect_weights.{aspect}: not an aspect of "
                                f"{judge.template} (aspects: {', '.join(sorted(names))})")
        problems += _check_profile(key, judge, opts, template, source)
    elif isinstance(opts, CriticOptions):
        problems += _check_critic(key, name, judge, opts, template, cfg, broken)
    elif isinstance(opts, AnswerProbabilityOptions):
        problems += _check_atoms_file(key, opts, source)
    elif isinstance(opts, ComparativeOptions):
        problems += _check_comparative(key, name, judge, opts, template, cfg)
    problems += _check_shadow(key, judge, opts, template)
    if (judge.video.codec == "jpeg_frames" and judge.backend in cfg.backends
            and not cfg.backends[judge.backend].takes_jpeg_frames()):
        problems.append(f"{key}.video.codec: jpeg_frames needs a backend that takes them: backends."
                        f"{judge.backend}.video_input is {cfg.backends[judge.backend].video_input!r} (set it to "
                        "jpeg_frames once its server runs with --trust-request-mm-kwargs, or use codec mjpeg)")
    if judge.video.codec == "jpeg_frames" and sum(slot in ("video", "condition_video")
                                                   for slot in template.media_slots) > 1:
        problems.append(f"{key}.video.codec: jpeg_frames sends one rate for all of a request's videos "
                        f"(media_io_kwargs is per modality), and {judge.template} has several video slots: use mjpeg")
    if opts.video_first_frame and "image" not in template.media_slots:
        problems.append(f"{key}.options.video_first_frame: {judge.template} has no <image> "
                        "slot for a video's first frame to fill")
    return problems


def _check_critic(key: str, name: str, judge: JudgeConfig, opts: CriticOptions, template: Any,
                  cfg: GatewayConfig, broken: set[str]) -> list[str]:
    """The reward field must be a number of the template's schema; share_video_with must name a
    judge that sees a video, and then the critic takes that judge's sampling (resolved here, once)."""
    from ..parsers.json_schema import subschema

    problems = []
    node = subschema(template.json_schema, opts.reward_field)
    types = (node or {}).get("type")
    if node is None or (types != "number" and types != "integer"):
        problems.append(f"{key}.options.reward_field: {opts.reward_field!r} is not a number field of "
                        f"{judge.template}'s json_schema")
    other = opts.share_video_with
    if other is not None and other not in broken:  # a broken judge's error is reported already
        where = f"{key}.options.share_video_with"
        if other == name or other not in cfg.judges:
            problems.append(f"{where}: {other!r} is not another configured judge")
        elif "video" in judge.model_fields_set:
            problems.append(f"{where}: set either the critic's own `video` table or share_video_with, not both")
        else:
            judge.video = cfg.judges[other].video.model_copy()
    return problems


def _check_comparative(key: str, name: str, judge: JudgeConfig, opts: ComparativeOptions, template: Any,
                       cfg: GatewayConfig) -> list[str]:
    """The reference image is not one the template shows as a source; a comparative judge compares
    a group, so a Flow-Factory profile that serves it must be groupwise (a pointwise request is a
    batch of samples of any prompts)."""
    problems = []
    shown = template.media_slots.count("condition_image")
    if opts.schedule == "reference" and opts.reference_index < shown:
        problems.append(f"{key}.options.reference_index: condition_images[{opts.reference_index}] is shown by "
                        f"{judge.template} as a source image (its first {shown}); the reference must be another one")
    if name in cfg.watch.shadow_judges:
        problems.append(f"watch.shadows: judge {name!r} compares whole groups; the watch scores a sampled share "
                        "of samples, not whole groups, so it cannot be a shadow judge")
    for profile_name, profile in cfg.flow_factory.profiles.items():
        if name in profile.judges and profile.mode != "groupwise":
            problems.append(f"flow_factory.profiles.{profile_name}.mode: judge {name!r} compares a group's samples; "
                            "a pointwise request is a batch of any prompts: set mode = \"groupwise\"")
    return problems


def _check_shadow(key: str, judge: JudgeConfig, opts: VLMOptions, template: Any) -> list[str]:
    """A shadow template must be pinned, exist, differ from the judge's, and be of its kind."""
    from ..prompts import TemplateError, load_template

    ref = opts.shadow_template
    if ref is None:
        return []
    where = f"{key}.options.shadow_template"
    try:
        shadow = load_template(ref, judge.template_dirs)
    except TemplateError as err:
        return [f"{where}: {err}"]
    if shadow.kind != template.kind:
        return [f"{where}: {ref} is a {shadow.kind!r} template, but the judge's kind is {judge.kind!r}"]
    if shadow.sha256 == template.sha256:
        return [f"{where}: {ref} is the judge's own template"]
    if isinstance(opts, AspectWeightOptions):
        names = {a.name for a in shadow.aspects}
        wanted = set(opts.aspect_weights or {})
        if wanted - names:
            return [f"{where}: {ref} lacks aspect(s) {', '.join(sorted(wanted - names))} of aspect_weights"]
    return []


def _check_atoms_file(key: str, opts: AnswerProbabilityOptions, source: str) -> list[str]:
    """The atoms file (path resolved next to the config file) must be readable GenEval 2 JSONL."""
    if opts.atoms_file is None:
        return []
    from ..atoms import AtomsFileError, load_atoms_file

    path = Path(opts.atoms_file)
    if not path.is_absolute() and Path(source).is_file():
        path = Path(source).resolve().parent / path
    try:
        load_atoms_file(path)
    except AtomsFileError as err:
        return [f"{key}.options.atoms_file: {err}"]
    opts.atoms_file = str(path)  # resolved once, here
    return []


def _check_profile(key: str, judge: JudgeConfig, opts: AspectWeightOptions, template: Any, source: str) -> list[str]:
    """Load the judge's aggregation profile (path resolved next to the config file)."""
    ref = opts.aggregation_profile
    if ref is None:
        return []
    from ..aggregation_profiles import AggregationProfileError, load_aggregation_profile

    where = f"{key}.options.aggregation_profile"
    path = Path(ref)
    if not path.is_absolute() and Path(source).is_file():
        path = Path(source).resolve().parent / path
    try:
        profile = load_aggregation_profile(path, sha256=opts.aggregation_profile_sha256)
    except AggregationProfileError as err:
        return [f"{where}: {err}"]
    if profile.kind != "rubric_aspects":
        return [f"{where}: {profile.ref} is a {profile.kind!r} profile, not rubric aspect weights"]
    made_for = (profile.created_from.get("template") or {}).get("id")
    if made_for != template.id:
        return [f"{where}: {profile.ref} was tuned for template family {made_for!r}, the judge uses {template.id!r}"]
    names = {a.name for a in template.aspects}
    unknown = set(profile.weights) - names
    if unknown:
        return [f"{where}: {profile.ref} weighs aspect(s) {', '.join(sorted(unknown))} that "
                f"{judge.template} does not have"]
    opts.aggregation_profile = str(path)  # resolved once, here
    return []


def shipped_configs() -> dict[str, Path]:
    """The configs that ship with the package, by name (`default`, `cosmos_rl`, ...)."""
    return {p.stem: p for p in sorted(SHIPPED_CONFIGS_DIR.glob("*.toml"))}


def resolve_config_path(ref: str | Path | None) -> Path:
    """The config file `ref` names: a path to a TOML file, or the name of a shipped config
    (`cosmos_rl`, `cosmos_rl.toml`), so `--config NAME` works from any directory and from a pip
    install. A file at the path wins over a shipped config of the same name; `None` is the
    embedded default."""
    if ref is None:
        return DEFAULT_CONFIG_PATH
    p = Path(ref)
    if p.exists() or len(p.parts) != 1:
        return p
    shipped = shipped_configs()
    name = p.name.removesuffix(".toml")
    if name in shipped:
        return shipped[name]
    raise ConfigError(f"cannot read config {ref}: no such file, and no shipped config of that name "
                      f"(shipped: {', '.join(shipped)}; `judge-gateway configs` lists them)")


def load_config(path: str | Path | None = None) -> GatewayConfig:
    """Load and validate a TOML config: a file path, the name of a shipped config (see
    `resolve_config_path`), or `None` for the embedded default. cosmos-rl's own rewards.toml is
    recognised and mapped (cosmos_rl_toml.py)."""
    return load_config_report(path)[0]


def load_config_report(path: str | Path | None = None) -> tuple[GatewayConfig, RewardsToml | None]:
    """load_config, and for a cosmos-rl rewards.toml what each of its fields became."""
    p = resolve_config_path(path)
    try:
        raw = p.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read config {p}: {err.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{p}: not valid TOML: {err}") from None
    if not is_cosmos_rl_rewards(data):
        return validate_config(data, source=str(p)), None
    try:
        mapped = map_rewards_toml(data, source=str(p))
    except RewardsTomlError as err:
        raise ConfigError(str(err)) from None
    return validate_config(mapped.data, source=f"{p} (cosmos-rl rewards.toml, mapped)"), mapped
