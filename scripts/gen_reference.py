#!/usr/bin/env python
"""Write the reference pages of the docs site from the code, the one source of truth:

    docs/reference/configuration.md    every config key: type, default, constraint, description (pydantic models)
    docs/reference/cli.md              every command and flag (the argparse parsers)
    docs/reference/score-schema.md     the score schema's models (their JSON Schema)
    docs/reference/http-api.md         every route (the app's OpenAPI document)
    docs/reference/metrics.md          every Prometheus metric (judge_gateway.metrics.Metrics)

Usage (from anywhere; the checkout's own package is imported):

    .venv/bin/python scripts/gen_reference.py           # rewrite the pages
    .venv/bin/python scripts/gen_reference.py --check   # exit 1 naming each stale page

Deterministic: same code, same bytes (no dates, no machine facts). `tests/unit/test_reference_docs.py`
fails when a committed page differs from what this writes. One file over 500 lines: the five
renderers share the table helpers, and the test loads this script by its path.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any, Literal, Union

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # this checkout's judge_gateway, not an installed one

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen  # pydantic's own dependency
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

COMMAND = "python scripts/gen_reference.py"
REF = Path("docs/reference")


def banner(source: str) -> str:
    return (f"<!-- Generated from {source} by `{COMMAND}`: do not edit by hand; change the code "
            "and run it again (tests/unit/test_reference_docs.py checks it is current). -->\n\n")


def cell(text: Any) -> str:
    """Text for one Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


# ---------------------------------------------------------------------------------------------
# Config


def _strip_none(annotation: Any) -> tuple[Any, bool]:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        return (args[0] if len(args) == 1 else Union[tuple(args)]), optional  # noqa: UP007
    return annotation, False


def type_name(annotation: Any) -> str:
    """A TOML-minded name of a field's type."""
    annotation, _ = _strip_none(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (Union, types.UnionType):
        if all(isinstance(a, type) and issubclass(a, BaseModel) for a in args):
            return "table (by kind)"
        return " | ".join(type_name(a) for a in args)
    if origin in (list, set, frozenset):
        return f"array of {type_name(args[0])}"
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"array of {type_name(args[0])}"
        return "[" + ", ".join(type_name(a) for a in args) + "]"
    if origin is dict:
        return f"table of {type_name(args[1])}"
    if annotation is Any:
        return "any"
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return "table"
        if issubclass(annotation, Enum):
            return " | ".join(json.dumps(m.value) for m in annotation)
        return {"str": "string", "int": "integer", "float": "float", "bool": "boolean"}.get(
            annotation.__name__, annotation.__name__)
    return str(annotation)


def constraints(info: FieldInfo, is_text: bool = False) -> str:
    out = []
    for m in info.metadata:
        for kind, sign in ((Gt, ">"), (Ge, ">="), (Lt, "<"), (Le, "<=")):
            if isinstance(m, kind):
                out.append(f"{sign} {getattr(m, kind.__name__.lower())}")
        unit = "character" if is_text else "item"
        if isinstance(m, MinLen):
            out.append("not empty" if m.min_length == 1 else f"at least {m.min_length} {unit}s")
        if isinstance(m, MaxLen):
            out.append(f"at most {m.max_length} {unit}s")
        if getattr(m, "pattern", None):
            out.append(f"matches `{m.pattern}`")
    return ", ".join(out)


def toml_value(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return json.dumps(value.value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, int):
        if value >= 1 << 16 and value & (value - 1) == 0:
            return f"{value} (2^{value.bit_length() - 1})"
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, BaseModel):
        return "(table)"
    if isinstance(value, dict):
        if not value:
            return "{}"
        if all(isinstance(v, BaseModel) for v in value.values()):
            return "built in: " + ", ".join(f"`{k}`" for k in value)
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def _section_model(annotation: Any) -> tuple[Any, bool]:
    """(model, is a NAME -> model table) when the field is a sub-section; a union of models (a
    judge's options, chosen by its kind) is returned as the union."""
    annotation, _ = _strip_none(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    if typing.get_origin(annotation) in (Union, types.UnionType) and all(
            isinstance(a, type) and issubclass(a, BaseModel) for a in typing.get_args(annotation)):
        return annotation, False
    if typing.get_origin(annotation) is dict:
        value = typing.get_args(annotation)[1]
        if isinstance(value, type) and issubclass(value, BaseModel):
            return value, True
    return None, False


def anchor(path: str) -> str:
    return path.replace(".", "-").replace("NAME", "name").lower()


def _same_field(a: FieldInfo | None, b: FieldInfo) -> bool:
    """A subclass's copy of an inherited field, unchanged (pydantic copies each FieldInfo)."""
    return a is not None and (a.annotation, a.default, a.default_factory, a.description, a.metadata) == \
        (b.annotation, b.default, b.default_factory, b.description, b.metadata)


def _code(value: str) -> str:
    return value if value in ("required", "unset", "(its defaults)") else f"`{value}`"


class ConfigPage:
    """Walks GatewayConfig depth-first; each model is one section with a table of its keys (a model
    met again, e.g. the second Wan decoder, points at its first section)."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.seen: dict[type[BaseModel], str] = {}

    def section(self, path: str, model: type[BaseModel], level: int, inherited: type[BaseModel] | None = None,
                title: str | None = None, note: str = "", anchor_path: str | None = None) -> None:
        """`path` is the TOML key of the section; `anchor_path` (default: path) makes its anchor."""
        self.parts.append(f"{'#' * level} {title or f'`[{path}]`'} {{#{anchor(anchor_path or path)}}}\n")
        if note:
            self.parts.append(note + "\n")
        if model in self.seen and inherited is None:
            self.parts.append(f"The same keys as [`[{self.seen[model]}]`](#{anchor(self.seen[model])}).\n")
            return
        self.seen.setdefault(model, path)
        try:  # a section that can stand alone shows its effective defaults (validators fill some)
            instance: BaseModel | None = model()
        except ValidationError:  # a section with required keys has no standalone defaults
            instance = None
        doc = " ".join((model.__doc__ or "").split())
        if doc and model.__doc__ != BaseModel.__doc__:
            self.parts.append(doc + "\n")
        rows, subsections = [], []
        for name, info in model.model_fields.items():
            if inherited is not None and _same_field(inherited.model_fields.get(name), info):
                continue
            sub, named = _section_model(info.annotation)
            if info.is_required():
                default = "required"
            elif instance is not None:
                default = toml_value(getattr(instance, name))
            else:
                default = toml_value(info.get_default(call_default_factory=True))
            kind = type_name(info.annotation)
            if sub is not None:
                child = f"{path}.{name}" + (".NAME" if named else "")
                kind = f"[table](#{anchor(child)})" + (" per name" if named else "")
                if default in ("(table)", "{}") and not named:
                    default = "(its defaults)"
                subsections.append((child, sub))
            limit = constraints(info, is_text=kind == "string")
            rows.append(f"| `{name}` | {cell(kind)}{' (' + cell(limit) + ')' if limit else ''} | "
                        f"{cell(_code(default))} | {cell(info.description or '')} |")
        if rows:
            self.parts.append("| key | type | default | description |\n|---|---|---|---|\n" + "\n".join(rows) + "\n")
        for child, sub in subsections:
            if typing.get_origin(sub) in (Union, types.UnionType):
                self.kind_options(child, level + 1)
            else:
                self.section(child, sub, level + 1)

    def kind_options(self, path: str, level: int) -> None:
        from judge_gateway.config.head_options import HeadOptions
        from judge_gateway.config.kinds import KINDS
        from judge_gateway.config.vlm_options import VLMOptions

        self.parts.append(f"{'#' * level} `[{path}]` {{#{anchor(path)}}}\n")
        self.parts.append("The keys depend on the judge's `kind`: the keys every VLM kind or every head kind "
                          "takes, then each kind's own (where a kind changes a shared key's default, it is "
                          "listed again).\n")
        self.section(path, VLMOptions, level + 1, title="Every VLM kind", anchor_path=path + ".vlm")
        self.section(path, HeadOptions, level + 1, title="Every head kind", anchor_path=path + ".head")
        for name, spec in KINDS.items():
            base = VLMOptions if spec.runs_on == "vlm" else HeadOptions
            where = "a VLM judge on a backend, through a prompt template of its kind" if spec.runs_on == "vlm" \
                else "a local head in a worker process (media: " + ", ".join(spec.media) + ")"
            self.section(path, spec.options, level + 1, inherited=base, anchor_path=f"{path}.{name}",
                         title=f'`kind = "{name}"`', note=f"Runs as {where}; options model `{spec.options.__name__}`.")


def config_page() -> str:
    from judge_gateway.config import GatewayConfig

    page = ConfigPage()
    page.parts.append(banner("judge_gateway/config/ (the pydantic models)") + "# Configuration reference\n")
    page.parts.append(
        "A config is one TOML file (`judge-gateway serve --config FILE`; without `--config`, the embedded "
        "`configs/default.toml`). It is validated once, at load: an unknown key, a wrong type or a value out "
        "of range is an error that names the key (`judges.alignment.options.top_logprobs: Input should be "
        "less than or equal to 20`), and checks across sections (a judge's backend exists, a template is "
        "pinned and of the judge's kind, ...) run before anything starts. A key left out takes the default "
        "below; `unset` means the key has no value unless you give one (its description says what happens "
        "then). `NAME` stands for a name you choose (`[judges.alignment]`).\n")
    for name, info in GatewayConfig.model_fields.items():
        sub, named = _section_model(info.annotation)
        assert sub is not None, f"top-level key {name} is not a section"
        assert info.description, f"GatewayConfig.{name} needs a description (it introduces its section)"
        page.section(name + (".NAME" if named else ""), sub, 2,
                     note=" ".join((info.description or "").split()))
    return "\n".join(page.parts)


# ---------------------------------------------------------------------------------------------
# CLI


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                out.append((name, helps.get(name, ""), sub))
    return out


def _flag(action: argparse.Action) -> str:
    if not action.option_strings:
        return action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar or (("{" + ",".join(map(str, action.choices)) + "}") if action.choices
                                 else action.dest.upper())
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    more = " ..." if action.nargs in ("*", "+") else ""
    return f"{names} {metavar}{more}"


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if "%(" in text:
        text = text % {**vars(action), "prog": ""}
    if action.choices and action.option_strings and action.metavar:
        text += " (one of: " + ", ".join(map(str, action.choices)) + ")"
    if action.required and action.option_strings:
        text += " Required."
    return text


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS) or action.required:
        return ""
    return f"`{action.default}`" if not isinstance(action.default, list) else \
        "`" + " ".join(map(str, action.default)) + "`"


def cli_page() -> str:
    from judge_gateway.cli import build_parser

    parser = build_parser()
    parts = [banner("the argparse parsers of judge_gateway/cli/") + "# CLI reference\n",
             ("The `judge-gateway` command (also `python -m judge_gateway.cli`). Exit codes: 0 done, 1 the "
              "command ran and found a problem (e.g. `prompts verify`), 2 a usage or config error "
              "(the message names the flag or key).\n")]
    globals_ = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    parts.append("Global options, before the command: " +
                 ", ".join(f"`{_flag(a)}` ({a.help or a.dest})" for a in globals_) + ".\n")
    parts.append("| command | what it does |\n|---|---|\n" + "\n".join(
        f"| [`{name}`](#{name}) | {cell(helptext)} |" for name, helptext, _ in _subcommands(parser)) + "\n")

    def command(path: list[str], helptext: str, sub: argparse.ArgumentParser, level: int) -> None:
        name = " ".join(path)
        parts.append(f"{'#' * level} `judge-gateway {name}` {{#{'-'.join(path)}}}\n")
        text = sub.description or helptext
        if text:
            parts.append(" ".join(text.split()) + "\n")
        actions = [a for a in sub._actions if a.dest != "help" and not isinstance(a, argparse._SubParsersAction)]
        positionals = [_flag(a) for a in actions if not a.option_strings]
        children = _subcommands(sub)
        synopsis = " ".join(["judge-gateway", name, *(["COMMAND"] if children else []),
                             *positionals, *(["[options]"] if any(a.option_strings for a in actions) else [])])
        parts.append(f"```\n{synopsis}\n```\n")
        if actions:
            rows = [f"| `{cell(_flag(a))}` | {cell(_default(a))} | {cell(_help(a))} |" for a in actions]
            parts.append("| argument | default | description |\n|---|---|---|\n" + "\n".join(rows) + "\n")
        for child, child_help, child_parser in children:
            command([*path, child], child_help, child_parser, level + 1)

    for name, helptext, sub in _subcommands(parser):
        command([name], helptext, sub, 2)
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------
# JSON Schema (score schema) and OpenAPI


Href = typing.Callable[[str], str]


def _here(model: str) -> str:
    return f"#{model.lower()}"


def schema_type(schema: dict[str, Any], link: Href = _here) -> str:
    """A JSON Schema fragment as a short type name; `$ref`s link to the model's section."""
    if "$ref" in schema:
        model = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{model}]({link(model)})"
    if "anyOf" in schema:
        kinds = [schema_type(s, link) for s in schema["anyOf"]]
        return " \\| ".join(k for k in kinds if k != "null") + (" or null" if "null" in kinds else "")
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {schema_type(schema.get('items', {}), link)}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {schema_type(schema['additionalProperties'], link)}"
    return str(kind)


def _schema_limits(schema: dict[str, Any]) -> str:
    names = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<",
             "minItems": "items >=", "maxItems": "items <=", "minLength": "length >=", "maxLength": "length <="}
    return ", ".join(f"{sign} {schema[k]}" for k, sign in names.items() if k in schema)


def model_table(name: str, schema: dict[str, Any], level: int, link: Href = _here) -> str:
    out = [f"{'#' * level} `{name}` {{#{name.lower()}}}\n"]
    if schema.get("description"):
        out.append(" ".join(schema["description"].split()) + "\n")
    if "enum" in schema:
        out.append("One of: " + ", ".join(f"`{v}`" for v in schema["enum"]) + ".\n")
        return "\n".join(out)
    required = set(schema.get("required", ()))
    rows = []
    for field, prop in schema.get("properties", {}).items():
        default = f"`{json.dumps(prop['default'])}`" if "default" in prop else ""
        limits = _schema_limits(prop)
        description = cell(prop.get("description", "")) + (f" ({limits})" if limits else "")
        rows.append(f"| `{field}` | {schema_type(prop, link)} | {'yes' if field in required else ''} | "
                    f"{default} | {description} |")
    if rows:
        out.append("| field | type | required | default | description |\n|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
    return "\n".join(out)


def _defs(*schemas: dict[str, Any]) -> dict[str, dict[str, Any]]:
    merged: dict[str, dict[str, Any]] = {}
    for schema in schemas:
        schema = json.loads(json.dumps(schema))
        merged.update(schema.pop("$defs", {}))
        merged[schema["title"]] = schema
    return merged


def schema_files() -> dict[str, dict[str, Any]]:
    from judge_gateway.schema import RewardRequest, RewardResponse

    return {"reward-request.schema.json": RewardRequest.model_json_schema(),
            "reward-response.schema.json": RewardResponse.model_json_schema()}


def schema_page() -> str:
    from judge_gateway.schema import SCHEMA_VERSION

    files = schema_files()
    defs = _defs(*files.values())
    order = ["RewardResponse", "SampleResult", "JudgeScore", "ScoreError", "ErrorCode", "TemplateRef",
             "RewardRequest", "SampleInput"]
    names = [n for n in order if n in defs] + sorted(n for n in defs if n not in order)
    parts = [banner("judge_gateway/schema.py (its JSON Schema)") + "# Score schema reference\n",
             (f"Score schema version {SCHEMA_VERSION}: the pydantic models of `judge_gateway.schema`, shared by "
              "the native API, the Python client, the cosmos-rl envelope's `judge_scores` and the `score` "
              "command's output. `judge-gateway schema` prints the response's JSON Schema "
              "(`--request`: the request's); a running gateway serves both inside `/openapi.json`.\n")]
    parts += [model_table(n, defs[n], 2) for n in names]
    return "\n".join(parts)


def app_openapi() -> dict[str, Any]:
    from judge_gateway import Gateway, load_config
    from judge_gateway.server.app import create_app

    # The embedded default config: its protocol adapters are enabled, so every route is there.
    gateway = Gateway(load_config(None))
    try:
        return create_app(gateway, api_keys=[]).openapi()
    finally:
        asyncio.run(gateway.aclose())  # nothing was started; closes the backend clients it made


def http_page(openapi: dict[str, Any]) -> str:
    parts = [banner("the FastAPI app's OpenAPI document (judge_gateway/server/)") + "# HTTP API reference\n",
             " ".join(openapi["info"].get("description", "").split()) + "\n",
             ("Every route of a gateway serving the embedded default config (the cosmos-rl and Flow-Factory "
              "routes are there while `cosmos_rl.enabled` / `flow_factory.enabled`; Flow-Factory's "
              "`{profile}` is a `[flow_factory.profiles.NAME]`). With API keys configured, every route needs "
              "`Authorization: Bearer KEY` (or `X-API-Key: KEY`). A running gateway serves the OpenAPI "
              "document this page is made from at `/openapi.json` (and Swagger UI at `/docs`). Request and "
              "response models are in the [score schema reference](score-schema.md) or below.\n")]
    components = openapi.get("components", {}).get("schemas", {})
    in_schema_page = set(_defs(*schema_files().values()))

    def link(model: str) -> str:
        return ("score-schema.md" if model in in_schema_page else "") + f"#{model.lower()}"

    guides = {"/api/reward/": "../integrations/cosmos-rl.md", "/flow-factory/": "../integrations/flow-factory.md"}
    said: set[str] = set()
    for path, methods in openapi["paths"].items():
        for method, op in methods.items():
            parts.append(f"## `{method.upper()} {path}`\n")
            for text in (op.get("summary", ""), op.get("description", "")):
                if text:
                    parts.append(" ".join(text.split()).rstrip(".") + ".\n")
            for prefix, page in guides.items():
                if path.startswith(prefix) and prefix not in said:
                    said.add(prefix)
                    parts.append(f"The protocol's bodies, status codes and what differs from the peer's own server: [{page.rsplit('/', 1)[-1][:-3]}]({page}).\n")
            params = op.get("parameters", [])
            if params:
                parts.append("| parameter | in | type | required | description |\n|---|---|---|---|---|\n" + "\n".join(
                    f"| `{p['name']}` | {p['in']} | {schema_type(p.get('schema', {}), link)} | "
                    f"{'yes' if p.get('required') else ''} | {cell(p.get('description', ''))} |" for p in params) + "\n")
            body = op.get("requestBody")
            if body:
                kinds = [f"`{ctype}`: {schema_type(c.get('schema', {}), link)}"
                         for ctype, c in body.get("content", {}).items()]
                parts.append("Request body" + (" (required)" if body.get("required") else "") + ": "
                             + "; ".join(kinds) + "\n")
            rows = []
            for code, resp in op.get("responses", {}).items():
                content = resp.get("content", {})
                model = "; ".join(f"{schema_type(c.get('schema', {}), link)}" for c in content.values()
                                  if c.get("schema"))
                rows.append(f"| {code} | {cell(resp.get('description', ''))} | {model} |")
            parts.append("| status | meaning | body |\n|---|---|---|\n" + "\n".join(rows) + "\n")
    extra = sorted(n for n in components if n not in in_schema_page)
    if extra:
        parts.append("## Other models\n")
        parts += [model_table(n, components[n], 3, link) for n in extra]
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Metrics


def metrics_page() -> str:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics import MetricWrapperBase

    from judge_gateway.metrics import LATENCY_BUCKETS, Metrics
    from judge_gateway.watch.metrics import WatchMetrics  # the watch's series, on the same registry

    rows = []
    for metric in [*vars(Metrics()).values(), *vars(WatchMetrics(CollectorRegistry())).values()]:
        if not isinstance(metric, MetricWrapperBase):
            continue
        # Counters are exposed with `_total`; prometheus_client keeps the name without it.
        name = metric._name + ("_total" if metric._type == "counter" else "")
        labels = ", ".join(f"`{label}`" for label in metric._labelnames)
        rows.append(f"| `{name}` | {metric._type} | {labels} | {cell(metric._documentation)} |")
    return (banner("judge_gateway/metrics.py, judge_gateway/watch/metrics.py") + "# Metrics reference\n\n"
            "`GET /metrics` serves these in the Prometheus text format (one registry per gateway; in Ray mode, "
            "per gateway replica). Histograms also expose `_bucket`, `_sum` and `_count` series (and prometheus_client adds a `_created` timestamp per counter and histogram); their latency "
            "buckets are " + ", ".join(f"{b:g}" for b in LATENCY_BUCKETS)
            + " seconds. See [operations](../guides/operations.md) for what to watch.\n\n"
            "| metric | type | labels | meaning |\n|---|---|---|---|\n" + "\n".join(rows) + "\n")


# ---------------------------------------------------------------------------------------------


def render_all() -> dict[Path, str]:
    """Repository-relative path -> the text it must hold."""
    openapi = app_openapi()
    pages = {
        REF / "configuration.md": config_page(),
        REF / "cli.md": cli_page(),
        REF / "score-schema.md": schema_page(),
        REF / "http-api.md": http_page(openapi),
        REF / "metrics.md": metrics_page(),
    }
    return {path: text.rstrip("\n") + "\n" for path, text in pages.items()}


def stale(root: Path = REPO) -> list[Path]:
    """The generated files whose committed text differs from the code's."""
    out = []
    for path, text in render_all().items():
        target = root / path
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            out.append(path)
    return out


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description="Write the docs' reference pages from the code.")
    cli.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each stale page")
    if cli.parse_args(argv).check:
        bad = stale()
        for path in bad:
            print(f"stale: {path} (regenerate: {COMMAND})", file=sys.stderr)
        return 1 if bad else 0
    for path, text in render_all().items():
        target = REPO / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
