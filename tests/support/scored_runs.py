"""Scored run folders built directly (a run folder is data): the browser and eval tests' input.

`build_runs` writes one input folder of images and videos and two runs over it (A and B: two
template versions of the same judges), with critic details on the videos, invalid samples of
known error codes, and a `checkpoint` per sample. Every number is a function of the index, so
tests can compute what the page must show.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tests.support.media_files import write_image, write_video

CHECKPOINTS = ("step-1000", "step-2000", "step-3000")
VIDEO_SECONDS = 3  # clip length: violations at 1.5 s are inside, at 9.0 s outside
VIDEO_FPS = 8


def quality_reward(i: int) -> float:
    return (i * 37 % 100) / 100


def physics_reward(i: int) -> float:
    return (i * 53 % 100) / 100


def is_video(i: int) -> bool:
    return i % 4 == 0


def quality_invalid(i: int) -> bool:
    return i % 17 == 5


def bad_input(i: int) -> bool:
    return i % 29 == 7


def band(x: float) -> str:
    return "High" if x >= 0.7 else ("Medium" if x >= 0.3 else "Low")


@dataclass
class BuiltRuns:
    inputs: Path
    a: Path
    b: Path
    n: int


def _template(family: str, version: str) -> dict:
    return {"id": family, "version": version, "sha256": (family + version).encode().hex().ljust(64, "0")[:64]}


def _critic(i: int, reward: float) -> dict:
    return {
        "critique": {"video_analysis": {
            "physical_accuracy": {"score": reward, "violations": ["gravity_inconsistency_at_1.5s"],
                                  "explanation": f"the ball of clip {i} floats for a moment"},
            "reasoning_chain": {"logical_consistency": 0.9, "causal_relationships": "strong",
                                "temporal_coherence": "maintained"},
            "content_quality": {"visual_coherence": 0.8, "object_permanence": 0.95,
                                "scene_understanding": "excellent"}}},
        "violations": [{"label": "gravity_inconsistency", "t_s": 1.5, "valid_time": True},
                       {"label": "object_vanishes", "t_s": 9.0, "valid_time": False}],
        "reasoning": f"<think>clip {i}: the ball rises without a push</think>",
        "band": band(reward),
        "video": {"num_frames": 12, "fps": 4.0, "frame_first": 0, "frame_last": 22, "frame_step": 2.0,
                  "source_frames": VIDEO_SECONDS * VIDEO_FPS},
    }


def _line(i: int, shift: float, version: str, media: dict) -> dict:
    line = {"index": i, "source": Path(next(iter(media.values()))).name, "key": f"k{i:04d}",
            "prompt": f"prompt {i}: a {'red' if i % 2 else 'blue'} ball on a table", **media,
            "checkpoint": CHECKPOINTS[i % 3], "group_id": None}
    if bad_input(i):
        return {**line, "scores": {}, "reward": None, "valid": False,
                "error": {"code": "bad_input", "message": "cannot read video container"}}
    scores = {}
    q = min(1.0, quality_reward(i) + shift)
    if quality_invalid(i):
        scores["quality"] = {"judge": "quality", "reward": None, "raw": None, "valid": False,
                             "error": {"code": "parse_error", "message": "no Yes/No answer"}, "details": {},
                             "template": _template("image_quality", version), "model": "fake-vlm",
                             "latency_ms": 12.0}
    else:
        scores["quality"] = {"judge": "quality", "reward": q, "raw": q, "valid": True, "error": None,
                             "details": {"p_yes": q}, "template": _template("image_quality", version),
                             "model": "fake-vlm", "latency_ms": 12.0}
    if is_video(i):
        p = physics_reward(i)
        scores["physics"] = {"judge": "physics", "reward": p, "raw": p, "valid": True, "error": None,
                             "details": _critic(i, p), "template": _template("cosmos_reason1_critic", version),
                             "model": "nvidia/Cosmos-Reason1-7B", "latency_ms": 80.0}
    valid = all(s["valid"] for s in scores.values())
    rewards = [s["reward"] for s in scores.values() if s["valid"]]
    return {**line, "scores": scores, "reward": sum(rewards) / len(rewards) if valid else None, "valid": valid,
            "invalid_judges": [j for j, s in scores.items() if not s["valid"]]}


def build_runs(root: Path, n: int = 240, *, shift_b: float = 0.05) -> BuiltRuns:
    """Inputs under root/inputs, runs under root/run_a and root/run_b (B's quality reward is A's
    plus `shift_b`, capped at 1)."""
    inputs = root / "inputs"
    inputs.mkdir(parents=True)
    media = {}
    for i in range(n):
        if is_video(i):
            name = f"clip{i:04d}.webm" if i % 8 == 0 else f"clip{i:04d}.mp4"
            write_video(inputs / name, frames=VIDEO_SECONDS * VIDEO_FPS, fps=VIDEO_FPS, size=(32, 24), seed=i)
            media[i] = {"video": name}
        else:
            name = f"img{i:04d}.png"
            write_image(inputs / name, seed=i, size=(32, 24))
            media[i] = {"image": name}
    out = []
    for run, shift, version in (("run_a", 0.0, "1"), ("run_b", shift_b, "2")):
        d = root / run
        d.mkdir()
        lines = [_line(i, shift, version, media[i]) for i in range(n)]
        (d / "scores.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        (d / "run.json").write_text(json.dumps({"input": str(inputs), "input_root": str(inputs),
                                                "judges": ["quality", "physics"], "config_sha256": "0" * 64,
                                                "templates": {}}))
        out.append(d)
    return BuiltRuns(inputs=inputs, a=out[0], b=out[1], n=n)


def media_run(inputs: Path, run: Path, media: list[str], judges: dict[str, float | None] | None = None) -> Path:
    """A run folder `run` over files already in `inputs`, one sample per name (a `.png` is an
    image, anything else a video); each judge's score is its given reward, or invalid
    (`backend_unavailable`) where that is None."""
    scores = judges or {"q": 0.5}

    def score(judge: str, reward: float | None) -> dict:
        if reward is None:
            return {"judge": judge, "reward": None, "valid": False, "raw": None, "latency_ms": 1.0,
                    "error": {"code": "backend_unavailable", "message": "down"}}
        return {"judge": judge, "reward": reward, "valid": True, "raw": reward, "latency_ms": 1.0}

    run.mkdir(parents=True)
    lines = [{"index": i, "source": name, "key": f"k{i}", "prompt": f"p{i}",
              ("image" if name.endswith(".png") else "video"): name,
              "scores": {j: score(j, r) for j, r in scores.items()}, "reward": 0.5, "valid": True}
             for i, name in enumerate(media)]
    (run / "scores.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (run / "run.json").write_text(json.dumps({"input_root": str(inputs), "media_roots": [str(inputs)],
                                              "judges": list(scores)}))
    return run


_QUALITY = {"judge": "quality", "kind": "yes_no", "reward": 0.84, "raw": 0.8, "valid": True, "error": None,
           "details": {"p_yes": 0.8}, "latency_ms": 12.5, "model": "fake-yes",
           "template": {"id": "image_quality", "version": "1", "sha256": "ab" * 32}}
_TIMEOUT = {**_QUALITY, "reward": None, "raw": None, "valid": False,
           "error": {"code": "timeout", "message": "deadline 1 s passed"}}


def old_score_lines(keys: list[str]) -> list[dict]:
    """Lines of samples 0.png ... 3.png (content keys `keys`) as `score` wrote them before
    runs.ScoreLine, in their key order: done, bad input, a request error, a judge's timeout."""
    return [
        {"index": 0, "source": "0.png", "key": keys[0], "prompt": "a cat", "image": "0.png", "model": "gen-1",
         "checkpoint": "step-100", "group_id": None, "scores": {"quality": _QUALITY}, "reward": 0.84, "valid": True,
         "invalid_judges": [], "group_reward": None},
        {"index": 1, "source": "1.png", "key": keys[1], "prompt": "", "image": "1.png", "scores": {},
         "reward": None, "valid": False, "error": {"code": "bad_input", "message": "image: cannot decode"}},
        {"index": 2, "source": "2.png", "key": keys[2], "prompt": "a dog", "image": "2.png", "valid": False,
         "reward": None, "request_error": "ConnectError: connection refused"},
        {"index": 3, "source": "3.png", "key": keys[3], "prompt": "a cow", "image": "3.png", "group_id": None,
         "scores": {"quality": _TIMEOUT}, "reward": None, "valid": False, "invalid_judges": ["quality"],
         "group_reward": None},
    ]


# A line as the watch wrote it before runs.ScoreLine (its index and thumbnail set last).
OLD_WATCH_LINE = {"source": "watch:native", "key": "req-1:0", "prompt": "p", "run": "exp", "step": 3, "window": 0,
              "api": "native", "request_id": "req-1", "watched_at": 1700000000.5,
              "scores": {"quality": _QUALITY}, "reward": None, "valid": True,
              "watch": {"train": ["quality"], "shadows": [], "gap": None, "gap_pair": None},
              "index": 7, "image": "thumbs/00000007.jpg"}
