"""Failures stay inside their (sample, judge) cell, with the right error code."""

from __future__ import annotations


import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway, UnknownJudgeError
from judge_gateway.schema import RewardRequest
from tests.conftest import png_bytes
from tests.support.fault_gateway import fault_config


async def test_each_failure_stays_in_its_cell(fake_backend):
    gw = Gateway(validate_config(fault_config(fake_backend.base_url)))
    try:
        request = RewardRequest(samples=[{"prompt": "a red bicycle", "image": png_bytes(1)},
                                         {"prompt": "a blue car", "image": png_bytes(2)}],
                                judges=list(gw.judges))
        response = await gw.score(request)
    finally:
        await gw.aclose()
    assert len(response.results) == 2
    for result in response.results:
        s = result.scores
        assert s["quality"].valid and s["quality"].reward == pytest.approx(0.8 / 0.95)
        assert s["quality"].details["answer_mass"] == pytest.approx(0.95)
        assert s["quality"].template.id == "image_quality"
        assert s["rubric_ok"].valid and s["rubric_ok"].raw == pytest.approx(3.25)
        assert s["rubric_ok"].reward == pytest.approx((3.25 - 1) / 3)
        assert s["final"].valid and s["final"].reward == pytest.approx(0.75)
        assert s["flaky"].valid  # one 503, then retried
        expected = {
            "no_answer": "answer_missing",
            "no_logprobs": "parse_error",
            "rubric_bad": "parse_error",
            "stalled": "timeout",
            "down": "backend_unavailable",
            "refused": "backend_error",
        }
        for judge, code in expected.items():
            assert not s[judge].valid, judge
            assert s[judge].reward is None, judge
            assert s[judge].error.code.value == code, (judge, s[judge].error)
        assert "answer_mass" in s["no_answer"].details
        # on_invalid = "skip": the valid judges still combine, the sample is flagged invalid.
        assert result.valid is False
        assert set(result.invalid_judges) == set(expected)
        assert result.reward is not None
    # The stalled cell did not hold the request hostage.
    assert response.timings.total_ms < 15_000


async def test_invalidate_policy_nulls_the_combined_reward(fake_backend):
    cfg = fault_config(fake_backend.base_url, policy="weighted_mean", on_invalid="invalidate")
    gw = Gateway(validate_config(cfg))
    try:
        resp = await gw.score(RewardRequest(samples=[{"prompt": "x", "image": png_bytes(3)}],
                                            judges=["quality", "no_answer"]))
        ok = await gw.score(RewardRequest(samples=[{"prompt": "x", "image": png_bytes(3)}],
                                          judges=["quality", "final"]))
    finally:
        await gw.aclose()
    assert resp.results[0].reward is None and resp.results[0].valid is False
    r = ok.results[0]
    assert r.valid and r.reward == pytest.approx((2.0 * 0.8 / 0.95 + 1.0 * 0.75) / 3.0)


async def test_fill_policy_flags_the_sample(fake_backend):
    cfg = fault_config(fake_backend.base_url, policy="sum", on_invalid="fill", fill_value=-1.0)
    gw = Gateway(validate_config(cfg))
    try:
        resp = await gw.score(RewardRequest(samples=[{"prompt": "x", "image": png_bytes(3)}],
                                            judges=["quality", "no_answer"]))
    finally:
        await gw.aclose()
    r = resp.results[0]
    assert r.valid is False and r.invalid_judges == ["no_answer"]
    assert r.reward == pytest.approx(2.0 * 0.8 / 0.95 - 1.0)
    assert resp.combine.fill_value == -1.0


async def test_missing_media_is_bad_input_for_that_judge_only(fake_backend):
    gw = Gateway(validate_config(fault_config(fake_backend.base_url)))
    try:
        resp = await gw.score(RewardRequest(samples=[{"prompt": "x", "image": png_bytes(4)}, {"prompt": "no image"}],
                                            judges=["quality"]))
    finally:
        await gw.aclose()
    assert resp.results[0].scores["quality"].valid
    bad = resp.results[1].scores["quality"]
    assert not bad.valid and bad.error.code.value == "bad_input" and "image" in bad.error.message


async def test_unknown_judge_is_refused(fake_backend):
    gw = Gateway(validate_config(fault_config(fake_backend.base_url)))
    try:
        with pytest.raises(UnknownJudgeError, match="nope"):
            await gw.score(RewardRequest(samples=[{"prompt": "x", "image": png_bytes(4)}], judges=["nope"]))
    finally:
        await gw.aclose()


async def test_readiness_reports_down_backends(fake_backend):
    gw = Gateway(validate_config(fault_config(fake_backend.base_url)))
    try:
        ready = await gw.readiness(fresh=True)
    finally:
        await gw.aclose()
    assert ready["quality"][0] is True
    assert ready["down"][0] is False and ready["down"][1]


async def test_each_medium_is_encoded_once_per_request(fake_backend, monkeypatch):
    import judge_gateway.gateway as gateway_module
    from judge_gateway.media import MediaCache

    caches: list[MediaCache] = []

    class Recording(MediaCache):
        def __init__(self, *args, **kwargs) -> None:  # the gateway passes its media pool
            super().__init__(*args, **kwargs)
            caches.append(self)

    monkeypatch.setattr(gateway_module, "MediaCache", Recording)
    gw = Gateway(validate_config(fault_config(fake_backend.base_url)))
    try:
        # three judges with the same image encoding over 4 samples, one image shared by two samples
        imgs = [png_bytes(10), png_bytes(11), png_bytes(12), png_bytes(10)]
        resp = await gw.score(RewardRequest(samples=[{"prompt": "x", "image": i} for i in imgs],
                                            judges=["quality", "flaky", "final"]))
    finally:
        await gw.aclose()
    assert all(r.scores["quality"].valid for r in resp.results)
    assert len(caches) == 1
    assert caches[0].encodes == 3  # three distinct images, each encoded once
    assert caches[0].hits == 12 - 3


class _ClosingJudge:
    """A judge whose aclose waits until every judge of the gateway has begun closing: closed one
    after another, the first would wait for ever."""

    def __init__(self, name: str, began: list[str], everyone: int, fail: bool = False) -> None:
        self.name, self.began, self.everyone, self.fail = name, began, everyone, fail
        self.closed = False

    async def aclose(self) -> None:
        import asyncio

        self.began.append(self.name)
        while len(self.began) < self.everyone:
            await asyncio.sleep(0.01)
        self.closed = True
        if self.fail:
            raise RuntimeError(f"{self.name} could not close")


async def test_aclose_closes_the_judges_side_by_side_and_all_of_them_when_one_fails(fake_backend):
    import asyncio

    gw = Gateway(validate_config(fault_config(fake_backend.base_url)))
    began: list[str] = []
    judges = {n: _ClosingJudge(n, began, 3, fail=(n == "b")) for n in ("a", "b", "c")}
    await gw.aclose()  # its own judges first
    gw.judges = judges
    with pytest.raises(RuntimeError, match="b could not close"):
        await asyncio.wait_for(gw.aclose(), 10)
    assert sorted(began) == ["a", "b", "c"] and all(j.closed for j in judges.values())


async def test_aclose_raises_the_first_close_error_and_logs_the_others(fake_backend, caplog):
    import asyncio

    gw = Gateway(validate_config(fault_config(fake_backend.base_url)))
    began: list[str] = []
    judges = {n: _ClosingJudge(n, began, 3, fail=(n != "a")) for n in ("a", "b", "c")}
    await gw.aclose()
    gw.judges = judges
    with caplog.at_level("ERROR", logger="judge_gateway.gateway"), \
            pytest.raises(RuntimeError, match="b could not close"):
        await asyncio.wait_for(gw.aclose(), 10)
    logged = [r.getMessage() for r in caplog.records if r.name == "judge_gateway.gateway"]
    assert logged == ["judge c failed to close: RuntimeError('c could not close')"], logged
