"""A colocated judge's unit (judge_gateway/residency/unit.py) against a driver whose sleep and wake
the test holds and releases: calls wait for a wake within their deadline, a sleep drains and never
drops work, failures are reported and recovered, the idle timer puts an unused judge to sleep."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from judge_gateway.backends import deadline_at
from judge_gateway.config import ResidencyConfig
from judge_gateway.residency import (
    Residency,
    ResidencyUnit,
    SleepBusy,
    SleepDriver,
    SleepFailed,
    SleepRefused,
    WakeFailed,
)


class HeldDriver(SleepDriver):
    """Sleeps and wakes when the test says (`release_*`), or fails as told."""

    label = "head 'fake'"

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.wake_gate = asyncio.Event()
        self.wake_gate.set()
        self.sleep_gate = asyncio.Event()
        self.sleep_gate.set()
        self.wake_error: Exception | None = None
        self.sleep_error: Exception | None = None
        self.recovered: list[str] = []
        self.asleep = False

    async def sleep(self, level: int) -> dict[str, Any]:
        self.calls.append(f"sleep{level}")
        await self.sleep_gate.wait()
        if self.sleep_error is not None:
            raise self.sleep_error
        self.asleep = True
        return {"method": "fake", "weights_bytes": 123}

    async def wake(self, level: int) -> dict[str, Any]:
        self.calls.append("wake")
        await self.wake_gate.wait()
        if self.wake_error is not None:
            raise self.wake_error
        self.asleep = False
        return {"method": "fake"}

    async def recover(self, reason: str) -> None:
        self.recovered.append(reason)


def unit_with(driver: HeldDriver, **cfg: Any) -> ResidencyUnit:
    settings = {"mode": "colocated", "idle_sleep_s": None, **cfg}
    residency = Residency()
    return residency.add("head:fake", ["fake"], ResidencyConfig(**settings), driver)


async def call(unit: ResidencyUnit, hold: asyncio.Event | None = None) -> str:
    async with unit.use():
        if hold is not None:
            await hold.wait()
        return unit.state


async def test_a_call_wakes_a_sleeping_judge_and_is_answered():
    driver = HeldDriver()
    unit = unit_with(driver)
    assert (await unit.sleep())["state"] == "asleep"
    assert unit.state == "asleep" and driver.asleep
    assert await call(unit) == "awake"
    assert driver.calls == ["sleep1", "wake"]
    assert unit.counts.wakes == 1 and unit.counts.last_wake_s is not None
    assert unit.in_flight == 0


async def test_calls_waiting_for_one_wake_share_it():
    driver = HeldDriver()
    unit = unit_with(driver)
    await unit.sleep()
    driver.wake_gate.clear()
    calls = [asyncio.create_task(call(unit)) for _ in range(5)]
    await asyncio.sleep(0)
    while unit.counts.waiting < 5 or unit.state != "waking":
        await asyncio.sleep(0.001)
    driver.wake_gate.set()
    assert await asyncio.gather(*calls) == ["awake"] * 5
    assert driver.calls.count("wake") == 1


async def test_a_sleep_waits_for_the_work_in_flight_and_holds_new_calls():
    driver = HeldDriver()
    unit = unit_with(driver, drain_timeout_s=10)
    hold = asyncio.Event()
    first = asyncio.create_task(call(unit, hold))
    while unit.in_flight == 0:
        await asyncio.sleep(0.001)
    sleeping = asyncio.create_task(unit.sleep())
    while unit.state != "draining":
        await asyncio.sleep(0.001)
    late = asyncio.create_task(call(unit))  # arrives during the drain: waits, is not admitted
    await asyncio.sleep(0.01)
    assert unit.in_flight == 1 and not late.done() and driver.calls == []
    hold.set()  # the call in flight finishes: it was never dropped
    assert await first == "draining"
    assert (await sleeping)["state"] == "asleep"
    assert await late == "awake"  # it woke the judge again
    assert driver.calls == ["sleep1", "wake"]


async def test_a_sleep_that_cannot_drain_in_time_is_refused_and_the_judge_stays_awake():
    driver = HeldDriver()
    unit = unit_with(driver, drain_timeout_s=0.05)
    hold = asyncio.Event()
    busy = asyncio.create_task(call(unit, hold))
    while unit.in_flight == 0:
        await asyncio.sleep(0.001)
    with pytest.raises(SleepRefused, match="1 call\\(s\\) still in flight after drain_timeout_s = 0.05"):
        await unit.sleep()
    assert unit.state == "awake" and driver.calls == [] and unit.counts.sleeps_refused == 1
    hold.set()
    assert await busy == "awake"


async def test_a_server_that_refuses_to_sleep_leaves_the_judge_awake():
    driver = HeldDriver()
    driver.sleep_error = SleepBusy("replica 1 of 1 refused to sleep now (HTTP 409)")
    unit = unit_with(driver)
    with pytest.raises(SleepRefused, match="refused to sleep now"):
        await unit.sleep()
    assert unit.state == "awake"
    assert await call(unit) == "awake"


async def test_a_failed_wake_fails_its_waiting_calls_with_the_reason_and_recovers():
    driver = HeldDriver()
    unit = unit_with(driver)
    await unit.sleep()
    driver.wake_error = RuntimeError("the server died during the wake")
    results = await asyncio.gather(*(call(unit) for _ in range(3)), return_exceptions=True)
    assert all(isinstance(r, WakeFailed) and "the server died during the wake" in str(r) for r in results)
    assert unit.state == "failed" and "the server died" in (unit.reason or "")
    await asyncio.sleep(0)
    assert driver.recovered and "the server died" in driver.recovered[0]
    assert unit.counts.wake_failures == 1
    driver.wake_error = None  # recovered: the next call tries again and is answered
    assert await call(unit) == "awake"


async def test_a_wake_past_wake_timeout_fails_and_recovers():
    driver = HeldDriver()
    unit = unit_with(driver, wake_timeout_s=0.05)
    await unit.sleep()
    driver.wake_gate.clear()  # it never finishes by itself
    started = time.monotonic()
    with pytest.raises(WakeFailed, match="no wake within wake_timeout_s = 0.05"):
        await call(unit)
    assert time.monotonic() - started < 2.0
    assert unit.state == "failed"


async def test_a_call_waits_for_a_slow_wake_only_until_its_own_deadline():
    driver = HeldDriver()
    unit = unit_with(driver, wake_timeout_s=60)
    await unit.sleep()
    driver.wake_gate.clear()
    started = time.monotonic()
    with deadline_at(time.monotonic() + 0.1):
        with pytest.raises(WakeFailed, match="did not wake in time for this call"):
            await call(unit)
    assert time.monotonic() - started < 1.0
    assert unit.state == "waking"  # the wake goes on for the calls that can still wait
    driver.wake_gate.set()
    assert await call(unit) == "awake"


async def test_a_sleep_that_fails_marks_the_judge_failed_then_a_call_wakes_it():
    driver = HeldDriver()
    driver.sleep_error = RuntimeError("CUDA error")
    unit = unit_with(driver)
    with pytest.raises(SleepFailed, match="CUDA error"):
        await unit.sleep()
    assert unit.state == "failed"
    await asyncio.sleep(0)
    assert driver.recovered
    assert await call(unit) == "awake"


async def test_the_idle_timer_puts_an_unused_judge_to_sleep_and_a_call_wakes_it():
    driver = HeldDriver()
    unit = unit_with(driver, idle_sleep_s=0.05)
    assert await call(unit) == "awake"  # starts the timer
    while unit.state != "asleep":
        await unit._event().wait()
    assert unit.counts.last["trigger"] == "idle"
    assert await call(unit) == "awake"
    await unit.aclose()


async def test_a_process_restarted_while_asleep_is_put_back_to_sleep():
    driver = HeldDriver()
    unit = unit_with(driver)
    await unit.sleep()
    unit.thing_restarted()  # a fresh worker loaded its model: the trainer still has the device
    while driver.calls.count("sleep1") < 2:
        await asyncio.sleep(0.001)
    assert unit.state == "asleep"
    await unit.aclose()


async def test_the_controller_reports_every_judge_and_refuses_resident_ones():
    driver = HeldDriver()
    residency = Residency()
    residency.add("head:fake", ["fake"], ResidencyConfig(mode="colocated", idle_sleep_s=None), driver)
    residency.add_resident("steady")
    results = await residency.sleep(None)
    assert results == {"fake": {"state": "asleep", "outcome": "done", "seconds": results["fake"]["seconds"]}}
    assert residency.info("fake").state == "asleep" and residency.info("steady").mode == "resident"
    with pytest.raises(ValueError, match="'steady' is resident"):
        residency.units_for(["steady"])
    assert [e.event for e in residency.timeline()] == ["sleep"]
    assert residency.readiness("fake", (True, None)) == (True, None)  # asleep is ready: a call wakes it
