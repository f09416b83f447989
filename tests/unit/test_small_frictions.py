"""The smaller frictions a new user met (from a fresh clone and from a wheel), each pinned by a
test: `--version`, a help that lists every command and shows the flags' defaults, `prompts lock`
with nothing new, a fix hint for a head that is not ready, `score`'s progress per sample, the
client's config by path or name and its error naming the URL of a stopped gateway, one prefix of
environment variables, a sample folder to score, and a port already in use. (The browser's A/B
interval, empty pairing and OCR text are tested in test_browse.py; the README's snippet in
test_readme.py.)"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from judge_gateway import __version__
from judge_gateway.cli import build_parser
from judge_gateway.cli import main as cli_main
from tests.support.cli_configs import write_config

ROOT = Path(__file__).resolve().parents[2]


# --- --version, the command list, the flags' defaults -----------------------------------------

def test_version_names_the_version_and_the_package_that_answered(capsys):
    with pytest.raises(SystemExit) as done:
        cli_main(["--version"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"judge-gateway {__version__} (") and str(ROOT / "judge_gateway") in out


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_the_top_level_help_lists_every_command():
    parser = build_parser()
    text = parser.format_help()
    assert {"prepare", "up", "env", "ray-status"} <= set(_commands(parser))
    for name in _commands(parser):  # each on a line of its own, with its one-line help
        assert re.search(rf"^    {re.escape(name)} +\S", text, re.MULTILINE), name


def _help(*command: str) -> str:
    parser = build_parser()
    for name in command:
        parser = _commands(parser)[name]
    return " ".join(parser.format_help().split())  # unwrapped


def test_flag_help_shows_each_default_that_exists():
    score = _help("score")
    assert "is always one request (default: 16)" in score
    assert "batches in flight (default: 4)" in score
    assert "(default: None)" not in score and "(default: False)" not in score  # unset flags and switches
    assert "fps of videos given as frame folders (default" not in score  # unset: no default to show
    assert _help("env", "build").count("default auto") == 1
    assert "the generation prompt (default: a photo of a cat)" in _help("prompts", "render")
    assert "uvicorn's log level (critical, error, warning, info, debug) (default: info)" in _help("serve")
    # Help that already names its default is left as written (no second "default").
    assert _help("up").count("default run/up") == 1 and "(default: run/up)" not in _help("up")


# --- prompts lock with nothing new --------------------------------------------------------------

def test_prompts_lock_says_when_there_is_nothing_new_to_lock(tmp_path, monkeypatch, capsys):
    from tests.support.template_copy import templates_with_an_unlocked_version

    templates_with_an_unlocked_version(tmp_path, monkeypatch)
    assert cli_main(["prompts", "lock"]) == 0
    assert capsys.readouterr().out == "locked image_quality@9\n"
    assert cli_main(["prompts", "lock"]) == 0
    assert capsys.readouterr().out == ("nothing new to lock: every template version in the package's templates "
                                       "is already in its lock file\n")
    mine = tmp_path / "mine"
    mine.mkdir()
    assert cli_main(["prompts", "lock", "--dir", str(mine)]) == 0
    assert f"every template version in {mine} is already" in capsys.readouterr().out


# --- a head that is not ready says how to make it ready ------------------------------------------

def test_a_head_that_cannot_load_gets_a_fix_hint_as_vlm_judges_do(tmp_path, capsys):
    """A head whose interpreter is missing: `prepare` builds it (`judges` loads it and says so);
    a head with no interpreter of its own whose libraries the gateway's lacks: the extra to install
    here, or its kind's environment."""
    from judge_gateway.config import load_config
    from judge_gateway.preflight import classify
    from judge_gateway.schema import JudgeInfo

    config = write_config(tmp_path, {"judges": {
        "ocr": {"kind": "ocr", "options": {"python": str(tmp_path / "nowhere" / "bin" / "python")}},
        "clip": {"kind": "clip"}}})
    assert cli_main(["judges", "ocr", "--config", config]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "NOT READY (head 'ocr' is failed: cannot start head 'ocr'" in out  # the reason, then the remedy
    assert f"-> `judge-gateway prepare --config {config} --judges ocr` builds its environment ({tmp_path}" in out
    # What a clip worker under the gateway's own interpreter (no torch) reports:
    info = JudgeInfo(name="clip", kind="clip", weight=1.0, ready=False,
                     ready_reason="failed: ModuleNotFoundError: No module named 'torch'")
    assert classify(info, load_config(config), config).hint == (
        # the command that works here (judge-gateway is not on the package index): this checkout's extra
        f"install its libraries here (`{sys.executable} -m pip install -e '{ROOT}[heads]'`), or give it "
        "the environment of its kind: `judge-gateway env build heads` (makes .venv-heads), set "
        '[judges.clip.options] python = ".venv-heads/bin/python"; then `judge-gateway prepare --config '
        f"{config} --judges clip` fetches its weights and probes it")


def test_score_names_the_head_fix_before_it_scores_nothing(tmp_path, capsys):
    from tests.support.media_files import write_image

    media = tmp_path / "media"
    media.mkdir()
    write_image(media / "a.png", seed=0)
    (media / "a.txt").write_text('a sign that says "hi"')
    config = write_config(tmp_path, {"judges": {
        "ocr": {"kind": "ocr", "options": {"python": str(tmp_path / "nowhere" / "bin" / "python")}}}})
    assert cli_main(["score", str(media), "-o", str(tmp_path / "run"), "--config", config, "--no-progress"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"-> `judge-gateway prepare --config {config} --judges ocr` builds its environment" in err


def test_a_services_head_hint_points_at_the_services_machine():
    from judge_gateway.preflight import classify
    from judge_gateway.schema import JudgeInfo

    info = JudgeInfo(name="pick", kind="pickscore", weight=1.0, ready=False, ready_reason="failed: no weights")
    check = classify(info, None)
    assert check.state == "unavailable"
    assert check.hint == ("on the service's machine, `judge-gateway prepare --config <its config> --judges pick` "
                          "builds the head's environment, fetches its weights and says what is missing")


# --- score: the progress bar moves per sample ---------------------------------------------------

class _RecordingBar:
    """tqdm's surface as `score` uses it, keeping each update."""

    made: ClassVar[list[_RecordingBar]] = []

    def __init__(self, *, total: int, initial: int, **_: object) -> None:
        self.total, self.n, self.updates = total, initial, []
        _RecordingBar.made.append(self)

    def update(self, n: int) -> None:
        self.updates.append(n)
        self.n += n

    def close(self) -> None:
        pass


def test_score_in_process_moves_its_progress_bar_as_each_sample_finishes(tmp_path, fake_backend, monkeypatch):
    import tqdm

    from tests.support.cli_configs import vlm_config
    from tests.support.media_files import write_image

    monkeypatch.setattr(tqdm, "tqdm", _RecordingBar)
    _RecordingBar.made = []
    media = tmp_path / "media"
    media.mkdir()
    for i in range(5):
        write_image(media / f"img{i}.png", seed=i)
        (media / f"img{i}.txt").write_text(f"a photo of cat {i}")
    (media / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    config = write_config(tmp_path, vlm_config(fake_backend.base_url, "fake-yes", {"quality": "image_quality@1"}))
    rc = cli_main(["score", str(media), "-o", str(tmp_path / "run"), "--config", config, "--batch-size", "16"])
    assert rc == 1  # the broken image is bad_input
    (bar,) = _RecordingBar.made
    # One batch of 6: the bad input at once, then each sample as it is scored (not one update of 6).
    assert bar.updates == [1, 1, 1, 1, 1, 1] and bar.n == bar.total == 6


# --- the client: a config by path or name; a stopped gateway named by its URL -------------------

def test_the_in_process_client_takes_a_config_file_or_a_shipped_config_by_name(tmp_path, fake_backend, monkeypatch):
    from judge_gateway import RewardClient
    from tests.conftest import png_bytes
    from tests.support.cli_configs import vlm_config

    path = Path(write_config(tmp_path, vlm_config(fake_backend.base_url, "fake-yes", {"quality": "image_quality@1"}),
                             name="judges.toml"))
    for config in (path, str(path)):
        with RewardClient(config=config) as client:
            result = client.rewards.create(samples=[{"prompt": "a cat", "image": png_bytes(1)}])
        assert result.judges == ["quality"] and result.results[0].valid
    monkeypatch.chdir(tmp_path)  # outside a checkout: no configs/ folder here
    with RewardClient(config="default") as client:
        assert "ocr" in [j.name for j in client.judges.list()]
    with pytest.raises(ValueError, match=r"not an http:// or https:// URL; to score in-process with a config "
                                         r"file or a shipped config, pass config='judges.toml'"):
        RewardClient("judges.toml")


def test_the_client_against_a_stopped_gateway_names_its_url(tmp_path):
    import httpx

    from judge_gateway import (
        JudgeGatewayError,
        RewardClient,
        RewardConnectionError,
        Unavailable,
    )
    from tests.conftest import png_bytes
    from tests.support.fake_openai import free_port

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with RewardClient(url, max_retries=1) as client, pytest.raises(RewardConnectionError) as err:
        client.rewards.create(samples=[{"prompt": "a cat", "image": png_bytes(1)}])
    assert str(err.value) == (f"cannot reach the judge-gateway service at {url}/v1/rewards (2 attempts): "
                              f"{type(err.value.__cause__).__name__}: {err.value.__cause__}; is `judge-gateway "
                              "serve` running there, and is the URL right?")
    assert isinstance(err.value.__cause__, httpx.ConnectError) and err.value.url == f"{url}/v1/rewards"
    assert isinstance(err.value, (Unavailable, JudgeGatewayError, httpx.TransportError))


# --- serve: a port in use is said before anything starts ----------------------------------------

def test_serve_on_a_port_in_use_exits_before_anything_starts(tmp_path, monkeypatch, capsys):
    import socket

    import uvicorn

    from judge_gateway.cli.serve import port_in_use
    from judge_gateway.server import heap

    started = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: started.append("uvicorn"))
    monkeypatch.setattr(heap, "freeze_startup_objects", lambda: None)  # not this test process's heap
    config = write_config(tmp_path, {"judges": {"ocr": {"kind": "ocr"}}})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli_main(["serve", "--config", config, "--port", str(port), "--log-level", "warning"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: cannot listen on 127.0.0.1:{port}: the port is already in use (")
        assert "choose another port with --port or server.port" in err and started == []
    assert port_in_use("127.0.0.1", port) is None  # released: free again
    assert port_in_use("127.0.0.1", 0) is None
    assert cli_main(["serve", "--config", config, "--port", str(port), "--log-level", "warning"]) == 0
    assert started == ["uvicorn"]


# --- one prefix of environment variables: JG_, the old JUDGE_GATEWAY_ names still read ----------

@pytest.fixture
def fresh_warnings(monkeypatch):
    from judge_gateway import env_vars

    monkeypatch.setattr(env_vars, "_warned", set())
    for name in ("URL", "API_KEY", "API_KEYS", "REDIS_URL"):
        monkeypatch.delenv(f"JG_{name}", raising=False)
        monkeypatch.delenv(f"JUDGE_GATEWAY_{name}", raising=False)


def test_the_jg_names_are_read_and_the_old_ones_still_work_with_a_warning(monkeypatch, fresh_warnings):
    import warnings

    from judge_gateway import RewardClient
    from judge_gateway.config import validate_config
    from judge_gateway.env_vars import getenv

    monkeypatch.setenv("JG_API_KEYS", "a,b")
    monkeypatch.setenv("JUDGE_GATEWAY_API_KEYS", "old")
    cfg = validate_config({"judges": {"ocr": {"kind": "ocr"}}, "store": {"url": "redis://file:6379/0"}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the JG_ name set: the old one is not looked at
        assert cfg.server.resolved_api_keys() == ["a", "b"]
    monkeypatch.delenv("JG_API_KEYS")
    with pytest.warns(FutureWarning, match="JUDGE_GATEWAY_API_KEYS is deprecated: set JG_API_KEYS instead"):
        assert cfg.server.resolved_api_keys() == ["old"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per variable and process
        assert cfg.server.resolved_api_keys() == ["old"]
    assert cfg.store.resolved_url() == "redis://file:6379/0"
    monkeypatch.setenv("JUDGE_GATEWAY_REDIS_URL", "redis://old:6379/0")
    with pytest.warns(FutureWarning, match="set JG_REDIS_URL instead"):
        assert cfg.store.resolved_url() == "redis://old:6379/0"
    monkeypatch.setenv("JG_REDIS_URL", "redis://new:6379/0")
    assert cfg.store.resolved_url() == "redis://new:6379/0"
    monkeypatch.setenv("JUDGE_GATEWAY_URL", "http://127.0.0.1:1")
    with pytest.warns(FutureWarning, match="set JG_URL instead"):
        RewardClient().close()
    monkeypatch.setenv("JG_URL", "http://127.0.0.1:2")
    client = RewardClient()
    assert str(client._async._http.base_url) == "http://127.0.0.1:2"
    client.close()
    monkeypatch.setenv("MY_KEYS", "mine")  # a name of the config's own is read as it is
    assert validate_config({"server": {"api_keys_env": "MY_KEYS"}}).server.resolved_api_keys() == ["mine"]
    assert getenv("OTHER_UNSET", "d") == "d"


def test_the_package_reads_no_judge_gateway_variable_but_through_the_alias():
    """Only env_vars.py names the old prefix (and config descriptions that say it is deprecated)."""
    hits = []
    for path in [*(ROOT / "judge_gateway").rglob("*.py"), *(ROOT / "configs").glob("*.toml"),
                 *(ROOT / "scripts").glob("*.sh")]:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "JUDGE_GATEWAY_" in line and path.name != "env_vars.py" and "deprecated JUDGE_GATEWAY_" not in line:
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not hits, "\n".join(hits)


# --- a sample folder for the quickstart's `score ./samples/` ---------------------------------

def test_samples_writes_a_folder_that_score_reads(tmp_path, monkeypatch, capsys):
    """What `samples` writes is a folder `score` reads, each prompt quoting the text the OCR judge
    looks for; the real OCR reads it in tests/integration/test_serve_default_ocr.py."""
    from judge_gateway.cli.samples import SAMPLES
    from judge_gateway.heads.ocr_text import extract_target_text
    from judge_gateway.inputs import read_inputs

    monkeypatch.chdir(tmp_path)
    assert cli_main(["samples"]) == 0  # default folder: ./samples
    assert "score them: judge-gateway score samples -o runs/first --judges ocr" in capsys.readouterr().err
    scan = read_inputs(Path("samples"))
    assert not scan.unsupported and not scan.no_prompt
    by_stem = {stem: (prompt, drawn) for stem, prompt, drawn in SAMPLES}
    assert sorted(item.image.stem for item in scan.items) == sorted(by_stem)
    for item in scan.items:
        prompt, _ = by_stem[item.image.stem]
        assert item.prompt == prompt and extract_target_text(prompt)
    misspelt = [stem for stem, (prompt, drawn) in by_stem.items() if extract_target_text(prompt) != drawn]
    assert sorted(misspelt) == ["main_street", "summer_sale"]  # the quickstart page says two
    assert cli_main(["samples", "samples"]) == 2  # never over files that are there
    assert "samples already holds 12 of the files this writes (open_sign.png, open_sign.txt, hello_world.png, ...)" \
        in capsys.readouterr().err
