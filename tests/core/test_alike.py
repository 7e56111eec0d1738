"""Alike waiters answered once: the full cycle without a trace (``decide._settle_all``)
gives an AppWrapper alike (``Alike``) to one of its quota node that got a plain quota
wait the same wait without deciding it again. It must decide exactly what deciding each
one by one decides (``run_cycle`` with a trace, which the carried cycle uses).

The property test builds long queues of few shapes, so most entries are alike, then
mixes in what is per AppWrapper and read before the shortcut: holds, requeue pauses,
elastic minimums, cluster lists and selectors, closed namespaces, backfill promises
broken for one of them and victims draining for another."""

from __future__ import annotations

import dataclasses
import gc
from datetime import timedelta

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from mcad.core.cycle import decide as decide_module
from mcad.core.cycle.books import CycleBooks
from mcad.core.cycle.decide import (
    QUEUED,
    Admitted,
    AppWrapperEntry,
    CyclePolicy,
    Outcome,
    Snapshot,
    dispatch_cycle,
    run_cycle,
)
from mcad.core.cycle.snapshot import Alike, BackfillPromise, CycleResult, Hold, PendingReason
from mcad.core.placement.capacity import AppWrapperKey, ClusterName
from mcad.core.placement.clusters import ClusterSelector, PlacementPolicy
from mcad.core.placement.victims import PreemptionPolicy
from mcad.core.quota.forest import QuotaAssignment, QuotaForest, QuotaNodeSpec
from mcad.core.workload.resources import ResourceList
from tests.builders.clusters import make_cluster, pod_set
from tests.builders.snapshots import at, demand_of
from tests.core.test_cycle_properties import PROPERTY_SETTINGS, TREE, clusters


class _OneByOne:
    """A trace: ``run_cycle`` then decides every entry with ``decide``, no shortcut."""

    def started(self, books: CycleBooks) -> None:
        pass

    def decided(self, entry: AppWrapperEntry, assignment: QuotaAssignment | None,
                outcome: Outcome) -> None:
        pass


def one_by_one(snapshot: Snapshot) -> CycleResult:
    return run_cycle(snapshot, trace=_OneByOne())[1]


def decisions(result: CycleResult) -> tuple[object, ...]:
    return (result.dispatches, result.evictions, result.resizes,
            [(p.key, p.reason, p.message) for p in result.pending])


@st.composite
def crowds(draw: st.DrawFn) -> Snapshot:
    """A long queue of few shapes over a small quota, with the per-entry exceptions."""
    root = draw(st.integers(2, 16))
    specs = [QuotaNodeSpec(TREE, "root", None, ResourceList.of(gpu=root), True)]
    for name in ("a", "b"):
        specs.append(QuotaNodeSpec(TREE, name, "root",
                                   ResourceList.of(gpu=draw(st.integers(0, root))),
                                   draw(st.booleans())))
    forest, problems = QuotaForest.build(specs)
    assert not problems
    shapes = [(pods, gpu) for pods in (1, 2) for gpu in (1, 2, 4)]
    entries = []
    for i in range(draw(st.integers(5, 60))):
        pods, gpu = draw(st.sampled_from(shapes))
        odd = draw(st.integers(0, 14))
        admitted = draw(st.integers(0, 6)) == 0
        entry = AppWrapperEntry(
            key=AppWrapperKey(f"{draw(st.sampled_from(['ns', 'ns', 'other']))}/aw{i}"),
            uid=f"uid-{i:03d}", priority=draw(st.integers(0, 2)),
            created=at(draw(st.integers(0, 600))),
            demand=demand_of(pod_set(pods, gpu=gpu, cpu=1)),
            quota_labels={TREE: draw(st.sampled_from(["a", "a", "b"]))},
            phase=Admitted(ClusterName("c0")) if admitted else QUEUED,
            dispatched=at(0) if admitted else None,
            expected_runtime=draw(st.sampled_from([None, 100.0, 5000.0])),
            clusters=("c1",) if odd == 1 else (),
            cluster_selector=ClusterSelector(match_labels=(("region", "e"),))
            if odd == 2 else ClusterSelector(),
            hold=Hold(PendingReason.SUSPENDED, "suspended") if odd == 3 else None,
            not_before=at(draw(st.sampled_from([0, 5000]))) if odd == 4 else None,
            elastic_min=1 if odd == 5 and pods > 1 else None,
        )
        entries.append(entry)
    queued = [e.key for e in entries if not isinstance(e.phase, Admitted)]
    if queued:  # a promise to one of them come due, victims draining for another
        entries = [dataclasses.replace(e, backfill_promise=BackfillPromise(
                       draw(st.sampled_from(queued)), at(900) - timedelta(seconds=1)))
                   if isinstance(e.phase, Admitted) and draw(st.booleans()) else e
                   for e in entries]
        target = draw(st.sampled_from(queued))
        entries = [dataclasses.replace(e, draining=True, draining_for=target)
                   if isinstance(e.phase, Admitted) and draw(st.integers(0, 3)) == 0 else e
                   for e in entries]
    policy = CyclePolicy(draw(st.sampled_from(list(PlacementPolicy))),
                         PreemptionPolicy(priority=draw(st.booleans()),
                                          reclaim=draw(st.booleans())),
                         draw(st.sampled_from([0.0, 300.0])),
                         fair_sharing=draw(st.booleans()))
    return Snapshot(now=at(900), appwrappers=tuple(entries), clusters=draw(clusters()),
                    quota=forest, policy=policy)


@PROPERTY_SETTINGS
@given(crowds())
def test_alike_waiters_answered_once_decide_as_one_by_one(snapshot: Snapshot) -> None:
    full = dispatch_cycle(snapshot)
    assert decisions(full) == decisions(one_by_one(snapshot))
    waits = sum(p.reason == PendingReason.QUOTA_EXCEEDED for p in full.pending)
    event("many quota waits" if waits >= 10 else "few quota waits")


def _crowd(n: int) -> Snapshot:
    """``n`` alike AppWrappers of 2 GPUs under a quota node of 4, on room for all."""
    forest, _ = QuotaForest.build([QuotaNodeSpec(TREE, "a", None, ResourceList.of(gpu=4),
                                                 True)])
    cluster = make_cluster("c0").nodes(4, gpu=8, cpu=16).obj()
    entries = tuple(AppWrapperEntry(
        key=AppWrapperKey(f"ns/aw{i}"), uid=f"uid-{i:03d}", priority=0, created=at(i),
        demand=demand_of(pod_set(1, gpu=2, cpu=1)), quota_labels={TREE: "a"})
        for i in range(n))
    return Snapshot(now=at(900), appwrappers=entries, clusters=(cluster,), quota=forest,
                    policy=CyclePolicy())


def test_a_run_of_alike_waiters_is_decided_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two fit the quota of 4 GPUs; the third is decided (QuotaExceeded, the head); the
    fourth takes the plain wait and is remembered; the other 46 are answered from it."""
    snapshot = _crowd(50)
    settled = []
    real = decide_module._settle

    def counting(books: CycleBooks, entry: AppWrapperEntry,
                 known: QuotaAssignment | None) -> bool:
        settled.append(entry.key)
        return real(books, entry, known)

    monkeypatch.setattr(decide_module, "_settle", counting)
    result = dispatch_cycle(snapshot)
    answered_once = list(settled)
    assert decisions(result) == decisions(one_by_one(snapshot))
    waiting = [p for p in result.pending if p.reason == PendingReason.QUOTA_EXCEEDED]
    assert len(result.dispatches) + len(waiting) == 50, result.pending
    assert len({(p.reason, p.message) for p in waiting[1:]}) == 1
    assert answered_once == ["ns/aw0", "ns/aw1", "ns/aw2", "ns/aw3"]


def test_alike_entries_hold_one_object_and_none_stays_once_no_entry_does() -> None:
    def entry(name: str, **extra: object) -> AppWrapperEntry:
        return AppWrapperEntry(key=AppWrapperKey(name), uid=name, priority=0, created=at(0),
                               demand=demand_of(pod_set(1, gpu=777, cpu=1)),
                               **extra)  # type: ignore[arg-type]

    gc.collect()
    before = len(Alike.table)
    a, b, other = entry("ns/a"), entry("ns/b"), entry("other/c")
    assert a.alike is b.alike and a.alike is not None
    assert other.alike is not a.alike  # another namespace
    assert entry("ns/held", hold=Hold(PendingReason.SUSPENDED, "suspended")).alike is None
    assert entry("ns/paused", not_before=at(60)).alike is None
    assert entry("ns/elastic", elastic_min=1).alike is None
    assert len(Alike.table) == before + 2
    del a, b, other
    gc.collect()
    assert len(Alike.table) == before
