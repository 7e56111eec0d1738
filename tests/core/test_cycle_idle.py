"""A cycle that ``idle`` says has nothing to decide decides nothing.

Random snapshots (``tests.core.test_cycle_properties``), their queue kept or emptied,
the running work now and then suspended (some of it already being taken back), elastic
below its full size, holding backfill promises and victims draining for AppWrappers that
are gone: whenever ``idle`` is true, the full cycle's result is empty. Table cases name
what makes a cycle not idle.
"""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mcad.core.cycle.decide import Admitted, Snapshot, dispatch_cycle, idle
from mcad.core.cycle.snapshot import AppWrapperEntry, CycleResult, Hold, PendingReason
from mcad.core.placement.capacity import AppWrapperKey
from tests.builders.clusters import make_cluster
from tests.builders.snapshots import at, make_entry, make_snapshot
from tests.core.test_carried import with_promises
from tests.core.test_cycle_properties import snapshots

EMPTY = CycleResult(dispatches=(), pending=(), evictions=(), resizes=())


def varied(entry: AppWrapperEntry, data: st.DataObject) -> AppWrapperEntry:
    """A running AppWrapper, now and then suspended, draining, or elastic."""
    if not isinstance(entry.phase, Admitted):
        return entry
    choice = data.draw(st.sampled_from(["as is", "as is", "suspended", "draining",
                                        "suspended draining", "elastic"]))
    if "suspended" in choice:
        entry = dataclasses.replace(entry, hold=Hold(PendingReason.SUSPENDED, "suspended"))
    if "draining" in choice:
        entry = dataclasses.replace(entry, draining=True,
                                    draining_for=AppWrapperKey("ns/gone"))
    if choice == "elastic" and entry.demand is not None:
        entry = dataclasses.replace(entry, elastic_min=1,
                                    full_pods=entry.demand.pods + data.draw(st.integers(0, 2)))
    return entry


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots(), st.data())
def test_an_idle_cycle_decides_nothing(case: tuple[Snapshot, object],
                                       data: st.DataObject) -> None:
    snapshot = with_promises(case[0], data)
    entries = [varied(e, data) for e in snapshot.appwrappers]
    if data.draw(st.booleans()):  # the queue all dispatched
        entries = [e for e in entries if isinstance(e.phase, Admitted)]
    snapshot = dataclasses.replace(snapshot, appwrappers=tuple(entries))
    if idle(snapshot):
        event("idle")
        assert dispatch_cycle(snapshot) == EMPTY
    else:
        event("not idle")


def running_snapshot(*entries: AppWrapperEntry) -> Snapshot:
    return (make_snapshot(now=at(600)).clusters(make_cluster("spoke-1").nodes(2, gpu=8))
            .add(*entries).obj())


RUNNING = make_entry("running").job(gpu=2).admitted("spoke-1").obj()


def test_running_work_alone_is_idle() -> None:
    assert idle(running_snapshot(RUNNING))
    assert idle(running_snapshot())


def test_a_queued_one_or_a_suspended_or_elastic_running_one_is_not_idle() -> None:
    queued = make_entry("queued").job(gpu=2).obj()
    assert not idle(running_snapshot(RUNNING, queued))
    suspended = dataclasses.replace(RUNNING, hold=Hold(PendingReason.SUSPENDED, "suspended"))
    assert not idle(running_snapshot(suspended))
    assert dispatch_cycle(running_snapshot(suspended)).evictions != ()
    assert idle(running_snapshot(dataclasses.replace(suspended, draining=True)))
    elastic = dataclasses.replace(RUNNING, elastic_min=1, full_pods=2)
    assert not idle(running_snapshot(elastic))
    assert dispatch_cycle(running_snapshot(elastic)).resizes != ()
