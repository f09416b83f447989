"""Template families in your own folder ([prompts] dirs): started with `prompts new`, released with
`prompts lock --dir`, checked like the package's (a released version's bytes never change), pinned
by configs and scored by the VLM judges; a family lives in one folder only."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from judge_gateway.cli import main
from judge_gateway.config import ConfigError, load_config, validate_config
from judge_gateway.judge_factory import build_judges
from judge_gateway.prompts import (
    TemplateError,
    load_template,
    lock_new_templates,
    new_template,
    verify_lock,
)


def config_file(folder: Path, template: str) -> Path:
    path = folder / "gateway.toml"
    path.write_text('[prompts]\ndirs = ["templates"]\n\n[backends.vlm]\nmodel = "m"\nbase_urls = ["http://127.0.0.1:9/v1"]\n\n'
                    f'[judges.quality]\nkind = "yes_no"\nbackend = "vlm"\ntemplate = "{template}"\n')
    return path


def test_locked_edited_refused_new_version_accepted(tmp_path, capsys):
    folder = tmp_path / "templates"
    assert main(["prompts", "new", "shop_quality", "--from", "image_quality@1", "--dir", str(folder)]) == 0
    first = folder / "shop_quality" / "1.toml"
    text = first.read_text()
    assert 'id = "shop_quality"' in text and 'version = "1"' in text and "from image_quality@1 (sha256 " in text
    assert main(["prompts", "verify", "--dir", str(folder)]) == 1  # a draft is not released yet
    assert "unlocked template" in capsys.readouterr().err

    first.write_text(text.replace("Is this image of high quality", "Is this product photo of high quality"))
    assert main(["prompts", "lock", "--dir", str(folder)]) == 0
    assert "locked shop_quality@1" in capsys.readouterr().out
    lock = json.loads((folder / "templates.lock").read_text())
    cfg = load_config(config_file(tmp_path, "shop_quality@1"))
    assert cfg.prompts.dirs == [str(folder)]
    judge = build_judges(cfg, {"vlm": SimpleNamespace(cfg=cfg.backends["vlm"])})["quality"]  # type: ignore[dict-item]
    assert judge.template_ref.model_dump() == {"id": "shop_quality", "version": "1", "sha256": lock["shop_quality@1"]}

    released = first.read_bytes()
    first.write_bytes(released.replace(b"product photo", b"product shot"))  # an edit of a released version
    with pytest.raises(ConfigError, match=r"judges\.quality\.template: released template .*shop_quality/1\.toml changed"):
        load_config(config_file(tmp_path, "shop_quality@1"))
    assert any("changed" in p for p in verify_lock([folder]))
    assert main(["prompts", "lock", "--dir", str(folder)]) == 1  # never re-locks a changed entry
    assert json.loads((folder / "templates.lock").read_text()) == lock

    first.write_bytes(released)
    assert main(["prompts", "new", "shop_quality", "--from", "shop_quality@1", "--dir", str(folder)]) == 0
    second = folder / "shop_quality" / "2.toml"
    second.write_text(second.read_text().replace("product photo", "product shot"))  # a draft may change
    assert main(["prompts", "lock", "--config", str(tmp_path / "gateway.toml")]) == 0
    cfg = load_config(config_file(tmp_path, "shop_quality@2"))
    two = build_judges(cfg, {"vlm": SimpleNamespace(cfg=cfg.backends["vlm"])})["quality"]  # type: ignore[dict-item]
    assert two.template.version == "2" and "product shot" in two.template.user
    assert two.template.sha256 != lock["shop_quality@1"] and verify_lock([folder]) == []
    capsys.readouterr()
    assert main(["prompts", "list", "--config", str(tmp_path / "gateway.toml")]) == 0
    listed = capsys.readouterr().out
    assert "shop_quality@1" in listed and "shop_quality@2" in listed and "image_quality@1" in listed


def test_a_family_lives_in_one_folder(tmp_path):
    folder = tmp_path / "mine"
    with pytest.raises(TemplateError, match="'image_quality' is the package's"):
        new_template("image_quality", "image_quality@1", folder)
    shadow = folder / "image_quality" / "9.toml"
    shadow.parent.mkdir(parents=True)
    shadow.write_text(load_template("image_quality@1").path.read_text().replace('version = "1"', 'version = "9"'))
    with pytest.raises(TemplateError, match="is in 2 folders"):
        load_template("image_quality@1", [folder])
    with pytest.raises(TemplateError, match="one of the package's"):
        lock_new_templates(folder)
    assert any("a family lives in one folder only" in p for p in verify_lock([folder]))
    other = tmp_path / "other"
    new_template("team_q", "image_quality@1", other)
    with pytest.raises(TemplateError, match=f"'team_q' is in {other}"):
        new_template("team_q", "image_quality@1", tmp_path / "third", [other])


def test_unknown_refs_name_the_folders_looked_in(tmp_path):
    folder = tmp_path / "templates"
    new_template("mine", "vqa_alignment@1", folder)
    assert load_template("mine@1", [folder]).kind == "yes_no"  # a draft loads (with a warning)
    with pytest.raises(TemplateError, match=r"available versions: mine@1"):
        load_template("mine@2", [folder])
    with pytest.raises(TemplateError, match=rf"unknown template family 'theirs'.*looked in the package and in {folder}"):
        load_template("theirs@1", [folder])
    with pytest.raises(TemplateError, match="unknown template family 'mine'"):
        load_template("mine@1")  # not without its folder


def test_config_dirs_are_relative_to_the_config_file_and_checked(tmp_path):
    with pytest.raises(ConfigError, match=r"judges\.quality\.template: unknown template family 'nope'"):
        load_config(config_file(tmp_path, "nope@1"))
    with pytest.raises(ConfigError, match=r"prompts\.dirs: .*a folder is listed twice"):
        validate_config({"prompts": {"dirs": ["t", "./t"]}})
