"""The cosmos-rl service around its durable queue and its shutdown, with an in-memory stand-in
for the queue (the Redis side is in tests/reliability/test_durable_queue.py): a request handed out
too often is failed, a malformed entry or a bug never ends the consumer nor leaves an entry
pending, an entry claimed by another replica stops here, a pull while the store is down says when
to come back, and shutdown never overwrites a result."""

from __future__ import annotations

import asyncio
import json
import uuid

import httpx

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.config import QueueConfig
from judge_gateway.server import create_app
from judge_gateway.server.cosmos_rl import CosmosRLService
from judge_gateway.server.cosmos_rl.entry import Accepted, DoneEntry
from judge_gateway.server.cosmos_rl.pull import NeverAccepted
from judge_gateway.store import MemoryStore, StoreError
from judge_gateway.work_queue import QueuedWork
from tests.support.cosmos_client import enqueue_body, image_batch
from tests.support.fault_gateway import fault_config

META = {"reward_fn": {"quality": 1.0}, "prompts": ["a cat", "a dog"], "media_type": "image"}


class FakeQueue:
    def __init__(self, reads: list | None = None) -> None:
        self.cfg = QueueConfig(enabled=True, max_deliveries=3)
        self.reads = list(reads or [])  # what each read() gives (an exception is raised)
        self.read_calls = 0
        self.acked: list[str] = []

    async def read(self, count: int, block_ms: int) -> list[QueuedWork]:
        self.read_calls += 1
        answer = self.reads.pop(0) if self.reads else []
        if isinstance(answer, BaseException):
            raise answer
        await asyncio.sleep(0.01)
        return answer

    async def claim_idle(self, count: int) -> list[QueuedWork]:
        return []

    async def forget_dead_consumers(self, idle_s: float) -> list[str]:
        return []

    async def keep(self, entry_ids: list[str]) -> list[str]:
        return []

    async def done(self, entry_id: str) -> None:
        self.acked.append(entry_id)


def _service(backend_url: str, store, queue=None) -> tuple[Gateway, CosmosRLService]:
    cfg = validate_config(fault_config(backend_url))
    gw = Gateway(cfg)
    return gw, CosmosRLService(gw, store, cfg.cosmos_rl, queue=queue)


def _work(uid: str, body: bytes = b"", *, deliveries: int = 1, malformed: str | None = None) -> QueuedWork:
    return QueuedWork("1-0", uid, body, 4e9, claimed=deliveries > 1, deliveries=deliveries, malformed=malformed)


async def test_a_request_handed_out_past_max_deliveries_is_failed_and_acknowledged(fake_backend):
    store, queue = MemoryStore(ttl_s=60, max_entries=10), FakeQueue()
    gw, service = _service(fake_backend.base_url, store, queue)
    uid = str(uuid.uuid4())
    await store.put(uid, {"status": "pending", "rewards": ["quality"], "skipped": [], "prompts": ["a", "b"]})
    try:
        await service.consumer.run_queued(_work(uid, enqueue_body(META, image_batch(2)), deliveries=4))
        entry = await store.get(uid)
    finally:
        await service.aclose()
        await gw.aclose()
    assert entry["status"] == "failed" and entry["rewards"] == ["quality"] and entry["prompts"] == ["a", "b"]
    assert entry["reason"].startswith("handed out 4 times (store.queue.max_deliveries = 3)")
    assert queue.acked == ["1-0"]


async def test_a_malformed_entry_is_failed_and_the_consumer_goes_on(fake_backend):
    store = MemoryStore(ttl_s=60, max_entries=10)
    uid = str(uuid.uuid4())
    queue = FakeQueue(reads=[KeyError("deadline"), [_work(uid, malformed="KeyError: 'deadline'")]])
    gw, service = _service(fake_backend.base_url, store, queue)
    try:
        await service.start()
        for _ in range(500):  # the consumer backs off 0.2 s after the error, then reads on
            entry = await store.get(uid)
            if entry is not None and queue.acked:
                break
            await asyncio.sleep(0.01)
        consumer_alive = not service.consumer.task.done()
    finally:
        await service.aclose()
        await gw.aclose()
    assert consumer_alive and queue.read_calls >= 3
    assert entry["status"] == "failed" and entry["reason"] == "its queue entry is malformed: KeyError: 'deadline'"
    assert queue.acked == ["1-0"]


async def test_a_request_whose_preparation_breaks_is_failed_not_left_pending(fake_backend, monkeypatch):
    store, queue = MemoryStore(ttl_s=60, max_entries=10), FakeQueue()
    gw, service = _service(fake_backend.base_url, store, queue)

    async def broken(body: bytes, *, check_ready: bool = True):
        raise RuntimeError("a bug")

    monkeypatch.setattr(service.payloads, "prepare", broken)
    uid = str(uuid.uuid4())
    try:
        await service.consumer.run_queued(_work(uid, b"whatever"))
        entry = await store.get(uid)
    finally:
        await service.aclose()
        await gw.aclose()
    assert entry["status"] == "failed" and entry["reason"].endswith("RuntimeError: a bug")
    assert queue.acked == ["1-0"]


async def test_an_entry_claimed_by_another_replica_stops_here(fake_backend):
    gw, service = _service(fake_backend.base_url, MemoryStore(ttl_s=60, max_entries=10), FakeQueue())
    mine, lost = str(uuid.uuid4()), str(uuid.uuid4())
    never = asyncio.Event()
    service.jobs.track(mine, never.wait(), "1-0")
    service.jobs.track(lost, never.wait(), "2-0")
    try:
        service.consumer.stop_lost(["2-0"])
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        running = sorted(service.jobs.tasks)
    finally:
        await service.aclose()
        await gw.aclose()
    assert running == [mine]


class DownStore(MemoryStore):
    async def get(self, key):
        raise StoreError("redis GET failed: ConnectionError")


async def test_a_pull_while_the_store_is_down_says_when_to_retry(fake_backend):
    gw = Gateway(validate_config(fault_config(fake_backend.base_url)))
    app = create_app(gw, store=DownStore(ttl_s=60, max_entries=10))
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
            r = await client.post("/api/reward/pull", data={"uuid": str(uuid.uuid4()), "type": "quality"})
    finally:
        await app.state.cosmos_rl.aclose()
        await gw.aclose()
    assert r.status_code == 503 and r.headers["Retry-After"] == "2"
    assert r.json()["status"] == "unavailable"


async def test_shutdown_never_overwrites_a_result(fake_backend):
    store = MemoryStore(ttl_s=60, max_entries=10)
    gw, service = _service(fake_backend.base_url, store)
    stored, storing, running = (str(uuid.uuid4()) for _ in range(3))
    finished = asyncio.get_running_loop().create_future()
    finished.set_result(None)
    await store.put(stored, {"status": "done", "by": "its task"})
    service.jobs.tasks[stored] = finished  # finished; its done-callback has not run yet
    service.jobs.tasks[storing] = asyncio.ensure_future(asyncio.Event().wait())
    service.jobs.unstored[storing] = DoneEntry({"quality": {"by": "its task, write under way"}}, [], 1.0)
    service.jobs.tasks[running] = asyncio.ensure_future(asyncio.Event().wait())
    service.jobs.accepted[running] = Accepted(["quality"], [], ["a"])
    try:
        await service.aclose()
        got = {uid: await store.get(uid) for uid in (stored, storing, running)}
    finally:
        await gw.aclose()
    assert got[stored] == {"status": "done", "by": "its task"}
    assert got[storing] == {"status": "done", "results": {"quality": {"by": "its task, write under way"}},
                           "skipped": [], "finished_at": 1.0}
    assert got[running]["status"] == "failed" and got[running]["rewards"] == ["quality"]
    assert json.dumps(got[running]["reason"]) == json.dumps("the gateway shut down before finishing; enqueue it again")


async def test_a_pull_in_queue_mode_starts_no_consumer(fake_backend):
    store = MemoryStore(ttl_s=60, max_entries=10)
    gw, service = _service(fake_backend.base_url, store, FakeQueue())
    try:
        outcome = await service.pull(str(uuid.uuid4()), "quality")
        started = (service.consumer.task, service.heartbeat.running)
    finally:
        await service.aclose()
        await gw.aclose()
    assert isinstance(outcome, NeverAccepted)
    assert started == (None, False)  # the app's lifespan starts them (service.start), never a pull
