"""`judge-gateway tune rubric|weights`: score (or read the cache), cross-validate, write a profile."""

from __future__ import annotations

import datetime as _dt
import math
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from ..config import AspectWeightOptions, ChecklistOptions, GatewayConfig
from .cache import ScoreCache, judge_identity
from .collect import JudgeSpec, ScoreTable, collect_scores
from .features import Features, judge_features, rubric_features
from .fit import (
    Aggregation,
    FitResult,
    FoldResult,
    NAPolicy,
    cross_validate,
    fit_aggregation,
    policy_candidates,
    summarize,
    usable,
)
from .prefs import PreferenceData, load_preferences
from ..aggregation_profiles import write_aggregation_profile
from ..extras import install_command
from .report import cv_table, fold_record, plot_cv, weights_table


@dataclass
class ScoringOptions:
    cache: str | None = None
    cache_only: bool = False
    server: str | None = None
    api_key: str | None = None
    batch_size: int = 16
    concurrency: int = 4
    progress: bool = True


@dataclass
class TuneOutcome:
    folds: list[FoldResult]
    summary: dict[str, dict[str, float]]
    final: FitResult
    default: Aggregation
    profile_path: Path | None
    plot_path: Path | None
    features: Features


def _client_factory(cfg: GatewayConfig, opts: ScoringOptions) -> Any:
    def make() -> Any:
        from ..client import AsyncRewardClient

        if opts.server:
            return AsyncRewardClient(opts.server, api_key=opts.api_key)
        return AsyncRewardClient(config=cfg)
    return make


def score_table(data: PreferenceData, cfg: GatewayConfig, judges: list[str], opts: ScoringOptions,
                out: TextIO) -> ScoreTable:
    specs = []
    for name in judges:
        sha, model = judge_identity(cfg, name)
        specs.append(JudgeSpec(gateway_name=name, cache_name=name, template_sha256=sha, model=model))
    cache = ScoreCache(opts.cache)
    table, counts = collect_scores(data, specs, cache, client_factory=_client_factory(cfg, opts),
                                   cache_only=opts.cache_only, batch_size=opts.batch_size,
                                   concurrency=opts.concurrency, progress=opts.progress)
    print(f"scores: {counts['cached']} from the cache, {counts['scored']} scored now"
          + (f" ({counts['transient_failures']} transient failures, not cached)" if counts["transient_failures"] else ""),
          file=out)
    return table


def _json_safe(x: Any) -> Any:
    """JSON has no NaN or inf: such a figure (an accuracy over no pairs, the NLL of a policy that
    could score no pair) is written as null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def _run(features: Features, default: Aggregation, policies: list[tuple[NAPolicy, float | None]], *, k: int,
         seed: int, out: TextIO) -> tuple[list[FoldResult], dict[str, dict[str, float]], FitResult]:
    n = len(features.pairs)
    # Pairs some candidate policy can score on both sides: with none, there is nothing to fit
    # (and nothing is written); with fewer than k, no k folds.
    scorable = max((int(usable(features.pairs, p, v).sum()) for p, v in policies), default=0) if n else 0
    if scorable < k:
        why = (" (every pair has a sample without a valid score: see `excluded` above; are the judges' "
               "backends up? `judge-gateway judges` shows them)" if features.excluded or n > scorable else "")
        raise ValueError(f"only {scorable} of {n} labelled pairs have scores on both sides{why}; "
                         f"{k}-fold cross-validation needs at least {k}; nothing was written")
    folds = cross_validate(features.pairs, features.names, default, policies, k=k, seed=seed)
    summary = summarize(folds)
    final = fit_aggregation(features.pairs, features.names, policies, seed=seed)
    print(cv_table(folds, summary), file=out)
    return folds, summary, final


def _finish(kind: str, name: str, features: Features, data: PreferenceData, default: Aggregation,
            folds: list[FoldResult], summary: dict[str, dict[str, float]], final: FitResult,
            created_from: dict[str, Any], *, out_dir: str | None, plot: str | None, k: int, seed: int,
            na_value_native: float | None, out: TextIO, title: str) -> tuple[Path | None, Path | None]:
    agg = final.aggregation
    print("\nweights (fitted on all labelled pairs):", file=out)
    print(weights_table(default.weight_dict(), agg.weight_dict()), file=out)
    na = f"na_policy = {agg.na_policy}" + (f", na_value = {na_value_native:g}" if agg.na_policy == "value" else "")
    print(f"{na}; tie_threshold = {agg.tie_threshold:.4f} (reward scale); candidates (train NLL): "
          + ", ".join(f"{p} {v:.4f}" for p, v in final.candidates.items()), file=out)
    body = {
        "kind": kind,
        "created_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "weights": agg.weight_dict(),
        "na_policy": agg.na_policy,
        "na_value": na_value_native,
        "tie_threshold": agg.tie_threshold,
        "tie_threshold_scale": "reward",
        "created_from": created_from,
        "data": {"path": str(data.path), "sha256": data.sha256, "pairs": len(data.pairs),
                 "labelled": len(data.labelled), "used": len(features.pairs),
                 "excluded": dict(features.excluded)},
        "fit": {"model": "Bradley-Terry on weighted-mean score differences (ties = 1/2)", "beta": final.beta,
                "train_nll": final.nll, "policy_candidates": final.candidates},
        "default": {"weights": default.weight_dict(), "na_policy": default.na_policy},
        "cv": {"folds_k": k, "seed": seed, "summary": summary,
               "folds": [fold_record(f) for f in folds]},
    }
    body = _json_safe(body)
    profile_path = None
    if out_dir:
        profile_path = write_aggregation_profile(out_dir, name, body)
        print(f"profile: {profile_path}", file=out)
    plot_path = None
    if plot:
        plot_path = plot_cv(plot, folds, agg.weight_dict(), default.weight_dict(), title)
        print(f"plot: {plot_path}" if plot_path else f"plot: skipped (it needs matplotlib: {install_command('tune')})",
              file=out)
    return profile_path, plot_path


def tune_rubric(cfg: GatewayConfig, judge: str, data_path: str | Path, opts: ScoringOptions, *, k: int = 5,
                seed: int = 0, out_dir: str | None = None, name: str | None = None, plot: str | None = None,
                out: TextIO | None = None) -> TuneOutcome:
    """Fit a judge's aspect weights, N/A policy and tie threshold to human labels: a rubric judge's
    aspects, a multi_axis judge's axes or a checklist judge's probes (their P(good) on [0, 1])."""
    out = out or sys.stdout
    from ..prompts import load_template

    if judge not in cfg.judges:
        raise ValueError(f"unknown judge {judge!r}; configured: {', '.join(cfg.judges)}")
    jcfg = cfg.judges[judge]
    options = jcfg.options
    if not isinstance(options, AspectWeightOptions):
        raise ValueError(f"judge {judge!r} is a {jcfg.kind!r} judge; `tune rubric` needs a rubric, multi_axis "
                         "or checklist judge")
    template = load_template(jcfg.template, jcfg.template_dirs)
    scale = getattr(options, "scale", None) or template.scale
    assert scale is not None
    lo, hi = float(scale[0]), float(scale[1])
    if (getattr(options, "soft_score", None) or template.soft_score) == "score_token":
        lo = 0.0  # soft axis scores lie in (0, max], as the judge maps them (judges/multi_axis.py)
    aspects = tuple(a.name for a in template.aspects)
    weights = {a.name: a.weight for a in template.aspects} | (options.aspect_weights or {})
    na_policy: NAPolicy = options.na_policy
    na_norm = (options.na_value - lo) / (hi - lo) if options.na_value is not None else None
    if options.aggregation_profile:
        from ..aggregation_profiles import load_aggregation_profile

        prof = load_aggregation_profile(options.aggregation_profile, sha256=options.aggregation_profile_sha256)
        weights = {a: prof.weights.get(a, 0.0) for a in aspects}
        na_policy = prof.na_policy  # type: ignore[assignment]
        na_norm = (prof.na_value - lo) / (hi - lo) if prof.na_value is not None else None
        print(f"default = the configured profile {prof.ref} (sha256 {prof.sha256[:16]})", file=out)
    default = Aggregation(aspects, tuple(float(weights.get(a, 0.0)) for a in aspects), na_policy, na_norm)

    data = load_preferences(data_path, require_labels=True)
    print(f"data: {data.path} ({len(data.pairs)} pairs, sha256 {data.sha256[:16]})", file=out)
    table = score_table(data, cfg, [judge], opts, out)
    features = rubric_features(data, table, judge, aspects, (lo, hi),
                               missing_invalid=(options.missing_policy or template.missing_policy
                                                or ("skip" if isinstance(options, ChecklistOptions) else "invalid"))
                               == "invalid")
    _print_excluded(features, out, unit="pairs")
    policies = policy_candidates(features.pairs, (default.na_policy, default.na_value), (0.0, 0.5, 1.0))
    folds, summary, final = _run(features, default, policies, k=k, seed=seed, out=out)
    agg = final.aggregation
    na_native = lo + agg.na_value * (hi - lo) if agg.na_value is not None else None
    sha, model = judge_identity(cfg, judge)
    created = {"judge": judge, "template": {"id": template.id, "version": template.version, "sha256": sha},
               "model": model, "scale": [lo, hi]}
    profile_path, plot_path = _finish(
        "rubric_aspects", name or judge, features, data, default, folds, summary, final, created,
        out_dir=out_dir, plot=plot, k=k, seed=seed, na_value_native=na_native, out=out,
        title=f"tune rubric: {judge} ({template.ref}), {len(features.pairs)} pairs, {k}-fold")
    if profile_path:
        print(f'use it: [judges.{judge}] options.aggregation_profile = "{profile_path}"', file=out)
    return TuneOutcome(folds, summary, final, default, profile_path, plot_path, features)


def tune_weights(cfg: GatewayConfig, judges: list[str], data_path: str | Path, opts: ScoringOptions, *, k: int = 5,
                 seed: int = 0, out_dir: str | None = None, name: str = "judge_weights", plot: str | None = None,
                 out: TextIO | None = None) -> TuneOutcome:
    """Fit the judges' weights in the combined reward to human labels."""
    out = out or sys.stdout
    unknown = [j for j in judges if j not in cfg.judges]
    if unknown:
        raise ValueError(f"unknown judge(s) {', '.join(unknown)}; configured: {', '.join(cfg.judges)}")
    if len(judges) < 2 or len(set(judges)) != len(judges):
        raise ValueError("`tune weights` needs at least two distinct judges")
    comb = cfg.combine
    policy: NAPolicy = {"invalidate": "invalidate", "skip": "skip", "fill": "value"}[comb.on_invalid]  # type: ignore[assignment]
    fill = comb.fill_value if comb.on_invalid == "fill" else None
    if comb.policy == "sum" and comb.on_invalid == "skip":
        print("note: combine.policy = 'sum' with on_invalid = 'skip' ranks samples differently from the "
              "weighted mean fitted here whenever a judge is invalid", file=out)
    names = tuple(judges)
    default = Aggregation(names, tuple(max(cfg.judges[j].weight, 0.0) for j in judges), policy, fill)
    data = load_preferences(data_path, require_labels=True)
    print(f"data: {data.path} ({len(data.pairs)} pairs, sha256 {data.sha256[:16]})", file=out)
    table = score_table(data, cfg, judges, opts, out)
    features = judge_features(data, table, names)
    _print_excluded(features, out, unit="invalid scores (handled by combine.on_invalid "
                    f"= {comb.on_invalid!r})")
    folds, summary, final = _run(features, default, [(policy, fill)], k=k, seed=seed, out=out)
    created = {"judges": {j: dict(zip(("template_sha256", "model"), judge_identity(cfg, j))) for j in judges},
               "combine": {"policy": comb.policy, "on_invalid": comb.on_invalid, "fill_value": fill}}
    profile_path, plot_path = _finish(
        "judge_weights", name, features, data, default, folds, summary, final, created,
        out_dir=out_dir, plot=plot, k=k, seed=seed, na_value_native=fill, out=out,
        title=f"tune weights: {', '.join(judges)}, {len(features.pairs)} pairs, {k}-fold")
    print("config:", file=out)
    for j, w in final.aggregation.weight_dict().items():
        print(f"  [judges.{j}] weight = {w:.4f}", file=out)
    return TuneOutcome(folds, summary, final, default, profile_path, plot_path, features)


def _print_excluded(features: Features, out: TextIO, *, unit: str) -> None:
    if features.excluded:
        total = sum(features.excluded.values())
        print(f"excluded {total} {unit}: " + ", ".join(f"{r} x{n}" for r, n in Counter(features.excluded).most_common()),
              file=out)
