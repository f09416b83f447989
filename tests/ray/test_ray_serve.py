"""Ray mode end to end on a two-node local Ray cluster (CPU only): the gateway ingress and the OCR
head as Serve deployments (2 replicas each), the real CPU vLLM server behind the VLM judge, the
shared Redis store. Same scores as one machine; ray-status; batching inside a head replica; and
one gateway replica and one OCR replica killed under a steady load.

Kept small for a 2-core machine: replicas reserve 0.5 logical CPUs; the load is 2 native clients
and one cosmos-rl trainer enqueueing every 1.5 s.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import io
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from judge_gateway import cli
from judge_gateway.config import RayConfig
from judge_gateway.exceptions import Unavailable
from judge_gateway.ray_mode import deploy as deploy_module
from judge_gateway.ray_mode.deploy import (
    GATEWAY_DEPLOYMENT,
    head_deployment_name,
    start_serve,
    status,
)
from tests.support.cosmos_client import HEADERS, enqueue_body, poll
from tests.support.fake_openai import free_port
from tests.support.heads_env import text_image_png
from tests.support.ray_cluster import (
    LocalRayCluster,
    gateway_test_config,
    kill_replica,
)
from tests.support.served_gateway import ServedGateway
from tests.support.toml_text import to_toml

pytestmark = pytest.mark.integration

APP = "judge-gateway"
OCR = head_deployment_name("ocr")
JUDGES = ["ocr", "image_quality"]
LOAD_SIZE = (288, 96)  # the kill run's images: small, so the 2 cores keep up with the load
CLEAR_SIZE = (384, 128)  # the parity test's: large enough for OCR to read them back exactly


def png_b64(text: str, size: tuple[int, int] = LOAD_SIZE) -> str:
    return base64.b64encode(text_image_png(text, size)).decode()


def text_pixels(texts: list[str], size: tuple[int, int] = LOAD_SIZE) -> np.ndarray:
    """npy uint8 [B, H, W, 3], as cosmos-rl's image clients send."""
    return np.stack([np.asarray(Image.open(io.BytesIO(text_image_png(t, size))).convert("RGB"))
                     for t in texts])


@dataclass
class Deployed:
    url: str
    data: dict[str, Any]
    cluster: LocalRayCluster


async def wait_healthy(url: str, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(base_url=url, timeout=5) as http:
        while True:
            try:
                if (await http.get("/healthz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the Serve application did not answer /healthz"
            await asyncio.sleep(0.5)


@pytest.fixture(scope="module")
async def deployed(vllm, redis_server, tmp_path_factory):
    cluster = LocalRayCluster()
    try:
        data = gateway_test_config(vllm.base_url, redis_server.url, free_port())
        # The batching test sends 24 requests at once to two CPU OCR replicas: on a loaded 2-core
        # machine some wait longer than admission's default 10 s (then 429); admission has its own tests.
        data.setdefault("server", {}).setdefault("admission", {})["max_wait_s"] = 120.0
        path = tmp_path_factory.mktemp("ray-config") / "gateway.toml"
        path.write_text(to_toml(data))
        # The one deploy command (this process already joined the cluster, as `ray.init` would).
        assert await asyncio.to_thread(cli.main, ["serve", "--config", str(path), "--ray", cluster.address]) == 0
        url = f"http://127.0.0.1:{data['ray']['http_port']}"
        await wait_healthy(url)
        # Load the OCR model in both head replicas before anything is timed.
        async with httpx.AsyncClient(base_url=url, timeout=300) as http:
            body = {"samples": [{"prompt": 'a sign that says "warm"', "image": png_b64("warm")}], "judges": ["ocr"]}
            replies = await asyncio.gather(*(http.post("/v1/rewards", json=body) for _ in range(8)))
        assert all(r.status_code == 200 for r in replies), [r.text for r in replies]
        yield Deployed(url, data, cluster)
    finally:
        cluster.shutdown()


def comparable(doc: Any) -> Any:
    """A reply without what differs between any two runs: ids and timings."""
    if isinstance(doc, dict):
        return {k: comparable(v) for k, v in doc.items()
                if k not in ("id", "timings", "latency_ms", "duration", "decoded_duration")}
    if isinstance(doc, list):
        return [comparable(v) for v in doc]
    return doc


def differences(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in differences(a.get(k, "<missing>"), b.get(k, "<missing>"), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [(path, a, b)]


async def test_ray_mode_gives_the_scores_of_one_machine(deployed):
    """Same inputs, same reply (schema and numbers) from the Serve ingress and from `serve` on one
    machine, for the native API and for cosmos-rl pulls."""
    local = ServedGateway({k: v for k, v in deployed.data.items() if k != "ray"})
    texts = ["Hello World", "Goodbye Moon", "RAY SERVE"]
    native = {"samples": [{"prompt": 'a sign that says "Hello World"', "image": png_b64(t, CLEAR_SIZE)}
                          for t in texts]
              + [{"prompt": "a sign with no quoted text", "image": png_b64("plain", CLEAR_SIZE)}], "judges": JUDGES}
    meta = {"reward_fn": {"ocr": 1.0, "image_quality": 1.0}, "media_type": "image",
            "prompts": [f'a sign that says "{t}"' for t in texts]}
    replies: dict[str, Any] = {}
    try:
        for mode, url in (("ray", deployed.url), ("one_machine", local.url)):
            async with httpx.AsyncClient(base_url=url, timeout=300) as http:
                # Both warm (a head judge names its model once its worker has loaded it).
                warm = {"samples": [{"prompt": 'a sign that says "warm"', "image": png_b64("warm")}], "judges": JUDGES}
                assert (await http.post("/v1/rewards", json=warm)).status_code == 200
                r = await http.post("/v1/rewards", json=native)
                assert r.status_code == 200, r.text
                e = await http.post("/api/reward/enqueue", content=enqueue_body(meta, text_pixels(texts, CLEAR_SIZE)),
                                    headers=HEADERS)
                assert e.status_code == 200, e.text
                pulls = {name: (await poll(http, e.json()["uuid"], name, timeout=300, interval=0.2)).json()
                         for name in meta["reward_fn"]}
            replies[mode] = {"native": r.json(), "cosmos": pulls}
    finally:
        local.stop()
    ray_reply, one = replies["ray"], replies["one_machine"]
    assert not differences(comparable(ray_reply), comparable(one))
    # and the numbers are real: the right text reads back, the VLM judge scored every sample
    results = ray_reply["native"]["results"]
    assert results[0]["scores"]["ocr"]["reward"] == 1.0 and results[1]["scores"]["ocr"]["reward"] < 1.0
    assert results[3]["scores"]["ocr"]["error"]["code"] == "not_applicable"
    assert all(r["scores"]["image_quality"]["valid"] for r in results)
    assert ray_reply["cosmos"]["ocr"]["valid"] == [True, True, True]
    print("\nparity: native rewards", [r["reward"] for r in results],
          "cosmos-rl ocr", ray_reply["cosmos"]["ocr"]["scores"],
          "image_quality", ray_reply["cosmos"]["image_quality"]["scores"])


async def test_ray_status_shows_deployments_replicas_and_queue_depths(deployed, capsys):
    assert cli.main(["ray-status", "--json"]) == 0  # connects to the cluster this process joined
    report = json.loads(capsys.readouterr().out)
    assert report["application"] == APP and report["status"] == "RUNNING"
    deployments = {d["name"]: d for d in report["deployments"]}
    assert set(deployments) == {GATEWAY_DEPLOYMENT, OCR}
    for d in deployments.values():
        assert d["status"] == "HEALTHY" and len(d["replicas"]) == 2
        assert all(r["state"] == "RUNNING" and isinstance(r["ongoing_requests"], int) and r["pid"]
                   for r in d["replicas"])
        assert d["queue_depth"] == sum(r["ongoing_requests"] for r in d["replicas"])


def test_a_proxy_that_misses_its_first_ready_check_is_waited_for_not_a_failed_deploy(deployed, monkeypatch):
    """On a busy head node Serve's first proxy can miss its 5 s ready check; Serve kills it, starts
    another, and `serve.start` raises ActorDiedError (a CI run failed so). `start_serve` waits for the
    controller's proxy: here the first `serve.start` raises that error, as Serve does, and the
    cluster's running proxy is the replacement."""
    import ray
    from ray import serve

    real_start = serve.start
    calls = []

    def start_failing_once(*args, **kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise ray.exceptions.ActorDiedError()
        return real_start(*args, **kwargs)

    monkeypatch.setattr(deploy_module.serve, "start", start_failing_once)
    rc = RayConfig(http_port=deployed.data["ray"]["http_port"])
    start_serve(rc, wait_s=60)
    assert len(calls) == 2 and calls[1]["proxy_location"] == "HeadOnly"
    assert any(str(getattr(s, "value", s)) == "HEALTHY" for s in serve.status().proxies.values())

    # No proxy ever healthy: a clear Unavailable naming the first failure, after the wait.
    monkeypatch.setattr(deploy_module.serve, "status", lambda: type("S", (), {"proxies": {"n": "UNHEALTHY"}})())
    calls.clear()
    with pytest.raises(Unavailable, match=r"did not become healthy within 2 s.*ActorDiedError.*UNHEALTHY"):
        start_serve(rc, wait_s=2)


async def test_requests_from_many_clients_are_batched_inside_a_head_replica(deployed):
    from ray import serve

    handle = serve.get_deployment_handle(OCR, app_name=APP)

    async def per_replica() -> dict[int, dict[str, int]]:
        seen: dict[int, dict[str, int]] = {}
        for _ in range(40):  # Serve picks a replica per call: ask until both answered
            s = await handle.stats.remote()
            seen[s["pid"]] = s["worker"]["batch_sizes"]
            if len(seen) == 2:
                break
        assert len(seen) == 2, seen
        return seen

    before = await per_replica()
    body = {"samples": [{"prompt": 'a sign that says "batch"', "image": png_b64("batch")}], "judges": ["ocr"]}
    async with httpx.AsyncClient(base_url=deployed.url, timeout=300) as http:
        replies = await asyncio.gather(*(http.post("/v1/rewards", json=body) for _ in range(24)))
    assert all(r.status_code == 200 and r.json()["results"][0]["valid"] for r in replies), \
        [(r.status_code, r.text[:300]) for r in replies if r.status_code != 200 or not r.json()["results"][0]["valid"]]
    after = await per_replica()
    grown = {pid: {int(k): v - before[pid].get(k, 0) for k, v in sizes.items() if v - before[pid].get(k, 0)}
             for pid, sizes in after.items()}
    items = sum(k * v for sizes in grown.values() for k, v in sizes.items())
    assert items == 24, grown  # every one-sample request scored once, in one of the two replicas
    assert max(k for sizes in grown.values() for k in sizes) > 1, grown  # requests shared forward passes
    print("\nbatches per OCR replica (size: count):", grown)


# ---- one gateway replica and one OCR replica killed under a steady load ----------------------

LOAD_S = 100.0
KILL_GATEWAY_AT = 30.0
KILL_OCR_AT = 45.0
WINDOW_S = 5.0
NATIVE_CLIENTS = 2
ENQUEUE_EVERY_S = 6.0
BURST = 6  # enqueues sent together BURST_LEAD_S before the gateway kill
BURST_LEAD_S = 1.5
# A request in flight on a gateway replica that dies gets Serve's proxy's 500 at once (the proxy
# never re-sends an HTTP request); scoring is idempotent, so the client sends it again, as a
# trainer's client does.
NATIVE_TRIES = 3
REPLACE_WAIT_S = 300.0
RECOVERED_S = 25.0


@dataclass
class NativeCall:
    started: float
    ended: float
    outcome: str  # the final HTTP status, or the client-side exception's name
    valid: bool = False
    failed_tries: list[tuple[float, str]] = field(default_factory=list)  # (ended, outcome) of tries sent again


@dataclass
class KillRun:
    native: list[NativeCall] = field(default_factory=list)
    enqueues: list[tuple[float, str]] = field(default_factory=list)  # (t, final status)
    failed_enqueue_tries: list[tuple[float, str]] = field(default_factory=list)  # (ended, outcome) sent again
    uuids: list[tuple[float, str]] = field(default_factory=list)
    pulls: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    killed: dict[str, str] = field(default_factory=dict)  # deployment -> replica id
    killed_pids: dict[str, int] = field(default_factory=dict)
    pid_gone_after_s: dict[str, float | None] = field(default_factory=dict)
    depth_samples: list[dict[str, int]] = field(default_factory=list)
    replicas_after: dict[str, int] = field(default_factory=dict)
    replaced_after_s: float = 0.0  # seconds past the run's end until both replacements were RUNNING
    recovered: KillRun | None = None  # the same load again once the replacements run (no kills)

    def recovered_after_s(self) -> dict[str, float | None]:
        """Per kill: seconds until the next native reply came back scored (the gap in service)."""
        out: dict[str, float | None] = {}
        for deployment, at in ((GATEWAY_DEPLOYMENT, KILL_GATEWAY_AT), (OCR, KILL_OCR_AT)):
            ends = [c.ended for c in self.native if c.ended >= at and c.outcome == "200" and c.valid]
            out[deployment] = round(min(ends) - at, 1) if ends else None
        return out

    def completions(self, start: float, end: float) -> int:
        return sum(1 for c in self.native if c.outcome == "200" and c.valid and start <= c.ended < end)

    def recovered_per_s(self) -> float:
        return self.recovered.completions(0.0, RECOVERED_S) / RECOVERED_S if self.recovered else 0.0


async def _native_client(http: httpx.AsyncClient, run: KillRun, t0: float, stop: float, k: int) -> None:
    n = 0
    while time.monotonic() - t0 < stop:
        text = f"LOAD {k}{n % 10}"
        body = {"samples": [{"prompt": f'a sign that says "{text}"', "image": png_b64(text)}], "judges": JUDGES}
        call = NativeCall(time.monotonic() - t0, 0.0, "")
        for _ in range(NATIVE_TRIES):
            try:
                r = await http.post("/v1/rewards", json=body)
                call.outcome = str(r.status_code)
                call.valid = r.status_code == 200 and all(s["valid"] for s in r.json()["results"][0]["scores"].values())
            except httpx.HTTPError as exc:
                call.outcome = type(exc).__name__
            call.ended = time.monotonic() - t0
            if call.outcome == "200" or call.outcome.startswith("4"):
                break
            call.failed_tries.append((call.ended, call.outcome))
        run.native.append(call)
        n += 1


async def _enqueue(http: httpx.AsyncClient, run: KillRun, t0: float, name: str) -> None:
    """One trainer enqueue, sent again on a 5xx or a transport error as cosmos-rl's trainer does
    (``make_request_with_retry`` around ``requests.post``); the final status is what counts."""
    texts = [f"TRAIN {name}A", f"TRAIN {name}B"]
    meta = {"reward_fn": {"ocr": 1.0, "image_quality": 1.0}, "media_type": "image",
            "prompts": [f'a sign that says "{t}"' for t in texts]}
    t = time.monotonic() - t0
    outcome = ""
    for _ in range(NATIVE_TRIES):
        try:
            r = await http.post("/api/reward/enqueue", content=enqueue_body(meta, text_pixels(texts)), headers=HEADERS)
            outcome = str(r.status_code)
        except httpx.HTTPError as exc:
            outcome = type(exc).__name__
        if outcome == "200" or outcome.startswith("4"):
            break
        run.failed_enqueue_tries.append((time.monotonic() - t0, outcome))
    run.enqueues.append((t, outcome))
    if outcome == "200":
        run.uuids.append((t, r.json()["uuid"]))


async def _trainer(http: httpx.AsyncClient, run: KillRun, t0: float, stop: float) -> None:
    n = 0
    while time.monotonic() - t0 < stop:
        await _enqueue(http, run, t0, str(n))
        n += 1
        await asyncio.sleep(ENQUEUE_EVERY_S)


async def _burst(http: httpx.AsyncClient, run: KillRun, t0: float) -> None:
    """Enqueues just before the gateway kill, so the killed replica surely holds accepted work
    that is not scored yet (what a dead replica must not lose)."""
    await asyncio.sleep(max(0.0, KILL_GATEWAY_AT - BURST_LEAD_S - (time.monotonic() - t0)))
    await asyncio.gather(*(_enqueue(http, run, t0, f"burst{i}") for i in range(BURST)))


async def _killer(run: KillRun, t0: float) -> None:
    for at, deployment in ((KILL_GATEWAY_AT, GATEWAY_DEPLOYMENT), (KILL_OCR_AT, OCR)):
        await asyncio.sleep(max(0.0, at - (time.monotonic() - t0)))
        _, deployments = await asyncio.to_thread(status, APP)
        victim = next(r for d in deployments if d.name == deployment for r in d.replicas if r.state == "RUNNING")
        await asyncio.to_thread(kill_replica, f"SERVE_REPLICA::{APP}#{deployment}#{victim.replica_id}")
        run.killed[deployment] = victim.replica_id
        assert victim.pid is not None
        run.killed_pids[deployment] = victim.pid
        run.pid_gone_after_s[deployment] = await pid_gone_after(victim.pid)


async def pid_gone_after(pid: int, timeout_s: float = 10.0) -> float | None:
    """Seconds until the process is gone (both nodes are on this machine), None if it stays."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        try:
            os.kill(pid, 0)
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return time.monotonic() - started
        except (ProcessLookupError, OSError):
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    return None


async def _depths(run: KillRun, t0: float, stop: float) -> None:
    while time.monotonic() - t0 < stop:
        _, deployments = await asyncio.to_thread(status, APP)
        run.depth_samples.append({d.name: d.queue_depth for d in deployments})
        await asyncio.sleep(5.0)


@pytest.fixture(scope="module")
async def kill_run(deployed) -> KillRun:
    run = KillRun()
    t0 = time.monotonic()
    async with httpx.AsyncClient(base_url=deployed.url, timeout=180) as http:
        await asyncio.gather(*(_native_client(http, run, t0, LOAD_S, k) for k in range(NATIVE_CLIENTS)),
                             _trainer(http, run, t0, LOAD_S), _burst(http, run, t0), _killer(run, t0),
                             _depths(run, t0, LOAD_S))
        # The trainer pulls every accepted uuid, each reward, until a final answer.
        for _, uid in run.uuids:
            for name in ("ocr", "image_quality"):
                run.pulls[(uid, name)] = (await poll(http, uid, name, timeout=300, interval=0.5)).json()
        # Serve starts a replacement for each killed replica; on 2 cores shared with the other test
        # stream a replacement (an import of torch and a model load) can take minutes, so the count
        # is read when both are back or after REPLACE_WAIT_S, and the wait is printed.
        started = time.monotonic()
        while True:
            _, deployments = await asyncio.to_thread(status, APP)
            run.replicas_after = {d.name: sum(r.state == "RUNNING" for r in d.replicas) for d in deployments}
            if run.replicas_after == {GATEWAY_DEPLOYMENT: 2, OCR: 2} or time.monotonic() - started > REPLACE_WAIT_S:
                break
            await asyncio.sleep(2.0)
        run.replaced_after_s = round(time.monotonic() - started, 1)
        # The same load again once the replacements run: the throughput the deployment recovered to
        # (the run's last seconds may still hold the replacements' start-up on the shared cores).
        recovered = KillRun()
        t1 = time.monotonic()
        await asyncio.gather(*(_native_client(http, recovered, t1, RECOVERED_S, k) for k in range(NATIVE_CLIENTS)))
        run.recovered = recovered
    _print_figures(run)
    return run


def _print_figures(run: KillRun) -> None:
    windows = [run.completions(s, s + WINDOW_S) for s in np.arange(0, LOAD_S, WINDOW_S)]
    outcomes = collections.Counter(c.outcome + ("" if c.valid or c.outcome != "200" else " (invalid)")
                                   for c in run.native)
    resolved = sum(1 for p in run.pulls.values() if p.get("valid") and all(p["valid"]) and p.get("status") != "failed")
    print(f"\nkill run: {LOAD_S:.0f} s, gateway replica killed at {KILL_GATEWAY_AT:.0f} s, "
          f"OCR replica at {KILL_OCR_AT:.0f} s; killed {run.killed} (pids {run.killed_pids}, gone after "
          f"{run.pid_gone_after_s} s)")
    latencies = sorted(c.ended - c.started for c in run.native)
    print(f"  native requests: {len(run.native)}, outcomes {dict(outcomes)}, latency p50 "
          f"{latencies[len(latencies) // 2]:.1f} s, max {latencies[-1]:.1f} s; sent again: "
          f"{[t for c in run.native for t in c.failed_tries]}")
    print(f"  completed per {WINDOW_S:.0f} s window: {windows}; next scored reply after each kill in s: "
          f"{run.recovered_after_s()}; completed per s before the kills "
          f"{run.completions(5.0, KILL_GATEWAY_AT) / (KILL_GATEWAY_AT - 5.0):.2f}, in the last 25 s "
          f"{run.completions(LOAD_S - 25.0, LOAD_S) / 25.0:.2f}")
    print(f"  cosmos-rl enqueues {collections.Counter(s for _, s in run.enqueues)} ({BURST} of them "
          f"{BURST_LEAD_S} s before the gateway kill), sent again: {run.failed_enqueue_tries}; accepted uuids {len(run.uuids)}; (uuid, reward) pulls resolved with a real result: {resolved}/{len(run.pulls)}")
    failed = [(uid, name, p.get("reason")) for (uid, name), p in run.pulls.items() if p.get("status") == "failed"]
    if failed:
        print(f"  failed pulls: {len(failed)}, e.g. {failed[:2]}")
    print(f"  queue depths every 5 s: {run.depth_samples}")
    print(f"  RUNNING replicas after: {run.replicas_after} ({run.replaced_after_s} s past the run's end); "
          f"then completed per s over {RECOVERED_S:.0f} s: {run.recovered_per_s():.2f}")


def test_kill_run_every_native_request_returns(kill_run):
    assert kill_run.killed.keys() == {GATEWAY_DEPLOYMENT, OCR}
    # gone, not lingering (the figure is printed; seconds on 2 shared cores are not asserted tightly)
    assert all(s is not None and s < 60 for s in kill_run.pid_gone_after_s.values()), kill_run.pid_gone_after_s
    assert kill_run.native and all(c.ended - c.started < 180 for c in kill_run.native)
    bad = [c for c in kill_run.native if not (c.outcome == "200" and c.valid)]
    assert not bad, bad
    # Only requests in flight on the killed gateway replica were answered with an error (at the
    # kill, not after a wait), and the OCR replica's death cost no request anything.
    failed_tries = [t for c in kill_run.native for t in c.failed_tries]
    # Order, not seconds: every failed try ended after the gateway kill and before the OCR kill.
    assert all(KILL_GATEWAY_AT <= ended < KILL_OCR_AT for ended, _ in failed_tries), failed_tries


def test_kill_run_every_accepted_uuid_resolves_with_a_real_result(kill_run):
    """The issue's bar: no fill, no "failed" for any uuid the gateway accepted."""
    assert len(kill_run.uuids) >= 15
    bad = {key: (p.get("status"), p.get("reason")) for key, p in kill_run.pulls.items()
           if p.get("status") == "failed" or not p.get("valid") or not all(p["valid"])}
    assert not bad, f"{len(bad)} of {len(kill_run.pulls)} pulls: {list(bad.items())[:3]}"
    refused = [s for _, s in kill_run.enqueues if s != "200"]
    assert not refused, refused
    # An enqueue in flight on the killed gateway replica gets the proxy's 500 (its body may or may
    # not have reached the queue: the uuid never reached the client); the trainer sends it again.
    # Only at the gateway kill, never at the OCR kill or elsewhere.
    tries = kill_run.failed_enqueue_tries
    assert all(KILL_GATEWAY_AT <= ended < KILL_OCR_AT for ended, _ in tries), tries


def test_kill_run_throughput_recovers_and_serve_replaces_the_replicas(kill_run):
    before = kill_run.completions(5.0, KILL_GATEWAY_AT) / (KILL_GATEWAY_AT - 5.0)
    # Served on after both kills: a scored reply that ended after the OCR kill. A call sent within
    # the load counts when it ends past LOAD_S: on the 2 cores shared with the other test stream a
    # reply right after a kill can take longer than the rest of the load (a CI-like run had none
    # end inside it), and the load's end is the client's, not the deployment's.
    assert kill_run.completions(KILL_OCR_AT, math.inf) > 0
    assert kill_run.replicas_after == {GATEWAY_DEPLOYMENT: 2, OCR: 2}
    after = kill_run.recovered_per_s()
    assert before > 0 and after >= 0.25 * before, (before, after)  # recovers: same order of magnitude
    # The gap after the gateway kill includes the burst's backlog (12 images just enqueued, and the
    # dead replica's calls still queued in the heads) on the machine's 2 shared cores.
    # a scored reply after each kill, within the run (the gaps are printed)
    assert all(r is not None for r in kill_run.recovered_after_s().values()), kill_run.recovered_after_s()
    assert max(sum(s.values()) for s in kill_run.depth_samples) > 0  # ray-status saw work queued
