"""Replica choice by media affinity (backends.BackendPool._pick) and request bodies with data URLs
spliced in (media/body.py)."""

from __future__ import annotations

import json
import time
from collections import Counter

from judge_gateway.backends import BackendPool
from judge_gateway.config import BackendConfig
from judge_gateway.media.body import DataURL, dumps


def pool(n: int = 3, max_concurrency: int = 4) -> BackendPool:
    urls = [f"http://replica-{i}:8000/v1" for i in range(n)]
    return BackendPool("vlm", BackendConfig(model="m", base_urls=urls, max_concurrency=max_concurrency))


def test_one_medium_goes_to_one_replica_and_media_spread_over_all() -> None:
    p = pool()
    assert len({p._pick(affinity=12345).base_url for _ in range(20)}) == 1
    spread = Counter(p._pick(affinity=key).base_url for key in range(3000))
    assert set(spread) == {r.base_url for r in p.replicas}
    assert min(spread.values()) > 800  # rendezvous hashing: ~1000 each


def test_a_full_or_ejected_preferred_replica_falls_back_to_the_least_loaded() -> None:
    p = pool(max_concurrency=2)
    preferred = p._pick(affinity=7)
    preferred.outstanding = 2  # every slot taken: its cache is not worth the wait
    others = [r for r in p.replicas if r is not preferred]
    others[0].outstanding = 1
    assert p._pick(affinity=7) is others[1]
    preferred.outstanding = 0
    preferred.ejected_until = time.monotonic() + 60
    assert p._pick(affinity=7) is not preferred
    # the key's next choice among the healthy ones stays stable while its first is away
    assert len({p._pick(affinity=7).base_url for _ in range(10)}) == 1


def test_no_affinity_is_least_loaded() -> None:
    p = pool()
    p.replicas[0].outstanding, p.replicas[1].outstanding = 3, 1
    assert p._pick() is p.replicas[2]


def test_bodies_splice_data_urls_and_equal_json_dumps() -> None:
    url = DataURL("data:image/png;base64," + "QUJD" * 1000)
    body = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "text", "text": 'a "quoted" prompt\nwith ünïcode and jg-media-0 in it'}]}],
        "top_logprobs": 20, "stop": None}
    out = dumps(body)
    assert json.loads(out) == json.loads(json.dumps(body))
    assert dumps({"no": ["media", 1, 2.5, True]}) == b'{"no":["media",1,2.5,true]}'
