"""What makes a group comparable, on the scripted judge in process (tests/support/comparative_stub.py):
one prompt and one shown source per group, every sample set aside with its reason, the schedules'
calls as planned, a group whose every verdict is masked reported as such, never a 0.5."""

from __future__ import annotations

from judge_gateway.schema import RewardRequest, SampleInput
from tests.support.comparative_stub import StubJudge, comparative_gateway, gray_png


def brighter(first: int, second: int) -> float:
    return 1.0 if first > second else 0.0 if first < second else 0.5


async def _score(gateway, samples, judge: str = "cmp"):
    try:
        return [r.scores[judge] for r in (await gateway.score(RewardRequest(samples=samples, judges=[judge]))).results]
    finally:
        await gateway.aclose()


async def test_a_group_with_two_prompts_or_two_sources_is_bad_input():
    gateway = comparative_gateway("pairwise_yes_no@1")
    StubJudge(brighter, mode="logprobs").install(gateway)
    scores = await _score(gateway, [SampleInput(prompt=p, image=gray_png(v), group_id="g")
                                    for p, v in (("a cat", 10), ("a dog", 20))])
    assert all(s.error.code.value == "bad_input" and "different prompts" in s.error.message for s in scores)

    gateway = comparative_gateway("edit_pairwise_yes_no@1")
    StubJudge(brighter, mode="logprobs").install(gateway)
    scores = await _score(gateway, [SampleInput(prompt="make it red", image=gray_png(v), group_id="g",
                                                condition_images=[gray_png(source)])
                                    for v, source in ((10, 1), (20, 2))])
    assert all(s.error.code.value == "bad_input" and "different condition images" in s.error.message for s in scores)


async def test_an_edit_group_shows_its_source_once_per_call_first():
    gateway = comparative_gateway("edit_pairwise_yes_no@1")
    stub = StubJudge(brighter, mode="logprobs").install(gateway)
    scores = await _score(gateway, [SampleInput(prompt="make it red", image=gray_png(v), group_id="g",
                                                condition_images=[gray_png(200)]) for v in (10, 30, 20)])
    assert [round(s.reward, 5) for s in scores] == [0.0, 1.0, 0.5]
    assert len(stub.calls) == 6 and stub.params[0]["max_completion_tokens"] == 1
    assert all(len(shown) == 3 and shown[0] == 200 for shown in stub.shown)  # the source, then the pair


async def test_a_video_is_compared_by_its_first_frame_when_asked_and_set_aside_otherwise():
    from judge_gateway.media import VideoMedia

    video = VideoMedia.from_frames([gray_png(40), gray_png(250)], fps=8)
    samples = [SampleInput(prompt="a lamp", image=gray_png(v), group_id="g") for v in (10, 20)]
    samples.append(SampleInput(prompt="a lamp", video=video, group_id="g"))
    gateway = comparative_gateway("pairwise_yes_no@1")
    StubJudge(brighter, mode="logprobs").install(gateway)
    scores = await _score(gateway, samples)
    assert scores[2].error.code.value == "bad_input" and "compares images" in scores[2].error.message
    assert scores[0].details["group"]["set_aside"] == {"2": scores[2].error.message}
    gateway = comparative_gateway("pairwise_yes_no@1", video_first_frame=True)
    StubJudge(brighter, mode="logprobs").install(gateway)
    scores = await _score(gateway, samples)
    assert [round(s.reward, 5) for s in scores] == [0.0, 0.5, 1.0]  # the video's first frame, 40


async def test_every_verdict_masked_is_answer_missing_not_a_tie():
    gateway = comparative_gateway("unified_reward_think@1", swap_disagreement="mask")
    StubJudge(lambda first, second: 1.0).install(gateway)  # always "Image 1": every pair disagrees with itself
    scores = await _score(gateway, [SampleInput(prompt="a lamp", image=gray_png(v), group_id="g") for v in (10, 20, 30)])
    for s in scores:
        assert not s.valid and s.reward is None and s.error.code.value == "answer_missing"
        assert "masked" in s.error.message
    report = scores[0].details["group"]
    assert report["comparisons"] == {"done": 0, "masked": 3, "failed": 0}
    assert report["swap_agreement"]["rate"] == 0.0 and report["position_bias"]["first_chosen"] == 1.0


async def test_each_schedule_asks_the_calls_it_plans():
    for options, calls in (({"schedule": "circular", "circular_k": 2}, 32), ({"schedule": "swiss", "swiss_rounds": 3}, 24),
                           ({"schedule": "reference"}, 16), ({"swap": "random"}, 28), ({"swap": "none"}, 28)):
        gateway = comparative_gateway("pairwise_yes_no@1", **options)
        stub = StubJudge(brighter, mode="logprobs").install(gateway)
        scores = await _score(gateway, [SampleInput(prompt="a lamp", image=gray_png(20 * v + 5), group_id="g",
                                                    condition_images=[gray_png(80)]) for v in range(8)])
        assert len(stub.calls) == calls == scores[0].details["group"]["calls"]["made"], options
        assert all(s.valid for s in scores)
        if options.get("schedule") != "reference":
            rewards = [s.reward for s in scores]
            assert rewards.index(max(rewards)) == 7 and rewards.index(min(rewards)) == 0


async def test_prepare_probes_a_comparative_judge_with_a_group_of_two():
    from judge_gateway.prepare.probe import check_judge

    gateway = comparative_gateway("pairwise_yes_no@1")
    stub = StubJudge(brighter, mode="logprobs").install(gateway)

    async def serving() -> tuple[bool, None]:
        return True, None

    gateway.judges["cmp"].probe = serving  # the backend's model list: not what is tested here
    try:
        result = await check_judge(gateway, "cmp")
    finally:
        await gateway.aclose()
    assert result.ok and result.probe.startswith("ok (reward"), result  # a group of one would be not_applicable
    assert len(stub.calls) == 2
