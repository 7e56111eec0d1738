"""A reservation backfill's promise through the gateway seam: persisted, read back, kept.

A whole controller over a scripted hub and a spoke of 4 nodes x 8 GPUs, with
``backfill: reservation``: ``a`` (3 x 8 GPUs, declares 10 minutes) runs; ``head``
(4 x 8 GPUs) waits and is promised the whole spoke when ``a`` is expected to end;
``small`` (one 8-GPU pod, declares 5 s) is backfilled on the free node, on the promise to
end by then. The dispatch persists that promise in ``status.backfillPromise`` and says
so in its message; a record made from the hub's object alone (what a new leader has
after a failover) reads it back into the cycle's entry. ``small`` never ends: when its
promise comes due, with nothing else happening, the reconciler's timer wakes the
dispatcher and ``small`` is evicted for the head (reason ``Preempted``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import pytest
import pytest_asyncio

from mcad.config import RunConfig
from mcad.controller import clock
from mcad.controller.records import AppWrapperRecord
from mcad.core.cycle.snapshot import BackfillPromise
from mcad.core.placement.capacity import AppWrapperKey
from mcad.gateway import watch as watch_module
from tests.controller.seam import (
    Hub,
    Running,
    SpokeJobs,
    job_appwrapper,
    run_controller,
    spoke_transport,
    until,
)

pytestmark = [pytest.mark.looptime, pytest.mark.asyncio(loop_scope="function")]
CONFIG = RunConfig(backfill="reservation", starvation_seconds=3600)


@pytest.fixture(autouse=True)
def fast_watch_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_module, "BACKOFF_MIN_S", 0.01)


def declaring(name: str, *, pods: int, expected: int, priority: int = 0) -> dict[str, Any]:
    obj = job_appwrapper(name, pods=pods)
    obj["spec"]["schedulingSpec"]["dispatchDuration"] = {"expected": expected}
    obj["spec"]["priority"] = priority
    obj["metadata"]["creationTimestamp"] = clock.rfc3339(clock.utcnow())
    return obj


def status_of(hub: Hub, name: str) -> dict[str, Any]:
    return dict(hub.get("ns", name).get("status") or {})


def condition(hub: Hub, name: str, kind: str) -> dict[str, Any]:
    return next((c for c in status_of(hub, name).get("conditions") or []
                 if c["type"] == kind), {})


def moment(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def backfilled(hub: Hub, jobs: SpokeJobs) -> datetime:
    """``a`` running on nodes 0-2, ``head`` waiting, ``small`` backfilled on node 3;
    returns ``head``'s reservation (``a``'s expected end)."""
    hub.add(declaring("a", pods=3, expected=600))
    await until("a running", lambda: status_of(hub, "a").get("state") == "Running"
                and "a" in jobs.jobs)
    for i in range(3):
        jobs.pod("a", i, node=f"n{i}")
    reservation = moment(status_of(hub, "a")["expectedEnd"])
    hub.add(declaring("head", pods=4, expected=60, priority=9))
    await until("head waiting",
                lambda: condition(hub, "head", "Queued").get("reason") == "InsufficientCapacity")
    hub.add(declaring("small", pods=1, expected=5))
    await until("small backfilled", lambda: status_of(hub, "small").get("state") == "Running"
                and "small" in jobs.jobs)
    jobs.pod("small", 0, node="n3")
    return reservation


@pytest_asyncio.fixture(loop_scope="function")
async def world() -> AsyncIterator[tuple[Hub, SpokeJobs, Running]]:
    hub, spoke = Hub(), spoke_transport()
    jobs = SpokeJobs(spoke)
    async for run in run_controller(hub, spoke, CONFIG):
        yield hub, jobs, run


async def test_the_promise_is_persisted_with_the_dispatch_and_read_back_from_the_hub(
        world: tuple[Hub, SpokeJobs, Running]) -> None:
    hub, jobs, _ = world
    reservation = await backfilled(hub, jobs)
    status = status_of(hub, "small")
    assert status["backfillPromise"] == {"head": "ns/head",
                                         "endBy": clock.rfc3339(reservation)}
    assert condition(hub, "small", "Dispatched")["message"] == (
        f"dispatched to cluster local by reservation backfill, on the promise to end by "
        f"{clock.rfc3339(reservation)}, when the room it takes is reserved for ns/head; "
        "still running then, it is evicted (Preempted)")
    # What a new leader has after a failover: the hub's object, nothing else.
    entry = AppWrapperRecord.of(hub.get("ns", "small")).core_entry(CONFIG)
    assert entry.backfill_promise == BackfillPromise(AppWrapperKey("ns/head"), reservation)
    a = AppWrapperRecord.of(hub.get("ns", "a")).core_entry(CONFIG)
    assert a.backfill_promise is None  # dispatched before any head waited: no promise


async def test_a_backfill_still_running_at_its_promise_is_evicted_when_it_comes_due(
        world: tuple[Hub, SpokeJobs, Running]) -> None:
    """Nothing happens between ``small``'s start and its promise: no event, no pod;
    the cycle at the promise runs because the reconciler's timer asks for it."""
    hub, jobs, _ = world
    reservation = await backfilled(hub, jobs)
    before = (reservation - clock.utcnow()).total_seconds()
    assert before > 500
    await asyncio.sleep(before - 5)
    assert condition(hub, "small", "Requeuing") == {}  # not a moment early
    await until("small evicted",
                lambda: condition(hub, "small", "Requeuing").get("reason") == "Preempted",
                within=30)
    late = (clock.utcnow() - reservation).total_seconds()
    assert 0 <= late <= 2, f"evicted {late:.1f}s after its promise came due"
    requeuing = condition(hub, "small", "Requeuing")
    assert requeuing["message"].startswith(
        "started by reservation backfill on the promise to end by ")
    assert "before the reservation of ns/head; still running at " in requeuing["message"]
    assert status_of(hub, "small")["preemptedBy"] == "ns/head"
