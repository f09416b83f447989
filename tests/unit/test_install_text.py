"""The first install command works on a fresh machine (issue 33: `pip install 'judge-gateway[ocr]'`
answered "No matching distribution found"): the README, the docs home and the install page give
one text, from a clone or a wheel built there, and say the index has no judge-gateway. The
integration test tests/integration/test_wheel_install.py runs that text."""

from __future__ import annotations

import re

import pytest

from tests.support.install_text import PAGES, ROOT, install_block, install_commands


def test_one_install_text_in_the_readme_the_docs_home_and_the_install_page():
    blocks = {page: install_block(page) for page in PAGES}
    assert len(set(blocks.values())) == 1, blocks


def test_it_installs_from_a_clone_or_its_wheel_never_from_the_index():
    commands = install_commands()
    assert commands[0].startswith("git clone ") and commands[1] == "pip install '.[ocr]'"
    assert commands[2].startswith("pip wheel --no-deps -w dist . && pip install ")
    for command in commands:
        assert not re.search(r"pip install [\"']?judge-gateway", command), command


@pytest.mark.parametrize("page", PAGES)
def test_each_page_says_the_package_index_has_none(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    assert "not published on a package index" in " ".join(text.replace("**", "").split())
    assert "pip install 'judge-gateway[ocr]'" not in text
