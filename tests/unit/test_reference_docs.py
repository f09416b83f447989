"""The docs' reference pages are generated from the code (scripts/gen_reference.py) and must match it:
a config key, CLI flag, schema field, route or metric added without regenerating fails here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("gen_reference", REPO / "scripts" / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_reference"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("gen_reference", None)


@pytest.fixture(scope="module")
def rendered(gen):
    return gen.render_all()


def test_reference_pages_are_current(gen, rendered):
    stale = [str(path) for path, text in rendered.items()
             if not (REPO / path).is_file() or (REPO / path).read_text(encoding="utf-8") != text]
    assert not stale, (f"stale generated docs: {', '.join(stale)}; regenerate them with "
                       f"`{gen.COMMAND}` (from the repository root) and commit the result")


def test_generation_is_deterministic(gen, rendered):
    assert gen.render_all() == rendered


def test_every_reference_page_is_in_the_nav(rendered):
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    pages = [p for p in rendered if p.suffix == ".md"]
    assert len(pages) == 5
    for page in pages:
        assert str(page.relative_to("docs")) in nav, f"{page} is not in mkdocs.yml's nav"


def _models(root: type[BaseModel]):
    """Every config model reachable from GatewayConfig, with the kinds' options models."""
    from judge_gateway.config.kinds import KINDS

    seen, todo = [], [root, *(spec.options for spec in KINDS.values())]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.append(model)
        for info in model.model_fields.values():
            stack = [info.annotation]
            while stack:
                t = stack.pop()
                if isinstance(t, type) and issubclass(t, BaseModel):
                    todo.append(t)
                stack.extend(getattr(t, "__args__", ()))
    return seen


def test_every_config_key_has_a_description():
    """The generated configuration reference is only as good as the descriptions: each key says
    what it does (pydantic `Field(description=...)`)."""
    from judge_gateway.config import GatewayConfig

    missing = [f"{model.__module__}.{model.__name__}.{name}"
               for model in _models(GatewayConfig) for name, info in model.model_fields.items()
               if not (info.description or "").strip() and model.__name__ != "InvalidFill"]
    assert not missing, "config keys without a description: " + ", ".join(sorted(missing))


def test_the_config_page_documents_every_kind_and_section(rendered):
    from judge_gateway.config import GatewayConfig
    from judge_gateway.config.kinds import KINDS

    page = rendered[Path("docs/reference/configuration.md")]
    for kind in KINDS:
        assert f'`kind = "{kind}"`' in page
    for section in GatewayConfig.model_fields:
        assert f"`[{section}" in page
    # a known key with its default and constraint, as a reader looks it up
    assert '| `top_logprobs` | integer (>= 1, <= 20) | `20` |' in page


def test_the_cli_page_lists_every_command(gen, rendered):
    from judge_gateway.cli import build_parser

    page = rendered[Path("docs/reference/cli.md")]
    for name, _, sub in gen._subcommands(build_parser()):
        assert f"## `judge-gateway {name}`" in page
        for child, _, _ in gen._subcommands(sub):
            assert f"### `judge-gateway {name} {child}`" in page


def test_the_metrics_page_lists_the_exposed_names(rendered):
    """The page names what /metrics shows (counters with their `_total`), with each one's type."""
    from judge_gateway.metrics import Metrics

    page = rendered[Path("docs/reference/metrics.md")]
    types = [line.split()[2:4] for line in Metrics().render().decode().splitlines() if line.startswith("# TYPE ")
             and not line.split()[2].endswith("_created")]  # prometheus_client's per-counter creation time
    assert len(types) >= 14
    for name, kind in types:
        assert f"| `{name}` | {kind} |" in page
