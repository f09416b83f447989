"""The tiny models the tests build, as cached: one rule for all (tests/support/tiny_cache.py), and
entries that can move (no file records where the entry or the checkout lies)."""

from __future__ import annotations

import pytest

from tests.support.tiny_cache import ROOT, cache_dir
from tests.support.tiny_models import model_path

KINDS = ["vlm", "heads", "hpsv3", "videoalign", "geneval", "image_reward", "wan"]
TEXT_SUFFIXES = {".json", ".yaml", ".yml", ".txt", ".py", ".cfg", ".toml", ".jinja"}


@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.needs_geneval_venv) if k == "geneval" else k
                                  for k in KINDS])
def test_a_cached_tiny_model_records_no_absolute_path(kind):
    entry = model_path(kind)
    assert entry.parent == cache_dir() and len(entry.name.rsplit("-", 1)[1]) == 12  # <name>-<digest>
    texts = [p for p in entry.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES]  # geneval: weights only
    for path in texts:
        text = path.read_text(errors="replace")
        for where in {str(entry), str(entry.resolve()), str(cache_dir()), str(ROOT), str(ROOT.resolve())}:
            assert where not in text, (path.relative_to(entry), where)
