"""Invariants of the dispatch cycle on generated snapshots and traces: no node is
over-committed, no hard quota is exceeded, decisions are deterministic (and do not
depend on the order of the snapshot's lists), every queued AppWrapper not dispatched
has exactly one reason, and the head of line is eventually dispatched however many
small jobs keep arriving behind it."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcad.core.cycle.decide import (
    QUEUED,
    Admitted,
    AppWrapperEntry,
    CyclePolicy,
    Snapshot,
    dispatch_cycle,
)
from mcad.core.placement.capacity import (
    AppWrapperKey,
    ClusterCapacity,
    ClusterName,
    NodeCapacity,
    NodeName,
)
from mcad.core.placement.clusters import PlacementPolicy
from mcad.core.placement.victims import PreemptionPolicy
from mcad.core.quota.forest import QuotaAssignment, QuotaForest, QuotaNodeSpec
from mcad.core.workload.demand import Taint, Toleration
from mcad.core.workload.resources import EMPTY, ResourceList
from tests.builders.clusters import pod_set
from tests.builders.snapshots import at, demand_of

TREE = "q"
CLOSED = st.sampled_from([frozenset(), frozenset(), frozenset({"ns"}), frozenset({"other"})])
"""A cluster's namespaces labelled closed (the AppWrappers are in ``ns`` or ``other``)."""
NAMESPACES = st.sampled_from(["ns", "ns", "ns", "other"])
PROPERTY_SETTINGS = settings(max_examples=150, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow])


@st.composite
def clusters(draw: st.DrawFn) -> tuple[ClusterCapacity, ...]:
    out = []
    for c in range(draw(st.integers(1, 3))):
        nodes = []
        for n in range(draw(st.integers(1, 4))):
            gpus = draw(st.sampled_from([4, 8]))
            nodes.append(NodeCapacity(
                name=NodeName(f"c{c}-n{n}"),
                allocatable=ResourceList.of(gpu=gpus, cpu=16),
                requested=ResourceList.of(gpu=draw(st.integers(0, gpus)),
                                          cpu=draw(st.integers(0, 8))),
                taints=(Taint("dedicated", "x"),) if draw(st.booleans()) and n else (),
                unschedulable=draw(st.integers(0, 9)) == 0,
            ))
        out.append(ClusterCapacity(name=ClusterName(f"c{c}"), nodes=tuple(nodes),
                                   labels={"region": draw(st.sampled_from(["e", "w"]))},
                                   ready=draw(st.integers(0, 9)) > 0,
                                   closed_namespaces=draw(CLOSED)))
    return tuple(out)


@st.composite
def quota_specs(draw: st.DrawFn) -> list[QuotaNodeSpec]:
    root = draw(st.integers(4, 32))
    specs = [QuotaNodeSpec(TREE, "root", None, ResourceList.of(gpu=root), True)]
    for name in ("a", "b", "default"):
        specs.append(QuotaNodeSpec(TREE, name, "root",
                                   ResourceList.of(gpu=draw(st.integers(0, root))),
                                   draw(st.booleans())))
    return specs


@st.composite
def appwrappers(draw: st.DrawFn) -> tuple[AppWrapperEntry, ...]:
    out = []
    for i in range(draw(st.integers(1, 12))):
        sets = [pod_set(draw(st.integers(1, 3)), gpu=draw(st.integers(0, 4)),
                        cpu=draw(st.integers(1, 4)), source=f"aw{i}[{j}]",
                        tolerations=[Toleration("dedicated", "Exists")]
                        if draw(st.booleans()) else [])
                for j in range(draw(st.integers(1, 2)))]
        admitted = draw(st.integers(0, 4)) == 0
        out.append(AppWrapperEntry(
            key=AppWrapperKey(f"{draw(NAMESPACES)}/aw{i}"), uid=f"uid-{i}",
            priority=draw(st.integers(0, 3)), created=at(draw(st.integers(0, 600))),
            demand=demand_of(*sets),
            quota_labels={TREE: draw(st.sampled_from(["a", "b", "default"]))},
            clusters=tuple(draw(st.lists(st.sampled_from(["c0", "c1", "c2"]), max_size=2))),
            phase=Admitted(ClusterName("c0")) if admitted else QUEUED,
            avoid_cluster=draw(st.sampled_from([None, "c0", "c1"])),
            not_before=at(draw(st.integers(0, 1200))) if draw(st.integers(0, 3)) == 0
            else None,
        ))
    return tuple(out)


@st.composite
def snapshots(draw: st.DrawFn) -> tuple[Snapshot, list[QuotaNodeSpec]]:
    specs = draw(quota_specs())
    forest, problems = QuotaForest.build(specs)
    assert not problems
    policy = CyclePolicy(draw(st.sampled_from(list(PlacementPolicy))),
                         PreemptionPolicy(priority=draw(st.booleans()),
                                          reclaim=draw(st.booleans())),
                         draw(st.sampled_from([0.0, 300.0, 10_000.0])),
                         fair_sharing=draw(st.booleans()))
    return Snapshot(now=at(900), appwrappers=draw(appwrappers()), clusters=draw(clusters()),
                    quota=forest, policy=policy), specs


@PROPERTY_SETTINGS
@given(snapshots())
def test_no_node_is_over_committed(case: tuple[Snapshot, list[QuotaNodeSpec]]) -> None:
    snapshot, _ = case
    result = dispatch_cycle(snapshot)
    free = {c.name: c.node_free() for c in snapshot.clusters}
    placed: dict[tuple[str, str], ResourceList] = {}
    for dispatch in result.dispatches:
        assert dispatch.cluster == dispatch.placement.cluster
        for node, requests in dispatch.placement.node_requests().items():
            key = (dispatch.cluster, node)
            placed[key] = placed.get(key, EMPTY) + requests
    for (cluster, node), requests in placed.items():
        assert requests.fits_in(free[ClusterName(cluster)][NodeName(node)]), (cluster, node)


@PROPERTY_SETTINGS
@given(snapshots())
def test_no_hard_quota_is_exceeded(case: tuple[Snapshot, list[QuotaNodeSpec]]) -> None:
    """Where admitted work already overflows a hard node, nothing new is charged there."""
    snapshot, specs = case
    result = dispatch_cycle(snapshot)
    before, _ = QuotaForest.build(specs)
    by_key = {a.key: a for a in snapshot.appwrappers}
    for entry in snapshot.appwrappers:
        if isinstance(entry.phase, Admitted) and entry.demand is not None:
            before.charge(_assignment(before, entry), entry.demand.total)
    after = before.copy()
    for dispatch in result.dispatches:
        entry = by_key[dispatch.key]
        assert entry.demand is not None
        after.charge(_assignment(after, entry), entry.demand.total)
    for spec in specs:
        if not (spec.hard_limit or spec.parent is None):
            continue
        limit = after.limit(spec.tree, spec.name)
        used_before = before.usage(spec.tree, spec.name)
        used_after = after.usage(spec.tree, spec.name)
        for resource, quota in limit.items():
            if used_after[resource] > quota:
                assert used_after[resource] == used_before[resource], (spec.name, resource)


def _assignment(forest: QuotaForest, entry: AppWrapperEntry) -> QuotaAssignment:
    assignment = forest.resolve(entry.quota_labels)
    assert isinstance(assignment, QuotaAssignment)
    return assignment


@PROPERTY_SETTINGS
@given(snapshots(), st.randoms(use_true_random=False))
def test_same_snapshot_same_decisions(case: tuple[Snapshot, list[QuotaNodeSpec]],
                                      rng: random.Random) -> None:
    snapshot, _ = case
    first = dispatch_cycle(snapshot)
    assert dispatch_cycle(snapshot) == first
    entries, cluster_list = list(snapshot.appwrappers), list(snapshot.clusters)
    rng.shuffle(entries)
    rng.shuffle(cluster_list)
    shuffled = dataclasses.replace(snapshot, appwrappers=tuple(entries),
                                   clusters=tuple(cluster_list))
    again = dispatch_cycle(shuffled)
    assert again.dispatches == first.dispatches
    assert again.evictions == first.evictions
    assert sorted(again.pending) == sorted(first.pending)


@PROPERTY_SETTINGS
@given(snapshots())
def test_every_queued_appwrapper_gets_exactly_one_outcome(
        case: tuple[Snapshot, list[QuotaNodeSpec]]) -> None:
    snapshot, _ = case
    result = dispatch_cycle(snapshot)
    queued = sorted(a.key for a in snapshot.appwrappers if not isinstance(a.phase, Admitted))
    outcomes = [d.key for d in result.dispatches] + [p.key for p in result.pending]
    assert sorted(outcomes) == queued
    for pending in result.pending:
        assert pending.reason and pending.message
    admitted = {a.key: a.priority for a in snapshot.appwrappers
                if isinstance(a.phase, Admitted)}
    by_key = {a.key: a for a in snapshot.appwrappers}
    preemption = snapshot.policy.preemption
    for eviction in result.evictions:
        assert eviction.key in admitted
        preemptor = by_key[eviction.for_key]
        if "borrowed quota" in eviction.message:  # reclaim: any priority
            assert preemption.reclaim
        else:
            assert preemption.priority
            assert admitted[eviction.key] < preemptor.priority
        # No cascade: nobody in its requeue pause evicts anybody.
        assert preemptor.not_before is None or preemptor.not_before <= snapshot.now
    victims = [e.key for e in result.evictions]
    assert len(victims) == len(set(victims)), "nobody is evicted twice"
    draining = {a.key for a in snapshot.appwrappers if a.draining}
    assert not draining & set(victims), "an AppWrapper already draining is never a victim"


# -- traces ------------------------------------------------------------------------------

CYCLE_SECONDS = 60
STARVATION_SECONDS = 180


@dataclasses.dataclass
class Running:
    entry: AppWrapperEntry
    cluster: str
    on_nodes: dict[NodeName, ResourceList]
    ends_at_cycle: int


def _cluster(nodes: int, running: Sequence[Running]) -> ClusterCapacity:
    used: dict[NodeName, ResourceList] = {}
    for job in running:
        for node, requests in job.on_nodes.items():
            used[node] = used.get(node, EMPTY) + requests
    names = [NodeName(f"spoke-node-{i}") for i in range(nodes)]
    return ClusterCapacity(ClusterName("spoke"), tuple(
        NodeCapacity(name, ResourceList.of(gpu=8), used.get(name, EMPTY)) for name in names))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.integers(2, 4),
    arrivals=st.lists(st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4)),
                               min_size=1, max_size=3), min_size=40, max_size=40),
)
def test_the_head_of_line_is_not_starved(nodes: int,
                                         arrivals: list[list[tuple[int, int]]]) -> None:
    """A whole-cluster gang queued first is dispatched while small jobs keep arriving.

    Each cycle is a minute; small jobs (1-4 GPUs, running 1-4 cycles) arrive every
    cycle with the same priority. Backfill lets them pass until the gang has waited
    ``STARVATION_SECONDS``; then the cluster drains for it, so it must be dispatched
    within that wait plus the longest run plus one cycle.
    """
    big = AppWrapperEntry(AppWrapperKey("ns/big"), "uid-big", 0, at(0),
                          demand_of(pod_set(nodes, gpu=8)))
    queue: list[AppWrapperEntry] = [big]
    running: list[Running] = []
    forest, _ = QuotaForest.build([])
    policy = CyclePolicy(starvation_seconds=STARVATION_SECONDS)
    bound = STARVATION_SECONDS // CYCLE_SECONDS + 4 + 1
    for cycle, arriving in enumerate(arrivals):
        now = at(cycle * CYCLE_SECONDS)
        running = [r for r in running if r.ends_at_cycle > cycle]
        for j, (gpus, _) in enumerate(arriving):
            queue.append(AppWrapperEntry(
                AppWrapperKey(f"ns/small-{cycle}-{j}"), f"uid-{cycle:03d}-{j}", 0,
                now + timedelta(seconds=j), demand_of(pod_set(1, gpu=gpus))))
        durations = {f"ns/small-{cycle}-{j}": d for j, (_, d) in enumerate(arriving)}
        admitted = [dataclasses.replace(r.entry, phase=Admitted(ClusterName("spoke")))
                    for r in running]
        snapshot = Snapshot(now, tuple(queue + admitted), (_cluster(nodes, running),),
                            forest, policy)
        result = dispatch_cycle(snapshot)
        by_key = {e.key: e for e in queue}
        for dispatch in result.dispatches:
            if dispatch.key == "ns/big":
                assert cycle <= bound, f"dispatched only at cycle {cycle}"
                return
            duration = durations.get(dispatch.key, 2)
            running.append(Running(by_key[dispatch.key], dispatch.cluster,
                                   dispatch.placement.node_requests(), cycle + duration))
        dispatched = {d.key for d in result.dispatches}
        queue = [e for e in queue if e.key not in dispatched]
        assert cycle < bound, "the head of line was starved"
    raise AssertionError("trace ended before the head of line was dispatched")
