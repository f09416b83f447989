"""What the reward-hacking tests share: the scene-quality head built for them (tiny_scene_clip.py),
and score streams read back from a watch record, to be fed to the statistics again."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from judge_gateway import runs
from judge_gateway.watch import Window
from tests.support.heads_env import heads_python
from tests.support.tiny_cache import cached_build

Row = dict[str, float | None]


def build_scene_clip() -> Path:
    """The scene-quality head's weights, trained once under the heads venv (cached: tiny_cache)."""
    return cached_build("scene-clip", python=heads_python(), module="tests.support.tiny_scene_clip",
                        marker="report.json", timeout=900)


def scene_judge(models: Path, **options) -> dict:
    """A `[judges.*]` entry: the `clip` head on the scene-quality weights."""
    return {"kind": "clip", "options": {
        "python": str(heads_python()), "library": "open_clip", "model": "jg-scene-clip",
        "pretrained": str(models / "openclip.pt"),
        "model_config_file": str(models / "openclip_cfg" / "jg-scene-clip.json"), **options}}


def recorded_rows(folder: Path) -> list[tuple[int | None, Row]]:
    """(step, judge -> reward or None) of every line a watch run recorded, in index order."""
    lines = sorted(runs.RunFolder(folder).read_objects(), key=lambda x: x["index"])
    return [(x.get("step"), {j: (s["reward"] if s.get("valid") else None) for j, s in x["scores"].items()})
            for x in lines]


def resampled_windows(pools: list[list[Row]], per_window: int, seed: int) -> list[Window]:
    """One window per pool, `per_window` rows drawn from it with replacement (a bootstrap run)."""
    rng = np.random.default_rng(seed)
    return [Window(number=n, opened_at=float(n), steps=[n, n],
                   rows=[pool[int(k)] for k in rng.integers(0, len(pool), per_window)])
            for n, pool in enumerate(pools)]
