"""The typed cosmos-rl store entries read what the gateway has always written: each kind of
entry, as a JSON object written by earlier versions, reads back and writes out byte-for-byte the
same; a pull over such stored entries answers as it always did; a pull starts no background work."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from judge_gateway.server.cosmos_rl.entry import (
    Accepted,
    DoneEntry,
    FailedEntry,
    PendingEntry,
    UnreadableEntry,
    read_entry,
)
from judge_gateway.store import MemoryStore
from tests.support.fault_gateway import fault_config

ENVELOPE = {"scores": {"overall_reward": [0.25, 0.75]}, "input_info": {}, "duration": "0.10",
            "decoded_duration": "0.00", "type": "quality", "valid": [True, True], "errors": [None, None]}

# Stored entries exactly as CosmosRLService wrote them (key order included).
WRITTEN = {
    "pending": '{"status": "pending", "owner": "4f1c", "accepted_at": 1700000000.5, "deadline": 1700000600.5, '
               '"rewards": ["quality"], "skipped": ["other"], "prompts": ["a cat", "a dog"], '
               '"watch": {"run": "exp1", "step": 7}}',
    "pending untagged": '{"status": "pending", "owner": "4f1c", "accepted_at": 1.0, "deadline": 2.0, '
                        '"rewards": ["quality"], "skipped": [], "prompts": [""]}',
    "done": '{"status": "done", "results": {"quality": ' + json.dumps(ENVELOPE) + '}, "skipped": ["other"], '
            '"finished_at": 1700000010.25}',
    "failed": '{"rewards": ["quality"], "skipped": [], "prompts": ["a cat", "a dog"], "status": "failed", '
              '"reason": "not finished within cosmos_rl.request_timeout_s = 600.0s", "code": "timeout", '
              '"finished_at": 1700000600.5}',
    "failed malformed": '{"status": "failed", "reason": "its queue entry is malformed: KeyError", '
                        '"code": "backend_error", "finished_at": 3.0}',
}


@pytest.mark.parametrize("kind", sorted(WRITTEN))
def test_every_entry_written_so_far_reads_and_writes_the_same_json(kind):
    raw = json.loads(WRITTEN[kind])
    entry = read_entry(raw)
    assert entry.status == raw["status"]
    assert json.dumps(entry.to_store()) == WRITTEN[kind]


def test_the_entries_read_as_their_fields():
    pending = read_entry(json.loads(WRITTEN["pending"]))
    assert pending == PendingEntry(Accepted(["quality"], ["other"], ["a cat", "a dog"]), "4f1c",
                                   1700000000.5, 1700000600.5, {"run": "exp1", "step": 7})
    done = read_entry(json.loads(WRITTEN["done"]))
    assert isinstance(done, DoneEntry) and done.results == {"quality": ENVELOPE} and done.skipped == ["other"]
    failed = read_entry(json.loads(WRITTEN["failed"]))
    assert isinstance(failed, FailedEntry) and failed.code == "timeout" and failed.accepted.prompts == ["a cat", "a dog"]
    with pytest.raises(UnreadableEntry, match="'running'"):
        read_entry({"status": "running"})


@pytest.fixture
async def served(fake_backend):
    gw = Gateway(validate_config(fault_config(fake_backend.base_url)))
    store = MemoryStore(ttl_s=600, max_entries=100)
    app = create_app(gw, store=store)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
        yield app, store, client
    await app.state.cosmos_rl.aclose()
    await gw.aclose()


async def _pull(client: httpx.AsyncClient, uid: str) -> httpx.Response:
    return await client.post("/api/reward/pull", data={"uuid": uid, "type": "quality"})


async def test_a_pull_answers_entries_stored_before_as_it_always_did(served):
    app, store, client = served
    done, failed, pending, odd = (str(uuid.uuid4()) for _ in range(4))
    await store.put(done, json.loads(WRITTEN["done"]))
    await store.put(failed, json.loads(WRITTEN["failed"]))
    mine = {**json.loads(WRITTEN["pending"]), "owner": app.state.cosmos_rl.instance, "deadline": time.time() + 600}
    await store.put(pending, mine)
    await store.put(odd, {"status": "running"})
    r_done, r_failed, r_pending, r_odd = [await _pull(client, uid) for uid in (done, failed, pending, odd)]
    assert r_done.status_code == 200 and r_done.json() == ENVELOPE
    # on_failed = fill: every sample invalid, the stored reason and code beside the filled lists
    assert r_failed.status_code == 200 and r_failed.json()["status"] == "failed"
    assert r_failed.json()["valid"] == [False, False] and r_failed.json()["reason"].startswith("not finished")
    assert r_pending.status_code == 425 and r_pending.json()["status"] == "pending"
    # no cosmos-rl entry: a failure with the reason (no prompts to fill), never a guess
    assert r_odd.status_code == 500 and "'running'" in r_odd.json()["reason"]


async def test_a_pull_starts_no_background_work(served):
    app, store, client = served
    service = app.state.cosmos_rl  # the lifespan has not run: nothing started
    r = await _pull(client, str(uuid.uuid4()))
    assert r.status_code == 404
    assert not service.heartbeat.running and service.jobs.tasks == {}
    assert await store.get(f"instance:{service.instance}") is None
