"""What is decided ahead of the queue is what the full cycle decides first.

A property test drives random queues without quota trees through a run of cycles (as
``tests.core.test_carried`` does: dispatches become running work, pods bind and end,
running work completes, nodes change, backfill promises come due) and, before each
cycle, one to three AppWrappers arrive, some outranking the queue, some tied with its
top. Whenever ``decide_ahead`` takes a decision, each of its dispatches must be, to the
placement, one the full cycle makes, and the full cycle must dispatch none of those
AppWrappers otherwise. Table cases show when nothing is decided ahead.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mcad.core.cycle.ahead import ahead_of_queue, decide_ahead
from mcad.core.cycle.decide import QUEUED, Admitted, AppWrapperEntry, Snapshot, dispatch_cycle
from mcad.core.cycle.snapshot import Hold, PendingReason
from mcad.core.placement.capacity import AppWrapperKey
from mcad.core.quota.forest import QuotaForest
from tests.builders.clusters import make_cluster, pod_set
from tests.builders.quota import make_tree
from tests.builders.snapshots import at, demand_of, make_entry, make_snapshot
from tests.core.histories import on_the_clusters
from tests.core.test_carried import applied, arrivals, bound_on, with_promises
from tests.core.test_cycle_properties import NAMESPACES, TREE, snapshots

NO_TREES, _ = QuotaForest.build([])


@st.composite
def urgent(draw: st.DrawFn, first: int) -> list[AppWrapperEntry]:
    """One to three arrivals of priority 3 (the queue's top: tied), 5 or 9, each of a
    quota node of the random snapshots' tree (or of none it knows)."""
    out = []
    for i in range(draw(st.integers(1, 3))):
        n = first + i
        out.append(AppWrapperEntry(
            key=AppWrapperKey(f"{draw(NAMESPACES)}/urgent{n}"), uid=f"uid-urgent{n}",
            priority=draw(st.sampled_from([3, 5, 9])), created=at(draw(st.integers(0, 3000))),
            demand=demand_of(pod_set(draw(st.integers(1, 3)), gpu=draw(st.integers(0, 4)),
                                     cpu=draw(st.integers(1, 4)))),
            quota_labels={TREE: draw(st.sampled_from(["a", "b", "default", "nowhere"]))},
            phase=QUEUED))
    return out


def check(snapshot: Snapshot) -> None:
    """``decide_ahead`` on ``snapshot`` against the full cycle."""
    ahead = decide_ahead(snapshot)
    cut = ahead_of_queue(snapshot)
    if ahead is None:
        event("nothing ahead" if cut is None else "ahead, nothing to take")
        return
    assert cut is not None
    event(f"taken: {len(ahead.dispatches)} dispatched ahead")
    full = dispatch_cycle(snapshot)
    ahead_keys = {e.key for e in cut.appwrappers if not isinstance(e.phase, Admitted)}
    assert {d.key for d in ahead.dispatches} <= ahead_keys
    firsts = tuple(d for d in full.dispatches if d.key in ahead_keys)
    assert ahead.dispatches == firsts
    assert not ahead.pending and not ahead.evictions and not ahead.resizes


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots(), st.data())
def test_what_is_decided_ahead_is_what_the_full_cycle_decides_first(
        case: tuple[Snapshot, object], data: st.DataObject) -> None:
    """Without quota trees: the order is plain."""
    run(dataclasses.replace(case[0], quota=NO_TREES), data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots(), st.data())
def test_what_is_decided_ahead_with_quota_trees_is_what_the_full_cycle_decides_first(
        case: tuple[Snapshot, object], data: st.DataObject) -> None:
    """With a quota tree, fair sharing on or off (the snapshots draw it)."""
    run(case[0], data)


def run(snapshot: Snapshot, data: st.DataObject) -> None:
    """Six cycles as the controller runs them, urgent arrivals before each."""
    snapshot = with_promises(snapshot, data)
    arrived = 0
    for _step in range(6):
        new = data.draw(urgent(arrived))
        arrived += len(new)
        snapshot = dataclasses.replace(snapshot, appwrappers=(*snapshot.appwrappers, *new))
        check(snapshot)
        snapshot = applied(snapshot, dispatch_cycle(snapshot))
        queued = [e for e in snapshot.appwrappers if not isinstance(e.phase, Admitted)]
        leaving = set(data.draw(st.lists(st.sampled_from([e.key for e in queued]),
                                         max_size=2)) if queued else [])
        others = data.draw(arrivals(1000 + arrived))
        arrived += len(others)
        snapshot = on_the_clusters(snapshot, data)
        snapshot = dataclasses.replace(
            snapshot, now=snapshot.now + timedelta(seconds=data.draw(st.integers(0, 400))),
            appwrappers=tuple(e for e in snapshot.appwrappers if e.key not in leaving) +
            tuple(others))


# -- table cases ---------------------------------------------------------------------------
def spoke_with_a_queue(*probes: tuple[str, int]):  # type: ignore[no-untyped-def]
    builder = (make_snapshot(now=at(600))
               .clusters(make_cluster("spoke-1").nodes(2, gpu=8))
               .add(make_entry("running").job(gpu=8).admitted("spoke-1"),
                    *(make_entry(f"queued-{i}").job(pods=2, gpu=8).created(at(i))
                      for i in range(3))))
    for name, priority in probes:
        builder = builder.add(make_entry(name).priority(priority).job(gpu=4).created(at(500)))
    return builder


def test_one_that_outranks_the_queue_is_dispatched_ahead_as_the_full_cycle_would() -> None:
    snapshot = spoke_with_a_queue(("probe", 100)).obj()
    ahead = decide_ahead(snapshot)
    assert ahead is not None
    assert [d.key for d in ahead.dispatches] == ["default/probe"]
    assert ahead.dispatches == dispatch_cycle(snapshot).dispatches


def probe_of_a_team(*, team_gpus: int) -> Snapshot:
    """The queue of ``spoke_with_a_queue`` under a quota tree; the probe (4 GPUs) of the
    quota node ``team`` of ``team_gpus``."""
    tree = make_tree("quota_context").node("root", gpu=64).child("team", parent="root",
                                                                 gpu=team_gpus)
    snapshot = spoke_with_a_queue(("probe", 100)).quota(tree.build()).obj()
    labelled = tuple(dataclasses.replace(e, quota_labels={"quota_context": "team"})
                     if e.key == "default/probe" else e for e in snapshot.appwrappers)
    return dataclasses.replace(snapshot, appwrappers=labelled)


def test_one_within_its_quota_node_is_decided_ahead_with_quota_trees() -> None:
    snapshot = probe_of_a_team(team_gpus=8)
    ahead = decide_ahead(snapshot)
    assert ahead is not None
    assert ahead.dispatches == dispatch_cycle(snapshot).dispatches


def test_one_that_would_borrow_is_not_decided_ahead_with_fair_sharing() -> None:
    """It goes after every other team's head that fits within its own quota."""
    snapshot = probe_of_a_team(team_gpus=2)
    assert ahead_of_queue(snapshot) is not None
    assert decide_ahead(snapshot) is None
    plain = dataclasses.replace(snapshot, policy=dataclasses.replace(
        snapshot.policy, fair_sharing=False))
    ahead = decide_ahead(plain)  # in plain order it goes first, borrowing or not
    assert ahead is not None
    assert ahead.dispatches == dispatch_cycle(plain).dispatches


def test_two_at_the_top_are_not_told_apart_with_quota_trees_and_fair_sharing() -> None:
    tree = make_tree("quota_context").node("root", gpu=64)
    two = spoke_with_a_queue(("probe-1", 100), ("probe-2", 100)).quota(tree.build()).obj()
    assert ahead_of_queue(two) is None
    plain = dataclasses.replace(two, policy=dataclasses.replace(two.policy,
                                                                fair_sharing=False))
    assert ahead_of_queue(plain) is not None


def test_nothing_is_decided_ahead_when_a_priority_grows_with_time() -> None:
    snapshot = spoke_with_a_queue(("probe", 100)).obj()
    sloped = tuple(dataclasses.replace(e, priority_slope=0.5) if e.key == "default/queued-1"
                   else e for e in snapshot.appwrappers)
    assert ahead_of_queue(dataclasses.replace(snapshot, appwrappers=sloped)) is None


def test_nothing_is_decided_ahead_of_no_queue_or_of_a_crowd() -> None:
    tree = make_tree("quota_context").node("root", gpu=64)
    alone = (make_snapshot(now=at(600)).clusters(make_cluster("spoke-1").nodes(2, gpu=8))
             .add(make_entry("running").job(gpu=8).admitted("spoke-1"),
                  make_entry("probe").priority(100).job(gpu=4)).quota(tree.build()).obj())
    assert ahead_of_queue(alone) is None  # nobody behind: the full cycle is as short
    crowd = spoke_with_a_queue(*((f"probe-{i}", 100) for i in range(9))).obj()
    assert ahead_of_queue(crowd) is None
    eight = spoke_with_a_queue(*((f"probe-{i}", 100) for i in range(8))).obj()
    cut = ahead_of_queue(eight)
    assert cut is not None
    assert sorted(e.key for e in cut.appwrappers) == sorted(
        ["default/running", *(f"default/probe-{i}" for i in range(8))])


def test_a_probe_that_must_preempt_is_left_to_the_full_cycle() -> None:
    spoke = bound_on(make_cluster("spoke-1").nodes(1, gpu=8).obj(), "default/running", 0,
                     gpu=8)
    snapshot = (make_snapshot(now=at(600))
                .clusters(spoke)
                .add(make_entry("running").job(gpu=8).admitted("spoke-1"),
                     make_entry("queued").job(gpu=8),
                     make_entry("probe").priority(100).job(gpu=8).created(at(500)))
                .policy(priority=True).obj())
    full = dispatch_cycle(snapshot)
    assert [e.key for e in full.evictions] == ["default/running"]  # (the full cycle preempts)
    assert ahead_of_queue(snapshot) is not None
    assert decide_ahead(snapshot) is None


def test_a_probe_that_does_not_fit_is_left_to_the_full_cycle() -> None:
    snapshot = spoke_with_a_queue(("probe", 100)).obj()
    big = tuple(dataclasses.replace(e, demand=demand_of(pod_set(3, gpu=8)))
                if e.key == "default/probe" else e for e in snapshot.appwrappers)
    assert decide_ahead(dataclasses.replace(snapshot, appwrappers=big)) is None


def test_one_alone_without_quota_trees_is_decided_without_the_running_work() -> None:
    """10,000 running made the cut as long as the full cycle; nothing of them is read."""
    snapshot = spoke_with_a_queue(("probe", 100)).obj()
    cut = ahead_of_queue(snapshot)
    assert cut is not None
    assert [e.key for e in cut.appwrappers] == ["default/probe"]
    alone = (make_snapshot(now=at(600)).clusters(make_cluster("spoke-1").nodes(2, gpu=8))
             .add(make_entry("running").job(gpu=8).admitted("spoke-1"),
                  make_entry("probe").priority(100).job(gpu=4)).obj())
    ahead = decide_ahead(alone)  # (nobody behind it: as cheap)
    assert ahead is not None
    assert ahead.dispatches == dispatch_cycle(alone).dispatches


def test_nothing_is_decided_ahead_while_the_cycle_takes_a_suspended_one_back() -> None:
    """With the running work in the cut (quota trees), the eviction is the full
    cycle's to order, and with it the probe's dispatch: the cut takes dispatches alone,
    and only when it orders nothing else. (Without quota trees, the cut leaves the
    running work out, and the eviction to the full cycle.)"""
    spoke = bound_on(make_cluster("spoke-1").nodes(2, gpu=8).obj(), "default/running", 0,
                     gpu=8)
    snapshot = (make_snapshot(now=at(600)).clusters(spoke)
                .add(make_entry("running").job(gpu=8).admitted("spoke-1")
                     .labels(quota_context="root"),
                     make_entry("queued").job(pods=2, gpu=8).labels(quota_context="root"),
                     make_entry("probe").priority(100).job(gpu=8).created(at(500))
                     .labels(quota_context="root"))
                .quota(make_tree("quota_context").node("root", gpu=64).build())
                .obj())
    suspended = tuple(dataclasses.replace(e, hold=Hold(PendingReason.SUSPENDED, "suspended"))
                      if e.key == "default/running" else e for e in snapshot.appwrappers)
    snapshot = dataclasses.replace(snapshot, appwrappers=suspended)
    full = dispatch_cycle(snapshot)
    assert [e.key for e in full.evictions] == ["default/running"]
    assert [d.key for d in full.dispatches] == ["default/probe"]
    assert decide_ahead(snapshot) is None
    without_trees = dataclasses.replace(snapshot, quota=NO_TREES)
    ahead = decide_ahead(without_trees)
    assert ahead is not None
    assert ahead.dispatches == dispatch_cycle(without_trees).dispatches
