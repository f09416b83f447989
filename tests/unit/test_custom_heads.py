"""Brought heads without a worker process: their options, the wire form of whole-sample jobs, the
batcher that feeds a class whole samples, the worker-side model over a class (a numpy-only class
here: this venv has no torch), the adapters' torch-free parts, and the gateway-side judge's groups
(with a stand-in worker). The real workers under the heads venv: tests/integration/test_byo_heads.py."""

from __future__ import annotations

import asyncio
import io
import queue
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from judge_gateway.config import (
    ConfigError,
    CosmosRLHandlerOptions,
    CustomHeadOptions,
    FlowFactoryModelOptions,
    validate_config,
)
from judge_gateway.heads.batcher import Job
from judge_gateway.heads.custom import HeadContext, Item, ItemScore
from judge_gateway.heads.custom.cosmos_rl import batch_metadata, call_groups, per_sample, score_key
from judge_gateway.heads.custom.flow_factory import FlowFactoryArgs, _call_parameters, _per_sample
from judge_gateway.heads.custom.judge import CustomJudge
from judge_gateway.heads.custom.model import ItemBatcher, build_custom_head, output_of
from judge_gateway.heads.factory import build_head
from judge_gateway.heads.models.base import HeadLoadError
from judge_gateway.heads.protocol import HeadItem, ItemsJob, jobs_from_frame, jobs_header
from judge_gateway.judges.base import ScoreContext
from judge_gateway.media import MediaCache
from judge_gateway.judge_factory import build_judges
from judge_gateway.schema import SampleInput
from judge_gateway.workers.framing import encode_head, read_frame

ROOT = Path(__file__).resolve().parents[2]


# ---- options ----------------------------------------------------------------------------------


def test_options_check_what_the_gateway_can_without_importing_the_class(tmp_path):
    cfg_file = tmp_path / "conf" / "gw.toml"
    cfg_file.parent.mkdir()
    cfg_file.write_text('[judges.mine]\nkind = "custom"\n[judges.mine.options]\nhead = "rewards.mine:Mine"\n'
                        'pythonpath = ["src", "/abs/lib"]\nparams = {threshold = 0.5}\n'
                        '[judges.ff]\nkind = "flow_factory_model"\noptions = {reward_model = "pkg.rewards.MyReward"}\n')
    from judge_gateway.config import load_config

    cfg = load_config(cfg_file)
    mine = cfg.judges["mine"].options
    assert isinstance(mine, CustomHeadOptions)
    # relative import roots start at the config file's folder: a dump loads the same anywhere
    assert mine.pythonpath == [str(cfg_file.parent / "src"), "/abs/lib"]
    assert mine.params == {"threshold": 0.5} and mine.media == ["image", "video"] and mine.max_batch_size == 16
    ff = cfg.judges["ff"].options
    assert isinstance(ff, FlowFactoryModelOptions) and ff.reward_model == "pkg.rewards:MyReward"  # Flow-Factory's form
    again = validate_config(cfg.model_dump(mode="json"))
    assert again.judges["mine"].options.pythonpath == mine.pythonpath


@pytest.mark.parametrize(("options", "message"), [
    ({"head": "not a path"}, r"judges\.x\.options\.head: .*'not a path' is not an import path of a class"),
    ({"head": "pkg.mod.Name"}, r"write `package\.module:ClassName`"),
    ({"head": "m:C", "pooling": "min"}, r"pooling: not used by a brought head"),
    ({"head": "m:C", "media": ["condition_image"]}, r"options\.media: .*must list `image` or `video`"),
    ({"head": "m:C", "media": ["image", "image"]}, r"listed twice"),
    ({"head": "m:C", "parms": {}}, r"options\.parms: Extra inputs are not permitted"),
    ({}, r"options\.head: Field required"),
])
def test_bad_options_are_refused_naming_the_key(options, message):
    with pytest.raises(ConfigError, match=message):
        validate_config({"judges": {"x": {"kind": "custom", "options": options}}})


def test_cosmos_handler_options_default_to_cosmos_rl_conventions():
    o = CosmosRLHandlerOptions(handler="m:H")
    assert o.batch_keys == ["geneval_only_strict", "ocr_use_gpu"] and o.score_key is None
    assert o.class_path() == "m:H" and o.media == ["image", "video"]


def test_a_flow_factory_profile_may_leave_a_groupwise_judges_rewards_as_they_are():
    cfg = validate_config({"judges": {"r": {"kind": "flow_factory_model", "options": {"reward_model": "m:R"}}},
                           "flow_factory": {"profiles": {"g": {"judges": {"r": 1.0}, "mode": "groupwise",
                                                               "group_transform": "none"}}}})
    assert cfg.flow_factory.profiles["g"].group_transform == "none"


# ---- the wire form of whole samples --------------------------------------------------------


def _item(prompt: str, n: int = 1, h: int = 4, w: int = 6, value: int = 0, **kw: Any) -> HeadItem:
    medium = "image" if n == 1 and "fps" not in kw else "video"
    return HeadItem(prompt, medium, np.full((n, h, w, 3), value, np.uint8), **kw)


def test_items_jobs_round_trip_through_a_frame_beside_frames_jobs():
    cond = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(1, 2, 3, 3)
    items = [_item("a", value=1, metadata={"tag": "x"}, group_id="g", condition_images=[cond]),
             _item("b", n=3, value=2, fps=8.0, condition_videos=[np.full((2, 2, 2, 3), 9, np.uint8)])]
    frames = np.full((2, 5, 5, 3), 7, np.uint8)
    header, total = jobs_header([ItemsJob.of(1, items), (2, "plain", frames.shape)], "pipe")
    payload = b"".join(a.tobytes() for i in items for a in i.arrays()) + frames.tobytes()
    assert total == len(payload)
    got, bad = jobs_from_frame(*read_frame(io.BytesIO(encode_head(header, total) + payload)), None)
    assert bad == [] and [j.msg_id for j in got] == [1, 2]
    a, b = got[0].items
    assert (a.prompt, a.medium, a.metadata, a.group_id, a.fps) == ("a", "image", {"tag": "x"}, "g", None)
    assert (a.frames == 1).all() and np.array_equal(a.condition_images[0], cond)
    assert (b.medium, b.fps, b.frames.shape) == ("video", 8.0, (3, 4, 6, 3)) and (b.condition_videos[0] == 9).all()
    assert got[1].items is None and got[1].prompt == "plain" and (got[1].frames == 7).all()


@pytest.mark.parametrize("bad", [
    {"items": []}, {"items": [{"medium": "audio", "arrays": [{"role": "frames", "shape": [1, 1, 1, 3]}]}]},
    {"items": [{"medium": "image", "arrays": [{"role": "condition_image", "shape": [1, 1, 1, 3]}]}]},
    {"items": [{"medium": "image", "arrays": [{"role": "frames", "shape": [2, 1, 1, 3]}]}]},
    {"items": [{"medium": "image", "arrays": [{"role": "frames", "shape": [1, 99, 99, 3]}]}]},
])
def test_a_malformed_items_job_is_refused_alone(bad):
    header = {"op": "score", "dtype": "uint8", "via": "pipe",
              "jobs": [{"id": 1, "offset": 0, **bad}, {"id": 2, "prompt": "ok", "shape": [1, 1, 1, 3], "offset": 0}]}
    got, refused = jobs_from_frame(header, bytes(3), None)
    assert [j.msg_id for j in got] == [2] and [i for i, _ in refused] == [1]


def test_frames_are_split_before_their_headers_pass_the_budget(monkeypatch):
    from judge_gateway.heads import supervisor
    from judge_gateway.heads.supervisor import HeadSupervisor, _Outgoing

    monkeypatch.setattr(supervisor, "HEADER_BUDGET_BYTES", 10_000)
    worker = HeadSupervisor("w", "custom", CustomHeadOptions(head="m:C", transport="pipe"))
    small = np.zeros((1, 2, 2, 3), np.uint8)
    outs = [_Outgoing(i, "", small, None, [HeadItem("p", "image", small)], header_bytes=4_000)  # type: ignore[arg-type]
            for i in range(5)]
    assert [len(c) for c in worker._chunks(outs)] == [2, 2, 1]


# ---- the batcher of whole samples ------------------------------------------------------------


def _jobs(*sizes: int, start: int = 1) -> list[Job]:
    return [Job(msg_id=start + k, frames=np.zeros((1, 1, 1, 3), np.uint8), prompt="",
                items=[_item(f"j{start + k}-{i}") for i in range(n)]) for k, n in enumerate(sizes)]


def test_pointwise_batches_gather_whole_jobs_and_a_failing_job_fails_alone():
    calls: list[list[str]] = []

    def score(items):
        calls.append([i.prompt for i in items])
        if any(i.prompt.startswith("j2-") for i in items):
            raise ValueError("bad request 2")
        return [{"raw": 1.0}] * len(items)

    b = ItemBatcher(score, max_batch_size=4, max_wait_ms=0, groupwise=False)
    out = b.run(_jobs(1, 2, 1, 3))
    assert [len(c) for c in calls[:1]] == [4]  # jobs 1-3 (4 items) in one call; job 4 in the next
    assert isinstance(out[2], ValueError) and all(len(out[k]) == n for k, n in ((1, 1), (3, 1), (4, 3)))
    assert b.stats()["batch_sizes"] == {"1": 2, "3": 1}  # the retried 1 and 3, then job 4


def test_groupwise_calls_once_per_group_whatever_its_size():
    seen: list[int] = []
    b = ItemBatcher(lambda items: seen.append(len(items)) or [{"raw": 0.0}] * len(items), 2, 0, groupwise=True)
    out = b.run(_jobs(3, 1))
    assert seen == [3, 1] and len(out[1]) == 3
    q: queue.Queue[Any] = queue.Queue()
    for job in _jobs(3, 3):
        q.put(job)
    jobs, _ = b.collect(q)
    assert len(jobs) == 1  # a job's size counts its items: a group of 3 fills a batch of 2


def test_a_frames_job_to_a_sample_head_is_that_jobs_error():
    b = ItemBatcher(lambda items: [{"raw": 0.0}] * len(items), 4, 0, groupwise=False)
    out = b.run([Job(msg_id=1, frames=np.zeros((1, 1, 1, 3), np.uint8), prompt="")])
    assert "whole samples" in str(out[1])


# ---- the worker-side model over a class ------------------------------------------------------


def _options(head: str, **extra: Any) -> CustomHeadOptions:
    return CustomHeadOptions(head=head, **extra)


def test_a_custom_class_is_built_once_and_scores_whole_samples():
    head = build_head("custom", _options("tests.support.byo_heads:PromptLength", max_batch_size=8))
    head.name = "len"
    info = head.load()
    assert info["class"] == "tests.support.byo_heads:PromptLength" and info["groupwise"] is False
    assert head.scorer.context == HeadContext("len", "custom", "cpu", "fp32", 8)
    outs = head.score_items([_item("four"), _item("skip me"), _item("video!", n=2, fps=4.0)])
    assert outs[0] == {"raw": 4.0, "details": {"batch_size": 3}} and outs[2]["raw"] == 6.0
    assert outs[1] == {"error": "the prompt asks to be skipped"}
    with pytest.raises(ValueError, match="cannot score"):
        head.score_items([_item("boom")])


@pytest.mark.parametrize(("head", "params", "message"), [
    ("no_such_pkg.rewards:X", {}, r"cannot import 'no_such_pkg\.rewards' for 'no_such_pkg\.rewards:X' under .*"
                                  r"ModuleNotFoundError"),
    ("tests.support.byo_heads:Nope", {}, r"has no 'Nope'"),
    ("tests.support.byo_heads:ItemScore", {}, r"needs a `score\(items\)` method"),
    ("tests.support.byo_heads:WithOptions", {"size": "big"}, r"options\.params\.size: Input should be a valid integer"),
    ("tests.support.byo_heads:WithOptions", {}, r"options\.params\.checkpoint: Field required"),
])
def test_a_class_that_cannot_load_says_why(head, params, message):
    with pytest.raises(HeadLoadError, match=message):
        build_custom_head("custom", _options(head, params=params)).load()


def test_results_become_outputs_or_the_items_own_error():
    assert output_of(2) == {"raw": 2.0} and output_of(np.float32(0.5)) == {"raw": 0.5}
    assert "a bool" in output_of(True)["error"] and "a str" in output_of("0.3")["error"]
    assert "not JSON" in output_of(ItemScore(raw=1.0, details={"t": object()}))["error"]
    assert output_of(ItemScore.failed("no face found", {"faces": 0})) == {"error": "no face found", "details": {"faces": 0}}
    with pytest.raises(ValueError):
        ItemScore(raw=1.0, error="both")


# ---- the adapters' torch-free parts ------------------------------------------------------------


def test_flow_factory_config_reads_extra_keys_as_attributes_like_reward_arguments():
    args = FlowFactoryArgs("j", "m:R", "float32", "cpu", 8, {"server_url": "http://x", "timeout": 3})
    assert (args.batch_size, args.server_url, args["timeout"], args.weight) == (8, "http://x", 3, 1.0)
    assert getattr(args, "retry_attempts", 3) == 3 and "server_url" in args.keys()
    with pytest.raises(AttributeError):
        _ = args.nope


def test_flow_factory_extra_info_goes_to_each_sample():
    out = _per_sample({"per": [1, 2], "all": "x", "batch": np.zeros((3, 3)), "odd": [object(), 1]}, 2)
    assert out == [{"per": 1, "all": "x"}, {"per": 2, "all": "x", "odd": 1}]

    class Model:
        def __call__(self, prompt, image=None, *, scale=1.0):
            return None

    class AnyKwargs:
        def __call__(self, prompt, **kwargs):
            return None

    assert _call_parameters(Model()) == ({"prompt", "image", "scale"}, False)
    assert _call_parameters(AnyKwargs())[1] is True


def _sample_item(prompt: str, shape=(4, 4, 3), medium="image", **md: Any) -> Item:
    return Item(prompt, medium, np.zeros(shape, np.uint8), metadata=md)  # type: ignore[arg-type]


def test_cosmos_calls_are_one_tensor_each_and_agree_on_batch_keys():
    items = [_sample_item("a", geneval_only_strict=False), _sample_item("b", (8, 8, 3)),
             _sample_item("c", geneval_only_strict=True), _sample_item("d", geneval_only_strict=False),
             _sample_item("e", (2, 4, 4, 3), "video")]
    assert call_groups(items, ["geneval_only_strict"]) == [[0, 3], [1], [2], [4]]
    batch = [_sample_item("a", geneval_only_strict=True, geneval_tags="counting"),
             _sample_item("b", geneval_only_strict=True, geneval_tags="colors", prompts=["spoof"])]
    md = batch_metadata(batch, ["geneval_only_strict"], np.stack([i.pixels for i in batch]))
    assert md["geneval_only_strict"] is True and md["geneval_tags"] == ["counting", "colors"]
    assert md["prompts"] == ["a", "b"] and md["media_type"] == "image" and md["input_info"]["shape"] == (2, 4, 4, 3)
    video = [Item("v", "video", np.zeros((3, 2, 2, 3), np.uint8), fps=8.0)]
    assert batch_metadata(video, [], np.zeros((1, 3, 3, 2, 2), np.uint8))["video_infos"] == [{"video_fps": 8.0}]


def test_cosmos_scores_become_per_sample_numbers_or_errors():
    scores = {"prediction": ["Good", "Error", "Bad"], "no_score": [0.9, -1.0, None], "yes_logit": np.array([1.0, 2, 3])}
    assert score_key(scores, "no_score", "cosmos_reason1") == "no_score"
    with pytest.raises(RuntimeError, match="set options.score_key"):
        score_key(scores, None, "other")
    assert score_key({"hpsv2": [1.0]}, None, "x") == "hpsv2" and score_key(scores | {"r": [0]}, None, "r") == "r"
    out = per_sample(scores, 3, "no_score", {"prediction": ["Error"]})
    assert out[0].raw == 0.9 and out[0].details == {"scores": {"prediction": "Good", "no_score": 0.9, "yes_logit": 1.0}}
    assert "prediction='Error'" in out[1].error and "is None" in out[2].error
    with pytest.raises(RuntimeError, match="not one value for each of 2 samples"):
        per_sample({"x": [1.0]}, 2, "x", {})


# ---- the gateway-side judge: groups --------------------------------------------------------------


class StandInWorker:
    """The part of a HeadSupervisor a CustomJudge uses, answering from the items it gets."""

    def __init__(self, groupwise: bool) -> None:
        self.info = {"groupwise": groupwise, "model": "m", "class": "m:C"}
        self.calls: list[list[str]] = []

    async def wait_ready(self) -> None:
        return None

    async def infer_items(self, items: list[HeadItem]) -> list[dict[str, Any]]:
        self.calls.append([i.prompt for i in items])
        await asyncio.sleep(0)
        return [{"raw": float(k), "details": {"n": len(items)}} for k in range(len(items))]


def _judge(groupwise: bool) -> tuple[CustomJudge, StandInWorker]:
    cfg = validate_config({"judges": {"g": {"kind": "custom", "options": {"head": "m:C", "media": ["image"]}}}})
    judge = build_judges(cfg, {})["g"]
    assert isinstance(judge, CustomJudge) and judge.media == ("image",)
    judge.worker = worker = StandInWorker(groupwise)  # type: ignore[assignment]
    return judge, worker


def _png() -> np.ndarray:
    return np.zeros((4, 4, 3), np.uint8)


async def test_a_groupwise_head_scores_each_group_once_and_each_member_gets_its_own():
    judge, worker = _judge(groupwise=True)
    samples = [SampleInput(prompt=f"p{i}", image=_png(), group_id="ab"[i % 2]) for i in range(5)]
    samples.append(SampleInput(prompt="lone", image=_png()))
    ctx = ScoreContext(MediaCache(), "r", samples=samples)
    scores = await asyncio.gather(*(judge.score(s, ctx) for s in samples))
    assert sorted(worker.calls) == [["p0", "p2", "p4"], ["p1", "p3"]]
    assert [s.raw for s in scores[:5]] == [0.0, 0.0, 1.0, 1.0, 2.0]
    assert scores[4].details["group_size"] == 3 and scores[4].details["group_index"] == 2
    assert scores[5].error is not None and scores[5].error.code.value == "bad_input" and "group_id" in scores[5].error.message


async def test_a_group_with_an_unreadable_member_fails_whole():
    judge, worker = _judge(groupwise=True)
    samples = [SampleInput(prompt="ok", image=_png(), group_id="g"),
               SampleInput(prompt="a video", video={"array": np.zeros((2, 4, 4, 3), np.uint8), "fps": 2}, group_id="g")]
    ctx = ScoreContext(MediaCache(), "r", samples=samples)
    scores = await asyncio.gather(*(judge.score(s, ctx) for s in samples))
    assert worker.calls == []
    for s in scores:
        assert s.error is not None and s.error.code.value == "bad_input"
        assert "group 'g': its member 1 (of 2) cannot be scored" in s.error.message and "scores a sample's image" in s.error.message


async def test_a_group_is_cancelled_only_when_all_its_cells_are():
    judge, _ = _judge(groupwise=True)
    started = asyncio.Event()

    async def slow(items):
        started.set()
        await asyncio.sleep(30)

    judge.worker.infer_items = slow  # type: ignore[method-assign]
    samples = [SampleInput(prompt=str(i), image=_png(), group_id="g") for i in range(2)]
    ctx = ScoreContext(MediaCache(), "r", samples=samples)
    cells = [asyncio.ensure_future(judge.score(s, ctx)) for s in samples]
    await started.wait()
    shared = ctx.shared[("g", "g")]
    cells[0].cancel()
    await asyncio.sleep(0)
    assert not shared.task.done()  # the other cell still waits for the group
    cells[1].cancel()
    await asyncio.gather(*cells, return_exceptions=True)
    await asyncio.sleep(0)
    assert shared.task.cancelled()


async def test_a_pointwise_head_sends_one_item_per_sample_with_its_metadata():
    judge, worker = _judge(groupwise=False)
    sent: list[HeadItem] = []

    async def capture(items):
        sent.extend(items)
        return [{"raw": 0.25, "details": {"k": 1}}]

    worker.infer_items = capture  # type: ignore[method-assign]
    score = await judge.score(SampleInput(prompt="p", image=_png(), metadata={"tag": "x"}, group_id="g"),
                              ScoreContext(MediaCache(), "r"))
    assert score.valid and score.raw == 0.25 and score.details["k"] == 1 and score.details["media"] == "image"
    assert score.details["head"]["class"] == "m:C" and score.model == "m"
    assert (sent[0].metadata, sent[0].group_id, sent[0].frames.shape) == ({"tag": "x"}, "g", (1, 4, 4, 3))
    video = await judge.score(SampleInput(prompt="p", video={"array": np.zeros((2, 4, 4, 3), np.uint8), "fps": 2}),
                              ScoreContext(MediaCache(), "r"))
    assert video.error is not None and "scores a sample's image; this sample has a video" in video.error.message


async def test_condition_media_go_with_the_item_when_listed_or_wanted():
    cfg = validate_config({"judges": {
        "edit": {"kind": "custom", "options": {"head": "m:C", "media": ["image", "condition_image"]}},
        "wants": {"kind": "flow_factory_model", "options": {"reward_model": "m:C"}}}})
    judges = build_judges(cfg, {})
    sent: list[HeadItem] = []

    async def capture(items):
        sent.extend(items)
        return [{"raw": 1.0}] * len(items)

    for name, conditions in (("edit", []), ("wants", ["condition_images"])):
        judges[name].worker = StandInWorker(groupwise=False)  # type: ignore[assignment]
        judges[name].worker.info["conditions"] = conditions
        judges[name].worker.infer_items = capture  # type: ignore[method-assign]
    source = np.full((3, 5, 3), 9, np.uint8)
    edited = SampleInput(prompt="p", image=_png(), condition_images=[source, source])
    ctx = ScoreContext(MediaCache(), "r")
    assert (await judges["edit"].score(edited, ctx)).details["conditions"] == {"images": 2, "videos": 0}
    assert [a.shape for a in sent[0].condition_images] == [(1, 3, 5, 3)] * 2  # [1, H, W, 3] each
    missing = await judges["edit"].score(SampleInput(prompt="p", image=_png()), ctx)
    assert missing.error is not None and "needs the sample's condition_images" in missing.error.message
    plain = await judges["wants"].score(SampleInput(prompt="p", image=_png()), ctx)  # wanted, not required
    assert plain.valid and sent[-1].condition_images == []
    await judges["wants"].score(edited, ctx)
    assert len(sent[-1].condition_images) == 2


# ---- a real worker process (the gateway's own interpreter: the class needs no torch) -----------------


async def test_a_custom_class_in_a_real_worker_batches_fails_alone_and_reports_unimportable():
    from judge_gateway.gateway import Gateway
    from judge_gateway.schema import RewardRequest

    cfg = validate_config({"judges": {
        "len": {"kind": "custom", "options": {"head": "tests.support.byo_heads:PromptLength", "max_wait_ms": 300}},
        "gone": {"kind": "custom", "default": False, "options": {"head": "no_such_rewards.scorers:Nope"}}}})
    gw = Gateway(cfg)
    try:
        ready = await gw.readiness(fresh=True)
        # two worker processes start (each imports numpy and the gateway): 10 s was not enough on CI's
        # 2 cores beside the integration tests; the wait ends as soon as both have settled
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ready = await gw.readiness(fresh=True)
            if ready["len"][0] and "failed" in (ready["gone"][1] or ""):
                break
            await asyncio.sleep(0.05)
        assert ready["len"] == (True, None) and "ModuleNotFoundError" in ready["gone"][1]
        image = np.zeros((4, 4, 3), np.uint8)

        async def score(*batches: list[str]) -> list[dict]:
            responses = await asyncio.gather(*(gw.score(RewardRequest(
                samples=[{"prompt": p, "image": image} for p in ps], judges=["len", "gone"])) for ps in batches))
            return [r.scores for resp in responses for r in resp.results]

        scores = await score(["a", "bb"], ["ccc"], ["dddd", "eeeee"])
        assert [s["len"].raw for s in scores] == [1.0, 2.0, 3.0, 4.0, 5.0]
        assert {s["len"].details["batch_size"] for s in scores} == {5}  # one call across the three requests
        assert all(s["gone"].error.code.value == "head_error" and "no_such_rewards" in s["gone"].error.message
                   for s in scores)
        scores = await score(["ok", "boom"], ["fine", "skip it"], ["last one"])
        assert [s["len"].raw for s in scores] == [2.0, None, 4.0, None, 8.0]  # the raise fails its own item
        assert "ValueError: cannot score 'boom'" in scores[1]["len"].error.message
        assert "asks to be skipped" in scores[3]["len"].error.message
        assert (await gw.judges["len"].worker.stats())["batch_sizes"]["5"] == 1
    finally:
        await gw.aclose()
