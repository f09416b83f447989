"""`judge-gateway score INPUT -o RUN_DIR`: score every sample into a run folder (runs.py).

Resumable: a sample whose line is already in RUN_DIR/scores.jsonl (by content key) is not sent
again, so a killed run is continued by running the same command (runs.RunFolder.resume). A folder
scored with another config, other judges, templates, models, judge kinds or weights is refused
rather than mixed (with --server there is no config hash: the judges the server lists are all that
identifies them).
An input file that cannot be read is that sample's bad_input (keyed by its path), never the run's end.
Exit status: 0 when every sample is valid, 1 when any is invalid or lost to a request error.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from .. import runs
from ..inputs import IMAGE_SUFFIXES, VIDEO_SUFFIXES, InputItem, read_inputs, sample_key
from ..config.kinds import KINDS
from ..runs import RunFolder, ScoreLine
from ..schema import ErrorCode, RewardResponse, SampleInput


def _media_fields(item: InputItem, root: Path) -> dict[str, str]:
    """The sample's media as paths relative to the input root (where `browse` serves them from)."""
    out = {}
    for kind, path in (("image", item.image), ("video", item.video)):
        if path is not None:
            try:
                out[kind] = path.resolve().relative_to(root).as_posix()
            except ValueError:
                out[kind] = str(path.resolve())
    return out


def _content_key(item: InputItem) -> str:
    """The sample's content key; for a file that cannot be read (a dangling link, no permission)
    a key from its path, so that one sample becomes bad_input (in _prepare) and the run goes on."""
    try:
        return sample_key(item)
    except OSError:
        paths = [p for p in (item.image, item.video, *item.condition_images) if p is not None]
        return "path:" + "|".join(str(p.absolute()) for p in paths)


def error_text(err: Exception) -> str:
    """The whole reason, on one line: every field and message of a validation error (as the API
    reports them), else the error's text."""
    if isinstance(err, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'sample'}: {e['msg'].removeprefix('Value error, ')}"
                         for e in err.errors())
    return " ".join(str(err).split()) or type(err).__name__


def _sample_line(index: int, item: InputItem, root: Path) -> ScoreLine:
    """The sample's fields of its line (its result is set over them once scored)."""
    return ScoreLine(index=index, source=item.source, key=_content_key(item), prompt=item.prompt,
                     **_media_fields(item, root), **item.origin,
                     **({"group_id": item.group_id} if item.group_id else {}))


def _bad_input_line(base: ScoreLine, err: Exception) -> ScoreLine:
    return base.with_fields(scores={}, reward=None, valid=False,
                            error={"code": ErrorCode.bad_input.value, "message": error_text(err)})


def _request_error_line(base: ScoreLine, why: str) -> ScoreLine:
    return base.with_fields(valid=False, reward=None, request_error=why)


Todo = list[tuple[InputItem, ScoreLine]]


def _prepare(batch: Todo, fps: float | None) -> tuple[list[tuple[ScoreLine, SampleInput]], list[ScoreLine]]:
    """Validate each sample on its own, so one unreadable file is that sample's bad_input and
    never fails the request for its whole batch."""
    ok, bad = [], []
    for item, base in batch:
        try:
            ok.append((base, SampleInput(**item.to_sample(fps))))
        except (ValueError, OSError) as err:
            bad.append(_bad_input_line(base, err))
    return ok, bad


def _result_lines(ok: list[tuple[ScoreLine, SampleInput]], resp: RewardResponse) -> list[ScoreLine]:
    """Each sample's line, matched by the result's index; a sample the server returned no result
    for is a request error (invalid, scored again on resume), never dropped."""
    by_index = {res.index: res for res in resp.results}
    lines = []
    for k, (base, _) in enumerate(ok):
        res = by_index.get(k)
        if res is None:
            lines.append(_request_error_line(base, f"the server returned {len(resp.results)} results for "
                                                   f"{len(ok)} samples; none for this one"))
        else:
            lines.append(base.with_fields(**res.model_dump(mode="json", exclude={"index"})))
    return lines


def request_units(todo: Todo, batch_size: int, per_sample: bool) -> list[Todo]:
    """The samples of each request, in input order. A group (the samples sharing a group_id) is
    one request, whatever its size: a judge that compares a group's samples, and a group
    transform, see it whole, never split across requests. Ungrouped samples go `batch_size` to a
    request, or one each where `per_sample`."""
    units: list[Todo] = []
    by_group: dict[str, Todo] = {}
    loose: Todo = []
    for entry in todo:
        group = entry[0].group_id
        if group is None:
            loose.append(entry)
            if len(loose) == (1 if per_sample else batch_size):
                units.append(loose)
                loose = []
        elif group in by_group:
            by_group[group].append(entry)
        else:
            by_group[group] = [entry]
            units.append(by_group[group])
    if loose:
        units.append(loose)
    return units


async def _score(todo: Todo, client: Any, *, judges: list[str] | None,
                 batch_size: int, concurrency: int, fps: float | None, out: TextIO,
                 progress: bool, total: int, done: int, per_sample: bool) -> list[ScoreLine]:
    """Score `todo`, `concurrency` batches at a time, appending each line to `out` as it is
    known. A batch is a group, or `batch_size` ungrouped samples (`request_units`). `per_sample`
    (in-process, no judge that scores groups): each ungrouped sample is its own call, so a line
    (and the progress bar) moves as each sample finishes, not once per batch; through a server
    a batch is one request, which the service answers whole."""
    from tqdm import tqdm

    # In-process, one sample a call: batch_size x concurrency samples in flight, as in batches.
    sem = asyncio.Semaphore(concurrency * (batch_size if per_sample else 1))
    written: list[ScoreLine] = []
    bar = tqdm(total=total, initial=done, unit="sample", desc="scoring", disable=not progress,
               file=sys.stderr)

    def record(lines: list[ScoreLine]) -> None:
        RunFolder.append_to(out, lines)
        written.extend(lines)
        bar.update(len(lines))

    async def request(part: list[tuple[ScoreLine, SampleInput]]) -> None:
        try:
            resp: RewardResponse = await client.rewards.create(samples=[s for _, s in part], judges=judges)
        except Exception as exc:  # noqa: BLE001 - the samples are reported (and resumable), never dropped
            record([_request_error_line(base, f"{type(exc).__name__}: {exc}") for base, _ in part])
        else:
            record(_result_lines(part, resp))

    async def run_batch(batch: Todo) -> None:
        async with sem:
            ok, bad = await asyncio.to_thread(_prepare, batch, fps)
            if bad:
                record(bad)
            if ok:
                await request(ok)

    try:
        await asyncio.gather(*(run_batch(unit) for unit in request_units(todo, batch_size, per_sample)))
    finally:
        bar.close()
    return written


def _codes(counts: dict[str, int]) -> str:
    return ", ".join(f"{c}={n}" for c, n in counts.items()) or "-"


def print_summary(lines: list[ScoreLine], judges: list[str], summary: dict[str, Any],
                  file: TextIO | None = None) -> None:
    """The run's table: a row per judge over the samples it scored, a row for the samples no
    judge scored (bad input, request errors), so the rows add up to the totals in the title."""
    from rich.console import Console
    from rich.table import Table

    file = file or sys.stderr
    latency: dict[str, list[float]] = defaultdict(list)
    for line in lines:
        for name, score in line.scores.items():
            latency[name].append(score.get("latency_ms", 0.0))
    codes = summary["invalid_by_code"]
    title = f"{summary['samples']} samples: {summary['valid']} valid, {summary['invalid']} invalid"
    table = Table(title=title + (f" ({_codes(codes)})" if codes else ""))
    for col in ("judge", "scored", "valid", "invalid", "errors", "mean reward", "p50 latency ms"):
        # Names and codes wrap rather than being cut off on a narrow terminal.
        table.add_column(col, justify="left" if col in ("judge", "errors") else "right", overflow="fold")
    for name in judges:
        j = summary["judges"][name]
        table.add_row(name, str(j["scored"]), str(j["valid"]), str(j["invalid"]), _codes(j["invalid_by_code"]),
                      f"{j['mean_reward']:.4f}" if j["mean_reward"] is not None else "-",
                      f"{statistics.median(latency[name]):.0f}" if latency[name] else "-")
    unscored = summary["unscored"]
    if unscored["samples"]:
        table.add_row("(no judge ran)", "-", "-", str(unscored["samples"]), _codes(unscored["by_code"]), "-", "-")
    mean = summary["mean_reward"]
    table.caption = (f"combined reward of the {summary['valid']} valid samples: mean {mean:.4f}"
                     if mean is not None else "no valid combined reward")
    extra = summary["invalid_with_reward"]
    if extra["samples"]:
        table.caption += f"; {extra['samples']} invalid samples got one (mean {extra['mean_reward']:.4f})"
    # Written to a file or a pipe: wide enough that no judge name or error code is cut.
    console = Console(file=file, width=None if file.isatty() else 200)
    console.print(table)


def _scores_groups(kinds: Any) -> bool:
    """Whether one of these judge kinds scores a request's samples together (comparative)."""
    return any(KINDS[kind].scores_groups for kind in kinds if kind in KINDS)


def _run_identity(infos: list[Any], config_doc: dict[str, Any] | None) -> dict[str, Any]:
    """What the scores depend on: the judges, their templates (by hash) and models, the config."""
    return {
        "judges": [i.name for i in infos],
        "config_sha256": runs.config_sha256(config_doc) if config_doc is not None else None,
        "templates": {i.name: (i.template.model_dump(mode="json") if i.template else None) for i in infos},
        "models": {i.name: i.model for i in infos},
        # With --server there is no config hash: what the server reports is all that names the judges.
        "kinds": {i.name: i.kind for i in infos},
        "weights": {i.name: i.weight for i in infos},
    }


async def _judges_ready(client: Any, chosen: list[str], cfg: Any, config_ref: str | None) -> list[Any]:
    """The chosen judges' infos, once they were checked (in-process: only these are probed and
    their heads loaded). Says once which cannot score here and how to start them; none that
    can score ends the command before anything is written."""
    from .. import preflight

    checks = await preflight.check_judges(client, chosen, cfg, say=lambda text: print(text, file=sys.stderr),
                                          config_ref=config_ref)
    text = preflight.report(checks, other_heads=preflight.local_heads(cfg, chosen) if cfg is not None else ())
    if text:
        if not any(c.can_score for c in checks):
            raise ValueError(f"nothing scored: no judge to score with can score here\n{text}\n"
                             "(`judge-gateway judges` shows every judge's state)")
        print(f"warning: {text}", file=sys.stderr)
    return [c.info for c in checks]


def _warn_about_inputs(scan: Any, input_path: Path) -> None:
    if scan.unsupported:
        shown = ", ".join(scan.unsupported[:5]) + (f" and {len(scan.unsupported) - 5} more" if len(scan.unsupported) > 5 else "")
        print(f"warning: skipped {len(scan.unsupported)} file(s) in {input_path} that are not formats `score` "
              f"reads ({shown}); it reads {', '.join(sorted(IMAGE_SUFFIXES | VIDEO_SUFFIXES))}", file=sys.stderr)
    if scan.no_prompt:
        shown = ", ".join(scan.no_prompt[:5]) + (f" and {len(scan.no_prompt) - 5} more" if len(scan.no_prompt) > 5 else "")
        print(f"warning: {len(scan.no_prompt)} of {len(scan.items)} sample(s) have no prompt file beside them "
              f"({shown}): they are scored with an empty prompt (a judge that needs one marks them "
              "invalid); put the prompt in a same-named .txt", file=sys.stderr)


def run_score_command(args: argparse.Namespace) -> int:
    input_path = Path(args.input)
    scan = read_inputs(input_path)
    items = scan.items
    if not items:
        raise ValueError(f"{input_path}: no samples (no image or video files / JSONL lines)")
    judges = [j.strip() for j in args.judges.split(",") if j.strip()] if args.judges else None
    if args.batch_size < 1 or args.concurrency < 1:
        raise ValueError("--batch-size and --concurrency must be >= 1")
    run_dir = Path(args.output)
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"{run_dir} exists and is not a folder (-o names the run folder to write)")
    root = (input_path if input_path.is_dir() else input_path.parent).resolve()

    if args.server and not judges:
        # The service's default judges are not listed by /v1/judges; the run folder must name them.
        raise ValueError("with --server, name the judges to score with --judges")
    config_doc = cfg = None
    if not args.server:
        from ..config import load_config
        cfg = load_config(args.config)
        config_doc = cfg.model_dump(mode="json")
        unknown = [j for j in judges or [] if j not in cfg.judges]
        if unknown:
            raise ValueError(f"unknown judge(s) {', '.join(unknown)}; configured: {', '.join(cfg.judges)}")
        judges = judges or [name for name, j in cfg.judges.items() if j.default]
        if not judges:
            raise ValueError("the config has no default judge: name the judges to score with --judges")
    assert judges is not None
    _warn_about_inputs(scan, input_path)

    samples = [(item, _sample_line(i, item, root)) for i, item in enumerate(items)]
    folder = RunFolder(run_dir)
    identity, lines = asyncio.run(_score_into(folder, samples, args=args, cfg=cfg, judges=judges,
                                              config_doc=config_doc, input_path=input_path, root=root))
    lines.sort(key=lambda line: line.index)
    folder.write_lines(lines)
    summary = runs.summarize(lines, identity["judges"])
    folder.write_summary(summary)
    print_summary(lines, identity["judges"], summary)
    print(f"wrote {folder.scores_file} and {runs.SUMMARY_FILE}", file=sys.stderr)
    if summary["invalid"]:
        codes = ", ".join(f"{c}={n}" for c, n in summary["invalid_by_code"].items())
        print(f"error: {summary['invalid']} of {summary['samples']} samples invalid ({codes})", file=sys.stderr)
        return 1
    return 0


async def _score_into(folder: RunFolder, samples: Todo, *, args: argparse.Namespace, cfg: Any,
                      judges: list[str], config_doc: dict[str, Any] | None, input_path: Path, root: Path
                      ) -> tuple[dict[str, Any], list[ScoreLine]]:
    """Check the judges, resume the folder (refusing one scored otherwise), record the run and
    score what is not done; (the run's identity, every line: kept and new)."""
    from ..client import AsyncRewardClient

    client = (AsyncRewardClient(args.server, api_key=args.api_key) if args.server
              else AsyncRewardClient(config=cfg))
    try:
        ready = await _judges_ready(client, judges, cfg, None if args.server else args.config)
        identity = _run_identity(ready, config_doc)
        folder.path.mkdir(parents=True, exist_ok=True)
        folder.check_identity(identity)
        resumed = folder.resume([line for _, line in samples])
        if resumed.gone:
            print(f"dropping {resumed.gone} line(s) of samples no longer in {input_path}", file=sys.stderr)
        if resumed.unreadable:
            print(f"dropping {resumed.unreadable} line(s) of {folder.scores_file} that are not score lines "
                  "(their samples are scored again)", file=sys.stderr)
        items = [item for item, _ in samples]
        folder.write_info({"input": str(input_path.resolve()), "input_root": str(root),
                           "media_roots": runs.media_roots([p for it in items for p in (it.image, it.video) if p]),
                           "server": args.server, **identity})
        # Rewrite what is done (dropping torn lines, request and transient errors), then append.
        folder.write_lines(resumed.kept)
        with folder.open_for_append() as out:
            if resumed.kept:
                print(f"resuming: {len(resumed.kept)} of {len(samples)} samples already scored", file=sys.stderr)
            new = await _score([samples[i] for i in resumed.todo], client, judges=identity["judges"],
                               batch_size=args.batch_size, concurrency=args.concurrency, fps=args.fps, out=out,
                               progress=not args.no_progress, total=len(samples),
                               done=len(samples) - len(resumed.todo),
                               per_sample=not args.server and not _scores_groups(identity["kinds"].values()))
        return identity, resumed.kept + new
    finally:
        await client.close()


def register_score(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("score", help="score a folder or JSONL of prompts + media into a run folder")
    s.add_argument("input", help="a JSONL file (prompt, image/video paths) or a folder of media "
                                 "(png/jpg/webp/gif, mp4/avi/mov/webm/mkv; an animated GIF is a video; "
                                 "prompt from a same-named .txt)")
    s.add_argument("-o", "--output", required=True,
                   help="run folder to write (scores.jsonl, summary.json, run.json); an existing "
                        "one is resumed: samples already scored there are not sent again")
    src = s.add_mutually_exclusive_group()
    src.add_argument("--config", help="score in-process with this config file or shipped config name "
                                      "(default: the embedded `default`)")
    src.add_argument("--server", help="score through a running service at this URL")
    s.add_argument("--api-key", help="Bearer token for --server")
    s.add_argument("--judges", help="comma-separated judge names (default: the config's defaults)")
    s.add_argument("--batch-size", type=int, default=16,
                   help="ungrouped samples per request to --server; in-process, each is its own call "
                        "(batch-size x concurrency in flight) unless a judge compares a request's samples; "
                        "a group (samples sharing a group_id) is always one request")
    s.add_argument("--concurrency", type=int, default=4, help="batches in flight")
    s.add_argument("--fps", type=float, default=None, help="fps of videos given as frame folders")
    s.add_argument("--no-progress", action="store_true",
                   help="no progress bar (stderr; it moves as each sample finishes, with --server as each request returns)")
    s.set_defaults(func=run_score_command)
