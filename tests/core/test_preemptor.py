"""The preemption part of the cycle alone: given the cycle's books, the plan it returns
(victims, shrinks, room held, the preemptor's sentence) or why it refuses; the books
themselves are left as they were (only the cycle applies plans)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from mcad.core.cycle import preemptor
from mcad.core.cycle.books import CycleBooks
from mcad.core.cycle.plans import PreemptionPlan, Refused
from mcad.core.cycle.snapshot import Admitted, AppWrapperEntry, Snapshot
from mcad.core.quota.forest import QuotaAssignment
from tests.builders.clusters import make_cluster
from tests.builders.quota import make_forest, make_tree
from tests.builders.snapshots import SnapshotBuilder, at, make_entry, make_snapshot


def books_for(snapshot: Snapshot) -> tuple[CycleBooks, AppWrapperEntry]:
    """The books as the cycle has them when it reaches the last queued entry."""
    books = CycleBooks(snapshot)
    books.hold_running([e for e in snapshot.appwrappers if isinstance(e.phase, Admitted)])
    queued = [e for e in snapshot.appwrappers if not isinstance(e.phase, Admitted)]
    return books, queued[-1]


def borrowed(*, priority_policy: bool = False, owner_priority: int = 10) -> SnapshotBuilder:
    """silver (quota 4) borrowed two 8-GPU gangs of gold's; gold's owner waits."""
    tree = (make_tree("q").node("root", gpu=16).child("gold", parent="root", gpu=12)
            .child("silver", parent="root", gpu=4))
    return make_snapshot(now=at(100)).clusters(
        make_cluster("spoke-1").nodes(2, gpu=8).held("default/borrower-a", 0, gpu=8)
        .held("default/borrower-b", 1, gpu=8).used(0, gpu=8).used(1, gpu=8)
    ).quota(make_forest(tree)).policy(priority=priority_policy, reclaim=True).add(
        make_entry("borrower-a").job(gpu=8).priority(1).labels(q="silver")
        .admitted("spoke-1").dispatched(at(1)),
        make_entry("borrower-b").job(gpu=8).priority(2).labels(q="silver")
        .admitted("spoke-1").dispatched(at(2)),
        make_entry("owner").job(gpu=8).priority(owner_priority).labels(q="gold"))


@dataclass
class QuotaCase:
    id: str
    snapshot: SnapshotBuilder
    want_evict: tuple[str, ...] = ()
    want_refusal: str | None = None
    want_turn: bool = True
    want_waiting: str = ""


QUOTA_CASES = [
    QuotaCase("reclaim: the lowest-priority borrower goes", borrowed(),
              want_evict=("default/borrower-a",),
              want_waiting="waiting for 1 AppWrapper (borrowing its quota) to be evicted: "
                           "default/borrower-a"),
    QuotaCase("no preemption policy: not applicable, no turn taken",
              borrowed().policy(reclaim=False), want_refusal="", want_turn=False),
    QuotaCase("priority alone never evicts higher priority: refused, the turn is used",
              borrowed(owner_priority=0).policy(priority=True), want_refusal=(
                  "no lower-priority AppWrapper can be evicted to make room")),
]


@pytest.mark.parametrize("case", QUOTA_CASES, ids=lambda c: c.id)
def test_for_quota(case: QuotaCase) -> None:
    books, owner = books_for(case.snapshot.obj())
    assert owner.demand is not None
    assignment = books.assignment(owner.quota_labels)
    assert isinstance(assignment, QuotaAssignment)
    usage_before = books.quota.usage("q", "root")
    plan = preemptor.for_quota(books, owner, owner.demand, assignment, books.everywhere)
    if case.want_refusal is not None:
        assert plan == Refused(case.want_refusal, took_turn=case.want_turn)
    else:
        assert isinstance(plan, PreemptionPlan)
        assert plan.evict == case.want_evict
        assert plan.waiting == case.want_waiting
        assert plan.charge_quota
    # The part plans; the books are untouched until the cycle applies the plan.
    assert books.quota.usage("q", "root") == usage_before
    assert (books.evictions, books.pending, books.evicted) == ([], [], set())


def full_spoke(*, draining_for: str | None = None, cluster: bool = True) -> SnapshotBuilder:
    """spoke-1: 4 nodes x 8 GPUs, all held by four priority-1 fillers (``draining_for``:
    the last two are being evicted for that AppWrapper; ``cluster=False``: their pods
    are gone already, the nodes of the last two are free)."""
    spoke = make_cluster("spoke-1").nodes(4, gpu=8)
    snapshot = make_snapshot(now=at(100)).policy(priority=True)
    for i in range(4):
        if cluster or i < 2:
            spoke.used(i, gpu=8).held(f"default/low-{i}", i, gpu=8)
        filler = make_entry(f"low-{i}").job(gpu=8).priority(1).admitted("spoke-1") \
            .dispatched(at(i))
        if draining_for and i >= 2:
            filler.draining(draining_for)
        snapshot.add(filler)
    return snapshot.clusters(spoke)


@dataclass
class CapacityCase:
    id: str
    snapshot: SnapshotBuilder
    want: tuple[str, ...] | Refused = field(default_factory=tuple)


CAPACITY_CASES = [
    CapacityCase("the two most recently dispatched go, and the room is held",
                 full_spoke().add(make_entry("urgent").job(pods=2, gpu=8).priority(100)),
                 want=("default/low-3", "default/low-2")),
    CapacityCase("nobody of lower priority: not applicable",
                 full_spoke().add(make_entry("peer").job(pods=2, gpu=8).priority(1)),
                 want=Refused()),
    CapacityCase("a gang that would not fit even with them all gone: the turn is used",
                 full_spoke().add(make_entry("huge").job(pods=5, gpu=8).priority(100)),
                 want=Refused(took_turn=True)),
]


@pytest.mark.parametrize("case", CAPACITY_CASES, ids=lambda c: c.id)
def test_for_capacity(case: CapacityCase) -> None:
    books, entry = books_for(case.snapshot.obj())
    assert entry.demand is not None
    free_before = books.board.pools[0].total
    plan = preemptor.for_capacity(books, entry, entry.demand, books.everywhere)
    if isinstance(case.want, Refused):
        assert plan == case.want
        return
    assert isinstance(plan, PreemptionPlan)
    assert sorted(plan.evict) == sorted(case.want)
    (room,) = plan.hold
    assert (room.cluster, sorted(h.key for h in room.leaving)) == (0, sorted(case.want))
    assert books.board.pools[0].total == free_before


@pytest.mark.parametrize(("pods_still_there", "waits"), [(True, True), (False, False)])
def test_while_victims_drain_it_holds_and_waits_until_they_are_gone(
        pods_still_there: bool, waits: bool) -> None:
    snapshot = full_spoke(draining_for="default/urgent", cluster=pods_still_there).add(
        make_entry("urgent").job(pods=2, gpu=8).priority(100)).obj()
    books, urgent = books_for(snapshot)
    assert urgent.demand is not None
    assignment = books.assignment({})
    assert isinstance(assignment, QuotaAssignment)
    plan = preemptor.while_victims_drain(books, urgent, urgent.demand, assignment,
                                         books.everywhere)
    if not waits:  # its victims' pods are gone: it is decided as anyone else
        assert plan is None
        return
    assert isinstance(plan, PreemptionPlan)
    assert plan.waiting == ("waiting for 2 evicted AppWrappers to go: default/low-2, "
                            "default/low-3")
    assert plan.evict == ()
    assert [(r.cluster, sorted(h.key for h in r.leaving)) for r in plan.hold] == [
        (0, ["default/low-2", "default/low-3"])]
