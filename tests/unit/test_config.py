"""Config loads from TOML and every error names the offending key."""

from __future__ import annotations

import pytest

from judge_gateway.config import ConfigError, is_loopback, load_config, validate_config


def base() -> dict:
    return {
        "backends": {"vlm": {"model": "m", "base_urls": ["http://127.0.0.1:9/v1"]}},
        "judges": {"q": {"kind": "yes_no", "backend": "vlm", "template": "image_quality@1"}},
    }


def test_embedded_default_loads_and_binds_loopback():
    cfg = load_config()
    assert cfg.server.host == "127.0.0.1"
    assert {"image_quality", "alignment", "cosmos_reason1", "rational_rewards_t2i",
            "rational_rewards_edit", "unified_reward"} <= set(cfg.judges)
    assert cfg.judges["cosmos_reason1"].template == "cosmos_reason1@1"
    # the judges point at the ports scripts/start_vllm.sh uses for its presets
    assert cfg.backends["cosmos_reason1"].base_urls == ["http://127.0.0.1:8001/v1"]


@pytest.mark.parametrize("mutate, key", [
    (lambda d: d["judges"]["q"].update(weight="heavy"), "judges.q.weight"),
    (lambda d: d["judges"]["q"].update(backend="nope"), "judges.q.backend"),
    (lambda d: d["judges"]["q"].update(template="image_quality"), "judges.q.template"),
    (lambda d: d["judges"]["q"].update(template="image_quality@99"), "judges.q.template"),
    (lambda d: d["judges"]["q"].update(template="rational_rewards_t2i@1"), "judges.q.template"),
    (lambda d: d["judges"]["q"].update(kind="psychic"), "judges.q.kind"),
    (lambda d: d["judges"]["q"].update(options={"top_logprobs": 50}), "judges.q.options.top_logprobs"),
    (lambda d: d["judges"]["q"].update(options={"typo": 1}), "judges.q.options.typo"),
    (lambda d: d["judges"]["q"].update(colour="red"), "judges.q.colour"),
    (lambda d: d["backends"]["vlm"].update(base_urls=[]), "backends.vlm.base_urls"),
    (lambda d: d["backends"]["vlm"].update(base_urls=["ftp://x"]), "backends.vlm.base_urls"),
    (lambda d: d.update(combine={"policy": "median"}), "combine.policy"),
    (lambda d: d.update(server={"host": "0.0.0.0", "api_keys_env": None}), "server.host"),
])
def test_errors_name_the_key(mutate, key):
    data = base()
    mutate(data)
    with pytest.raises(ConfigError) as err:
        validate_config(data)
    assert key in str(err.value)


def test_every_problem_is_reported_at_once():
    # A judge's bad options or unknown kind fail its own section; the checks across sections still
    # run over the other judges (they stopped at the section errors once).
    data = base()
    data["judges"] = {
        "a": {"kind": "yes_no", "backend": "vlm", "template": "image_quality@1", "options": {"top_logprobs": 50}},
        "b": {"kind": "yes_no", "backend": "nope", "template": "image_quality@1"},
        "c": {"kind": "bogus"},
    }
    with pytest.raises(ConfigError) as err:
        validate_config(data)
    message = str(err.value)
    assert "judges.a.options.top_logprobs: Input should be less than or equal to 20" in message
    assert "judges.b.backend: unknown backend 'nope' (known: vlm)" in message
    assert "judges.c.kind: unknown kind 'bogus'" in message


def test_a_judge_whose_section_failed_still_counts_as_configured():
    data = base()
    data["judges"]["c"] = {"kind": "bogus"}
    data["eval"] = {"thresholds": {"c": 0.4, "ghost": 0.5}}
    with pytest.raises(ConfigError) as err:
        validate_config(data)
    message = str(err.value)
    assert "judges.c.kind: unknown kind 'bogus'" in message
    assert "eval.thresholds.ghost: no such judge (configured: q, c)" in message
    assert "eval.thresholds.c" not in message


def test_unknown_template_lists_available_versions():
    data = base()
    data["judges"]["q"]["template"] = "image_quality@7"
    with pytest.raises(ConfigError, match="1"):
        validate_config(data)


def test_rubric_aspect_weights_must_name_real_aspects():
    data = base()
    data["judges"]["r"] = {"kind": "rubric", "backend": "vlm", "template": "rational_rewards_t2i@1",
                           "options": {"aspect_weights": {"Text Faithfulnes": 2.0}}}
    with pytest.raises(ConfigError, match=r"judges\.r\.options\.aspect_weights\.Text Faithfulnes"):
        validate_config(data)


def test_public_host_is_allowed_with_keys():
    data = base()
    data["server"] = {"host": "0.0.0.0", "api_keys": ["secret"]}
    assert validate_config(data).server.resolved_api_keys() == ["secret"]


def test_loopback_hosts_need_no_keys():
    # The one list the config check and the serve / browse commands share.
    assert all(is_loopback(h) for h in ("127.0.0.1", "localhost", "::1"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.2", ""))
    data = base()
    data["server"] = {"host": "::1", "api_keys_env": None}
    assert validate_config(data).server.host == "::1"


def test_bad_toml_is_reported(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("[judges\nx=1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(p)


def test_missing_file_is_reported(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "absent.toml")


def test_options_that_would_be_silently_ignored_are_refused_at_load():
    base = {"backends": {"b": {"model": "m", "base_urls": ["http://127.0.0.1:9/v1"]}}}
    video_only = {**base, "judges": {"j": {"kind": "yes_no", "backend": "b", "template": "cosmos_reason1@1",
                                           "options": {"video_first_frame": True}}}}
    with pytest.raises(ConfigError, match=r"judges\.j\.options\.video_first_frame: cosmos_reason1@1 has no <image>"):
        validate_config(video_only)
    with pytest.raises(ConfigError, match=r"cosmos_rl\.default_pull_type: 'dance_grp' is neither"):
        validate_config({**base, "cosmos_rl": {"default_pull_type": "dance_grp"}})
