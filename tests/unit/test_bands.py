"""Score bands: High >= 0.7, Medium in [0.3, 0.7), Low below, from a configured label map."""

from __future__ import annotations

import math

import pytest

from judge_gateway.bands import DEFAULT_VIDEO_BANDS, band_of
from judge_gateway.config import ConfigError, validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.schema import RewardRequest
from tests.conftest import png_bytes


@pytest.mark.parametrize("reward, band", [
    (1.0, "High"), (0.7, "High"), (math.nextafter(0.7, 0), "Medium"), (0.5, "Medium"),
    (0.3, "Medium"), (math.nextafter(0.3, 0), "Low"), (0.0, "Low"), (-2.0, "Low"), (1.5, "High"),
])
def test_default_bands_at_the_edges(reward, band):
    assert band_of(reward, DEFAULT_VIDEO_BANDS) == band


def test_a_configured_map_lowest_band_is_open_below():
    bands = {"good": 0.8, "ok": 0.5, "bad": 0.2}
    assert [band_of(r, bands) for r in (0.8, 0.79, 0.5, 0.2, 0.1)] == ["good", "ok", "ok", "bad", "bad"]
    assert band_of(0.9, {}) is None


def config(base_url: str, **judge_extra) -> dict:
    backend = {"model": "fake-yes", "base_urls": [base_url], "timeout_s": 10, "max_retries": 0}
    return {"backends": {"yes": backend},
            "judges": {"video": {"kind": "yes_no", "backend": "yes", "template": "cosmos_reason1@1", **judge_extra},
                       "image": {"kind": "yes_no", "backend": "yes", "template": "image_quality@1"}}}


@pytest.mark.parametrize("bands, message", [
    ({"High": float("nan")}, "lower bound must be a number"),
    ({"High": 0.5, "Low": 0.5}, "share a lower bound"),
    ({" ": 0.5}, "label must not be empty"),
    ({"High": "0.7"}, "bands"),
])
def test_bands_are_validated_at_load(bands, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(config("http://127.0.0.1:1/v1", bands=bands))


async def _scores(cfg: dict, video_frames: list[bytes]):
    gw = Gateway(validate_config(cfg))
    try:
        req = RewardRequest(samples=[{"prompt": "p", "image": png_bytes(1),
                                      "video": {"frames": video_frames, "fps": 4}}], judges=["video", "image"])
        return (await gw.score(req)).results[0].scores
    finally:
        await gw.aclose()


async def test_video_scores_get_the_default_bands_image_scores_none(fake_backend):
    frames = [png_bytes(i, size=(32, 32)) for i in range(4)]
    s = await _scores(config(fake_backend.base_url), frames)
    # fake-yes: P(yes) = 0.8, P(no) = 0.15; cosmos_reason1 rewards P(no) / (P(yes) + P(no))
    assert s["video"].reward == pytest.approx(0.15 / 0.95)
    assert s["video"].details["band"] == "Low"
    assert "band" not in s["image"].details
    custom = await _scores(config(fake_backend.base_url, bands={"pass": 0.1, "fail": -math.inf}), frames)
    assert custom["video"].details["band"] == "pass"
    off = await _scores(config(fake_backend.base_url, bands={}), frames)
    assert "band" not in off["video"].details


async def test_an_image_judge_gets_bands_only_when_configured(fake_backend):
    cfg = config(fake_backend.base_url)
    cfg["judges"]["image"]["bands"] = {"good": 0.5, "bad": -math.inf}
    s = await _scores(cfg, [png_bytes(i, size=(32, 32)) for i in range(4)])
    # image_quality@1 rewards P(yes): 0.8 / 0.95
    assert s["image"].reward == pytest.approx(0.8 / 0.95) and s["image"].details["band"] == "good"


def _video_head(raw: float, bands=None):
    """A head-like judge (not a VLM) that saw a video and returns VideoAlign-scale scores."""
    from judge_gateway.config import JudgeConfig
    from judge_gateway.judges.base import Judge, Verdict

    class Head(Judge):
        kind = "videoalign"

        async def evaluate(self, sample, ctx):
            return Verdict(raw=raw, details={"media": "video", "frames": 8})

    cfg = JudgeConfig.model_construct(kind="videoalign", weight=1.0, deadline_s=None, normalize=None,
                                      bands=bands, options={})
    return Head("overall", cfg)


async def test_a_head_score_gets_no_default_bands():
    """VideoAlign's overall is unbounded (here 3.2): High/Medium/Low's [0, 1] bounds mean nothing
    for it, so a head gets bands only when its config sets them."""
    s = await _video_head(3.2).score(None, None)
    assert s.valid and s.reward == 3.2 and "band" not in s.details
    s = await _video_head(-0.4).score(None, None)
    assert s.valid and s.reward == -0.4 and "band" not in s.details
    configured = await _video_head(3.2, bands={"good": 2.0, "bad": -math.inf}).score(None, None)
    assert configured.details["band"] == "good"
