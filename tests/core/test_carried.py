"""The carried cycle decides exactly what a full cycle decides.

A property test drives random queues through a run of cycles, as the controller would:
each cycle's dispatches become running work (their pods reserved on their cluster),
evictions start draining, some AppWrappers leave, new ones arrive, time moves on, and on
the clusters reserved pods bind (wherever a node accepts them, not where the cycle's
first fit guessed), bound pods end, other pods on a node end, running work completes,
and nodes are cordoned, relabelled, resized, added or removed (``tests.core.histories``);
a cluster's closed namespaces change too (the AppWrappers are in two namespaces), and
some running work holds backfill promises to waiting AppWrappers that come due along
the way. At every step ``CarriedCycle.decide`` must give the same dispatches, evictions
and resizes as ``dispatch_cycle``, and the same reason and sentence for every waiting
AppWrapper. A second property test settles a crowded queue until it is quiet (the
carried case) and then lets the running work's pods bind and end cycle after cycle.
Table cases show when it carries and when it decides in full.
"""

from __future__ import annotations

import dataclasses
import gc
from datetime import timedelta

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from mcad.core.cycle.carried import CarriedCycle
from mcad.core.cycle.decide import QUEUED, Admitted, AppWrapperEntry, Snapshot, dispatch_cycle
from mcad.core.cycle.snapshot import BackfillPromise, CycleResult
from mcad.core.placement.capacity import AppWrapperKey, ClusterCapacity, UnboundPods
from mcad.core.workload.resources import ResourceList
from mcad.core.workload.topology import TopologyRequest
from tests.builders.clusters import make_cluster, pod_set
from tests.builders.quota import make_tree
from tests.builders.snapshots import at, demand_of, make_entry, make_snapshot
from tests.core.histories import (
    bind,
    complete,
    completed,
    finish,
    free,
    on_the_clusters,
    persist,
)
from tests.core.test_cycle_properties import CLOSED, NAMESPACES, TREE, snapshots
from tests.core.test_topology_properties import LEVELS, racked_clusters


def decisions(result: CycleResult) -> tuple[object, ...]:
    return (result.dispatches, result.evictions, result.resizes,
            {p.key: (p.reason, p.message) for p in result.pending})


def applied(snapshot: Snapshot, result: CycleResult) -> Snapshot:
    """The next snapshot as the controller would see it after ``result``."""
    by_key = {e.key: e for e in snapshot.appwrappers}
    reserve: dict[str, list[UnboundPods]] = {}
    for dispatch in result.dispatches:
        entry = by_key[dispatch.key]
        pin = dispatch.placement.pin
        by_key[dispatch.key] = dataclasses.replace(
            entry, phase=Admitted(dispatch.cluster, pin=pin), dispatched=snapshot.now,
            backfill_promise=dispatch.promise)
        if entry.demand is not None:
            reserve.setdefault(dispatch.cluster, []).append(
                UnboundPods(dispatch.key, entry.demand.pod_sets, pin=pin))
    for eviction in result.evictions:
        by_key[eviction.key] = dataclasses.replace(by_key[eviction.key], draining=True,
                                                   draining_for=eviction.for_key)
    clusters = tuple(c if c.name not in reserve else dataclasses.replace(
        c, unbound=(*c.unbound, *reserve[c.name])) for c in snapshot.clusters)
    return dataclasses.replace(snapshot, appwrappers=tuple(by_key.values()), clusters=clusters)


@st.composite
def arrivals(draw: st.DrawFn, first: int) -> list[AppWrapperEntry]:
    out = []
    for i in range(draw(st.integers(0, 4))):
        n = first + i
        out.append(AppWrapperEntry(
            key=AppWrapperKey(f"{draw(NAMESPACES)}/new{n}"), uid=f"uid-new{n}",
            priority=draw(st.integers(0, 3)), created=at(draw(st.integers(0, 3000))),
            demand=demand_of(pod_set(draw(st.integers(1, 3)), gpu=draw(st.integers(0, 4)),
                                     cpu=draw(st.integers(1, 4)))),
            quota_labels={TREE: draw(st.sampled_from(["a", "b", "default", "nowhere"]))},
            phase=QUEUED))
    return out


def with_promises(snapshot: Snapshot, data: st.DataObject) -> Snapshot:
    """Some of the running work started by reservation backfill, on promises to queued
    AppWrappers (or to one gone) that come due within the cycles to come."""
    queued = [e.key for e in snapshot.appwrappers if not isinstance(e.phase, Admitted)]
    heads = [*queued, AppWrapperKey("ns/gone")]
    entries = []
    for entry in snapshot.appwrappers:
        if isinstance(entry.phase, Admitted) and data.draw(st.booleans()):
            entries.append(dataclasses.replace(entry, backfill_promise=BackfillPromise(
                data.draw(st.sampled_from(heads)),
                snapshot.now + timedelta(seconds=data.draw(st.integers(0, 1500))))))
        else:
            entries.append(entry)
    return dataclasses.replace(snapshot, appwrappers=tuple(entries))


def run_cycles(snapshot: Snapshot, data: st.DataObject) -> None:
    """Six cycles as a controller runs them, checking each carried one against a full one."""
    carried = CarriedCycle()
    snapshot = with_promises(snapshot, data)
    arrived = 0
    for _step in range(6):
        full = dispatch_cycle(snapshot)
        got = carried.decide(snapshot)
        if decisions(got) != decisions(full):
            got_pending = {p.key: (p.reason, p.message) for p in got.pending}
            for p in full.pending:
                if got_pending.get(p.key) != (p.reason, p.message):
                    print("differs:", p.key, "full:", p.reason, p.message, "carried:",
                          got_pending.get(p.key))
        assert decisions(got) == decisions(full)
        event("carried" if carried.carried else f"full: {carried.why_full}")
        if carried.carried and carried.followed_room:
            event("carried while room changed")
        snapshot = applied(snapshot, full)
        queued = [e for e in snapshot.appwrappers if not isinstance(e.phase, Admitted)]
        leaving = set(data.draw(st.lists(st.sampled_from([e.key for e in queued]),
                                         max_size=2)) if queued else [])
        new = data.draw(arrivals(arrived))
        arrived += len(new)
        if queued and data.draw(st.booleans()):  # one of those waiting is edited
            edited = data.draw(st.sampled_from(queued))
            leaving.add(edited.key)
            new.append(dataclasses.replace(edited, priority=data.draw(st.integers(0, 3))))
        # On the clusters: reserved pods bind, bound pods end, running work completes,
        # nodes change (``tests.core.histories``).
        snapshot = on_the_clusters(snapshot, data)
        clusters = snapshot.clusters
        if data.draw(st.integers(0, 5)) == 0 and clusters:  # a pod went: room grows
            first = clusters[0]
            clusters = (dataclasses.replace(first, nodes=tuple(
                dataclasses.replace(n, requested=n.requested.scale(0)) for n in first.nodes)),
                        *clusters[1:])
        if data.draw(st.integers(0, 5)) == 0 and clusters:  # an admin (un)closes namespaces
            last = clusters[-1]
            clusters = (*clusters[:-1],
                        dataclasses.replace(last, closed_namespaces=data.draw(CLOSED)))
        snapshot = dataclasses.replace(
            snapshot, now=snapshot.now + timedelta(seconds=data.draw(st.integers(0, 400))),
            clusters=clusters,
            appwrappers=tuple(e for e in snapshot.appwrappers if e.key not in leaving) +
            tuple(new))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots(), st.data())
def test_the_carried_cycle_decides_exactly_what_a_full_cycle_decides(
        case: tuple[Snapshot, object], data: st.DataObject) -> None:
    run_cycles(case[0], data)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_cycles_leave_nothing_for_the_garbage_collector(case: tuple[Snapshot, object]) -> None:
    """A cycle's books, plans and decisions are freed by reference counting as soon as
    they are dropped. A reference cycle in them (the books' head of line once held a
    callable holding the books) made each cycle, with 10,000 running, 50,000 objects
    that only the collector's full passes free, and a full pass walks the whole heap:
    in the scale benchmark, one every 10 s taking 0.3-1.2 s of the event loop."""
    snapshot = case[0]
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        carried = CarriedCycle()
        result = carried.decide(snapshot)
        carried.decide(applied(snapshot, result))  # the first memo is dropped here
        del carried, result
        gc.collect()
        garbage = sorted({type(o).__qualname__ for o in gc.garbage})
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()
    assert garbage == []


@st.composite
def crowded(draw: st.DrawFn) -> tuple[Snapshot, object]:
    """A long queue over three quota lines, most of it waiting: the carried case."""
    snapshot, specs = draw(snapshots())
    more = []
    for i in range(draw(st.integers(10, 40))):
        more.append(AppWrapperEntry(
            key=AppWrapperKey(f"{draw(NAMESPACES)}/q{i}"), uid=f"uid-q{i:03d}",
            priority=draw(st.integers(0, 3)), created=at(draw(st.integers(0, 900))),
            demand=demand_of(pod_set(draw(st.integers(1, 2)), gpu=draw(st.integers(1, 4)),
                                     cpu=1)),
            quota_labels={TREE: draw(st.sampled_from(["a", "b", "default"]))}))
    return dataclasses.replace(snapshot, appwrappers=(*snapshot.appwrappers, *more)), specs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crowded(), st.data())
def test_the_carried_cycle_decides_as_a_full_one_on_a_crowded_queue(
        case: tuple[Snapshot, object], data: st.DataObject) -> None:
    run_cycles(case[0], data)


@st.composite
def racked(draw: st.DrawFn) -> tuple[Snapshot, object]:
    """The crowded queue on clusters of blocks of racks, a third of it asking for a
    topology level (required or preferred)."""
    snapshot, specs = draw(crowded())
    entries = []
    for entry in snapshot.appwrappers:
        if isinstance(entry.phase, Admitted):
            continue  # (they ran on clusters of other names)
        if entry.demand is not None and draw(st.integers(0, 2)) == 0:
            request = TopologyRequest(draw(st.sampled_from(LEVELS)), draw(st.booleans()),
                                      "test")
            entries.append(dataclasses.replace(
                entry, demand=dataclasses.replace(entry.demand, topology=request)))
        else:
            entries.append(entry)
    return dataclasses.replace(snapshot, clusters=draw(racked_clusters()),
                               appwrappers=tuple(entries)), specs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(racked(), st.data())
def test_the_carried_cycle_decides_as_a_full_one_with_topology(
        case: tuple[Snapshot, object], data: st.DataObject) -> None:
    run_cycles(case[0], data)


def settled(snapshot: Snapshot) -> Snapshot | None:
    """Cycles applied until one dispatches, evicts and resizes nothing (victims gone as
    soon as evicted): the quiet state the carried cycle is for; None if it never is."""
    for _ in range(10):
        result = dispatch_cycle(snapshot)
        if not (result.dispatches or result.evictions or result.resizes):
            return snapshot
        snapshot = without_victims(applied(snapshot, result))
    return None


def without_victims(snapshot: Snapshot) -> Snapshot:
    """Evicted AppWrappers gone, with their pods (the drain of a victim is not what is
    tested here, and a preemptor holding room for its victims decides in full)."""
    for entry in snapshot.appwrappers:
        if entry.draining:
            snapshot = completed(snapshot, entry.key)
    return snapshot


@st.composite
def draining(draw: st.DrawFn) -> Snapshot:
    """A crowded queue (plain or racked clusters) settled until quiet, the head of the
    line often starving, and sometimes an elastic AppWrapper running below its size on
    the first cluster (room freed there lets it grow)."""
    snapshot, _ = draw(st.one_of(crowded(), racked()))
    snapshot = dataclasses.replace(snapshot, policy=dataclasses.replace(
        snapshot.policy, starvation_seconds=draw(st.sampled_from([0.0, 0.0, 300.0]))))
    first = snapshot.clusters[0]
    if draw(st.booleans()):
        grower = make_entry("grower").job(pods=4, gpu=1, cpu=1).labels(
            **{TREE: draw(st.sampled_from(["a", "b", "default"]))}).elastic(
            1, running=1).admitted(first.name).dispatched(at(0)).obj()
        node = first.nodes[0]
        one = ResourceList.of(gpu=1, cpu=1)
        snapshot = dataclasses.replace(
            snapshot, appwrappers=(*snapshot.appwrappers, grower),
            clusters=(dataclasses.replace(first, nodes=(
                dataclasses.replace(node, requested=node.requested + one),
                *first.nodes[1:]), held_by={**first.held_by, grower.key: ((node.name, one),)}),
                *snapshot.clusters[1:]))
    quiet = settled(snapshot)
    assume(quiet is not None)
    assert quiet is not None
    return quiet


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(draining(), st.data())
def test_the_carried_cycle_follows_pods_that_bind_and_end_as_a_full_cycle_would(
        snapshot: Snapshot, data: st.DataObject) -> None:
    """A quiet queue while the running work's pods bind and end (and now and then one
    completes): at every cycle the carried one decides as a full one; whatever a cycle
    dispatches runs, and its pods bind in the cycles after."""
    carried = CarriedCycle()
    for _step in range(8):
        full = dispatch_cycle(snapshot)
        got = carried.decide(snapshot)
        assert decisions(got) == decisions(full)
        event("carried" if carried.carried else f"full: {carried.why_full}")
        if carried.carried and carried.followed_room:
            event("carried while room changed")
        snapshot = without_victims(applied(snapshot, full))
        for _pods in range(data.draw(st.integers(1, 4))):
            snapshot = bind(snapshot, data)
        for _pods in range(data.draw(st.integers(0, 2))):
            snapshot = finish(snapshot, data)
        if data.draw(st.integers(0, 2)) == 0:
            snapshot = free(snapshot, data)
        if data.draw(st.integers(0, 2)) == 0:
            snapshot = persist(snapshot, data)
        if data.draw(st.integers(0, 9)) == 0:
            snapshot = complete(snapshot, data)
        snapshot = dataclasses.replace(
            snapshot, now=snapshot.now + timedelta(seconds=data.draw(st.integers(0, 30))))


def full_spoke_with_a_queue():
    """One spoke, full; a quota tree with room; ten 8-GPU gangs waiting for room."""
    tree = make_tree(TREE).node("root", gpu=64).child("a", parent="root", gpu=64)
    snapshot = make_snapshot(now=at(100)).clusters(
        make_cluster("spoke-1").nodes(2, gpu=8).used(0, gpu=8).used(1, gpu=8)
    ).quota(tree.build())
    for i in range(10):
        snapshot.add(make_entry(f"w{i}").job(gpu=8).labels(**{TREE: "a"}).created(at(i)))
    return snapshot


def test_a_newcomer_at_the_back_of_a_quiet_queue_is_carried() -> None:
    builder = full_spoke_with_a_queue()
    first = builder.obj()
    carried = CarriedCycle()
    carried.decide(first)
    second = dataclasses.replace(first, now=at(101), appwrappers=(
        *first.appwrappers, make_entry("late").job(gpu=8).labels(**{TREE: "a"})
        .created(at(50)).obj()))
    assert decisions(carried.decide(second)) == decisions(dispatch_cycle(second))
    assert carried.carried


def test_room_that_frees_up_is_decided_in_full() -> None:
    first = full_spoke_with_a_queue().obj()
    carried = CarriedCycle()
    carried.decide(first)
    freed = make_cluster("spoke-1").nodes(2, gpu=8).used(0, gpu=8).obj()
    second = dataclasses.replace(first, now=at(101), clusters=(freed,))
    result = carried.decide(second)
    assert not carried.carried
    assert [d.key for d in result.dispatches] == ["default/w0"]


def test_a_newcomer_of_higher_priority_is_decided_in_full() -> None:
    first = full_spoke_with_a_queue().obj()
    carried = CarriedCycle()
    carried.decide(first)
    urgent = make_entry("urgent").job(gpu=8).labels(**{TREE: "a"}).priority(9).created(at(60))
    second = dataclasses.replace(first, now=at(101),
                                 appwrappers=(*first.appwrappers, urgent.obj()))
    assert decisions(carried.decide(second)) == decisions(dispatch_cycle(second))
    assert not carried.carried


def test_a_carried_wait_for_the_head_of_line_is_the_same_object_as_before() -> None:
    """A starving 2-node gang heads the line; 1-node jobs behind it would fit on the
    free node but wait for it, with a sentence naming since when it waits: carried
    seconds later, the waiting are told the very same outcomes (nothing to write)."""
    tree = make_tree(TREE).node("root", gpu=64).child("a", parent="root", gpu=64)
    builder = make_snapshot(now=at(400)).policy(starvation_seconds=10).clusters(
        make_cluster("spoke-1").nodes(2, gpu=8).used(0, gpu=8)).quota(tree.build()).add(
        make_entry("head").job(pods=2, gpu=8).labels(**{TREE: "a"}).created(at(0)))
    for i in range(3):
        builder.add(make_entry(f"small{i}").job(gpu=8).labels(**{TREE: "a"})
                    .created(at(10 + i)))
    first = builder.obj()
    carried = CarriedCycle()
    carried.decide(first)
    second = dataclasses.replace(first, now=at(407))
    result = carried.decide(second)
    assert decisions(result) == decisions(dispatch_cycle(second))
    assert carried.carried
    assert any("first in line and waiting since" in p.message for p in result.pending)
    later = carried.decide(dataclasses.replace(first, now=at(409)))
    assert carried.carried
    assert [p.key for p in later.pending] == [p.key for p in result.pending]
    assert all(a is b for a, b in zip(later.pending, result.pending, strict=True))




def test_a_backfill_promise_coming_due_is_decided_in_full() -> None:
    """Running work started on a promise to ``w0`` to end by 10:03:20: a cycle a second
    before is carried; the one then runs in full and evicts it for ``w0``; so does
    one where ``w0``, a moment out of the cycle (a failed persist's hold), comes back."""
    builder = full_spoke_with_a_queue()
    first = builder.add(make_entry("lied").job(gpu=8).labels(**{TREE: "a"}).admitted(
        "spoke-1").dispatched(at(0)).promised("default/w0", at(200))).obj()
    carried = CarriedCycle()
    carried.decide(first)
    assert dispatch_cycle(first).evictions == ()
    before = carried.decide(dataclasses.replace(first, now=at(199)))
    assert carried.carried and before.evictions == ()
    due = dataclasses.replace(first, now=at(200))
    assert decisions(carried.decide(due)) == decisions(dispatch_cycle(due))
    assert not carried.carried
    assert [(e.key, e.for_key) for e in dispatch_cycle(due).evictions] == [
        ("default/lied", "default/w0")]

    without_w0 = dataclasses.replace(first, now=at(201), appwrappers=tuple(
        e for e in first.appwrappers if e.key != "default/w0"))
    carried = CarriedCycle()
    carried.decide(without_w0)
    assert carried.decide(dataclasses.replace(without_w0, now=at(202))).evictions == ()
    back = dataclasses.replace(first, now=at(203))
    assert decisions(carried.decide(back)) == decisions(dispatch_cycle(back))
    assert not carried.carried and dispatch_cycle(back).evictions != ()


def bound_on(cluster: ClusterCapacity, key: str, node: int, **shape: int) -> ClusterCapacity:
    """``cluster`` once ``key``'s reserved pod of ``shape`` bound on node ``node``."""
    requests = ResourceList.of(**shape)
    nodes = list(cluster.nodes)
    nodes[node] = dataclasses.replace(nodes[node], requested=nodes[node].requested + requests)
    return dataclasses.replace(
        cluster, nodes=tuple(nodes),
        unbound=tuple(r for r in cluster.unbound if r.key != key),
        held_by={**cluster.held_by, AppWrapperKey(key): ((nodes[node].name, requests),)})


def test_pods_that_bind_under_a_quiet_queue_are_carried() -> None:
    """Two nodes are full, node 3 empty, nodes 4 and 5 half full; a running AppWrapper's
    pod of 4 GPUs is reserved (first fit: on node 3). Gangs of two 6-GPU pods wait for
    room (no node has 6 free), one more for quota. The pod binds on node 4 instead: the
    room moved, one pod of each gang would fit now, and they are told so, as a full
    cycle tells them; the one waiting for quota keeps its very outcome; carried."""
    tree = make_tree(TREE).node("root", gpu=64).child("a", parent="root", gpu=64) \
        .child("b", parent="root", gpu=0, hard=True)
    spoke = make_cluster("spoke-1").nodes(5, gpu=8).used(0, gpu=8).used(1, gpu=8) \
        .used(3, gpu=4).used(4, gpu=4).reserve("default/run", pod_set(1, gpu=4)).obj()
    builder = make_snapshot(now=at(100)).clusters(spoke).quota(tree.build()).add(
        make_entry("run").job(gpu=4).labels(**{TREE: "a"}).admitted("spoke-1"),
        make_entry("quota").job(gpu=1).labels(**{TREE: "b"}).created(at(9)))
    for i in range(3):
        builder.add(make_entry(f"w{i}").job(pods=2, gpu=6).labels(**{TREE: "a"}).created(at(i)))
    first = builder.obj()
    carried = CarriedCycle()
    before = {p.key: p for p in carried.decide(first).pending}
    second = dataclasses.replace(first, now=at(101),
                                 clusters=(bound_on(spoke, "default/run", 3, gpu=4),))
    after = {p.key: p for p in carried.decide(second).pending}
    assert decisions(dispatch_cycle(second))[3] == {k: (p.reason, p.message)
                                                   for k, p in after.items()}
    assert carried.carried and carried.followed_room
    assert "largest free: 4 on node spoke-1-node-3" in before["default/w1"].message
    assert "1 of its 2 pods fit" in after["default/w1"].message
    assert after["default/quota"] is before["default/quota"]  # nothing to write


def test_a_head_holding_nodes_holds_them_once_when_room_changes_elsewhere() -> None:
    """A starving head waits for quota and holds nodes on spoke-1 for its pods; a 2-pod
    gang behind it waits for that room. A pod binds on spoke-2: carried, the head's held
    nodes are given back before it holds them again (held twice, the gang would be told
    spoke-1 has no room)."""
    tree = make_tree(TREE).node("root", gpu=64).child("a", parent="root", gpu=8, hard=True) \
        .child("b", parent="root", gpu=32)
    first = make_snapshot(now=at(1000)).policy(starvation_seconds=10, fair_sharing=False) \
        .clusters(make_cluster("spoke-1").nodes(2, gpu=8),
                  make_cluster("spoke-2").nodes(1, gpu=8)
                  .reserve("default/run2", pod_set(1, gpu=4))).quota(tree.build()).add(
        make_entry("run1").job(gpu=8).labels(**{TREE: "a"}).admitted("spoke-3"),
        make_entry("run2").job(gpu=4).labels(**{TREE: "b"}).admitted("spoke-2"),
        make_entry("head").priority(5).job(gpu=8).labels(**{TREE: "a"}).created(at(0)),
        make_entry("pair").job(pods=2, gpu=8).labels(**{TREE: "b"}).created(at(5))).obj()
    carried = CarriedCycle()
    carried.decide(first)
    second = dataclasses.replace(first, now=at(1001), clusters=(
        first.clusters[0], bound_on(first.clusters[1], "default/run2", 0, gpu=4)))
    result = carried.decide(second)
    assert carried.carried and carried.followed_room
    assert decisions(result) == decisions(dispatch_cycle(second))
    assert [p.reason for p in result.pending] == ["QuotaExceeded", "WaitingForHeadOfLine"]


def test_room_freed_that_lets_an_elastic_appwrapper_grow_is_decided_in_full() -> None:
    """An elastic AppWrapper runs 1 of its 4 pods on a full node; another waits for a
    quota it can never have. Other pods on the node end: the full cycle grows it, so the
    carried one runs in full."""
    tree = make_tree(TREE).node("root", gpu=64).child("a", parent="root", gpu=32) \
        .child("c", parent="root", gpu=0, hard=True)
    first = make_snapshot(now=at(1000)).clusters(
        make_cluster("spoke-1").nodes(1, gpu=8).used(0, gpu=8).held("default/grower", 0, gpu=1)
    ).quota(tree.build()).add(
        make_entry("grower").job(pods=4, gpu=1).labels(**{TREE: "a"}).elastic(1, running=1)
        .admitted("spoke-1").dispatched(at(0)),
        make_entry("waits").job(gpu=1).labels(**{TREE: "c"}).created(at(0))).obj()
    carried = CarriedCycle()
    carried.decide(first)
    spoke = first.clusters[0]
    freed = dataclasses.replace(spoke, nodes=(
        dataclasses.replace(spoke.nodes[0], requested=ResourceList.of(gpu=1)),))
    second = dataclasses.replace(first, now=at(1001), clusters=(freed,))
    result = carried.decide(second)
    assert not carried.carried and "grow" in carried.why_full
    assert [(r.key, r.pods) for r in result.resizes] == [("default/grower", 4)]
