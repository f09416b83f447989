"""Shared pieces of the reliability suite (tests/reliability): a cosmos-rl gateway config whose
judge answers after the fake backend's stall (so requests are pending when a fault hits), the
checks that every accepted uuid resolved with a real result, and a figures line."""

from __future__ import annotations

import asyncio
import time

import httpx

from tests.support.cosmos_client import HEADERS, enqueue_body, image_batch


def slow_cosmos_config(base_url: str, redis_url: str, prefix: str, *, queue: bool,
                       visibility_timeout_s: float = 3.0, request_timeout_s: float = 120.0) -> dict:
    return {
        "backends": {"slow": {"model": "fake-stall", "base_urls": [base_url], "timeout_s": 60, "max_retries": 0}},
        "judges": {"slow": {"kind": "yes_no", "backend": "slow", "template": "image_quality@1"}},
        "store": {"kind": "redis", "url": redis_url, "url_env": None, "key_prefix": prefix, "persistence": "off",
                  "queue": {"enabled": queue, "visibility_timeout_s": visibility_timeout_s,
                            "claim_interval_s": 0.5}},
        "cosmos_rl": {"request_timeout_s": request_timeout_s},
    }


META = {"reward_fn": {"slow": 1.0}, "prompts": ["a red square", "a blue circle"], "media_type": "image"}


async def enqueue(client: httpx.AsyncClient, n: int) -> list[str]:
    uids = []
    for _ in range(n):
        r = await client.post("/api/reward/enqueue", content=enqueue_body(META, image_batch(2)),
                              headers=HEADERS)
        assert r.status_code == 200, r.text
        uids.append(r.json()["uuid"])
    return uids


async def resolve_all(client: httpx.AsyncClient, uids: list[str], timeout: float,
                      reward: str = "slow") -> dict[str, dict]:
    """Pull every uuid until it is final; 5xx (store unavailable) and pending (400) are retried,
    as cosmos-rl's trainer does."""
    deadline = time.monotonic() + timeout
    out: dict[str, dict] = {}
    while len(out) < len(uids):
        for uid in uids:
            if uid in out:
                continue
            try:
                r = await client.post("/api/reward/pull", data={"uuid": uid, "type": reward})
            except httpx.HTTPError:
                continue
            body = r.json()
            if r.status_code == 200 or body.get("status") in ("failed", "unknown", "expired"):
                out[uid] = {"code": r.status_code, **body}
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    return out


def lost(uids: list[str], results: dict[str, dict]) -> list[str]:
    """Accepted uuids without a real result: unresolved, failed, or any sample filled/invalid."""
    bad = []
    for uid in uids:
        body = results.get(uid)
        if (body is None or body["code"] != 200 or body.get("status") != "done"
                or not body.get("valid") or not all(body["valid"]) or any(body.get("filled_by") or [])):
            bad.append(uid)
    return bad


def figures(name: str, **values: object) -> None:
    print(f"\n[reliability] {name}: " + ", ".join(f"{k} = {v}" for k, v in values.items()), flush=True)
