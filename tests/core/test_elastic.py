"""Elastic AppWrappers in the dispatch cycle: start with the pods there is room for,
grow last (never ahead of a waiting AppWrapper that fits), shrink before anyone is
evicted, never below the minimum, never over a node or a hard quota."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcad.core.cycle.books import CycleBooks
from mcad.core.cycle.decide import Resize, dispatch_cycle
from mcad.core.cycle.elastic import ShrinkCandidate, resized_manifest, shrink_plan, start_small
from mcad.core.cycle.snapshot import Admitted, Snapshot
from mcad.core.placement.capacity import AppWrapperKey
from mcad.core.placement.victims import Holder
from mcad.core.quota.forest import QuotaAssignment
from tests.builders.clusters import ClusterBuilder, make_cluster
from tests.builders.quota import make_tree
from tests.builders.snapshots import at, make_entry, make_snapshot

KEY = AppWrapperKey("default/elastic")


def cluster(used: int, held: dict[str, list[int]] | None = None) -> ClusterBuilder:
    """4 nodes x 8 GPUs, the first ``used`` full; ``held``: key -> node indexes it runs on."""
    c = make_cluster("spoke-1").nodes(4, gpu=8)
    for i in range(used):
        c.used(i, gpu=8)
    for key, nodes in (held or {}).items():
        for i in nodes:
            c.held(key, i, gpu=8)
    return c


def test_it_starts_with_the_pods_there_is_room_for() -> None:
    snapshot = make_snapshot(now=at(10)).clusters(cluster(used=3)).add(
        make_entry("elastic").job(pods=4, gpu=8).elastic(1)).obj()
    result = dispatch_cycle(snapshot)
    (dispatch,) = result.dispatches
    assert (dispatch.key, dispatch.pods) == (KEY, 1)
    assert result.pending == ()


def test_it_starts_small_rather_than_evict_lower_priority_work() -> None:
    snapshot = make_snapshot(now=at(10)).clusters(
        cluster(used=3, held={"default/low": [0, 1, 2]})).policy(priority=True).add(
        make_entry("low").job(pods=3, gpu=8).admitted("spoke-1").dispatched(at(0)),
        make_entry("elastic").job(pods=4, gpu=8).elastic(1).priority(5)).obj()
    result = dispatch_cycle(snapshot)
    assert result.evictions == ()
    assert [(d.key, d.pods) for d in result.dispatches] == [(KEY, 1)]


def test_a_gang_that_fits_whole_starts_whole() -> None:
    snapshot = make_snapshot(now=at(10)).clusters(cluster(used=0)).add(
        make_entry("elastic").job(pods=4, gpu=8).elastic(1)).obj()
    (dispatch,) = dispatch_cycle(snapshot).dispatches
    assert dispatch.pods is None


def test_below_its_minimum_it_waits_like_a_gang() -> None:
    snapshot = make_snapshot(now=at(10)).clusters(cluster(used=3)).add(
        make_entry("elastic").job(pods=4, gpu=8).elastic(2)).obj()
    result = dispatch_cycle(snapshot)
    assert result.dispatches == ()
    assert result.pending[0].reason == "InsufficientCapacity"


def test_it_grows_into_room_that_appears_on_its_cluster() -> None:
    snapshot = make_snapshot(now=at(10)).clusters(
        cluster(used=1, held={"default/elastic": [0]})).add(
        make_entry("elastic").job(pods=4, gpu=8).elastic(1, running=1).admitted("spoke-1")
        .dispatched(at(0))).obj()
    result = dispatch_cycle(snapshot)
    assert result.resizes == (Resize(KEY, 4, "Grow", "room for 3 more pods: grows to 4 of 4"),)


def test_growth_never_takes_room_from_a_waiting_appwrapper_that_fits() -> None:
    snapshot = make_snapshot(now=at(10)).clusters(
        cluster(used=1, held={"default/elastic": [0]})).add(
        make_entry("elastic").job(pods=4, gpu=8).elastic(1, running=1).admitted("spoke-1")
        .dispatched(at(0)).priority(50),
        make_entry("waiting").job(pods=2, gpu=8).created(at(5))).obj()
    result = dispatch_cycle(snapshot)
    assert [d.key for d in result.dispatches] == ["default/waiting"]
    assert result.resizes == (Resize(KEY, 2, "Grow", "room for 1 more pod: grows to 2 of 4"),)


def test_priority_preemption_shrinks_an_elastic_appwrapper_instead_of_evicting_it() -> None:
    snapshot = make_snapshot(now=at(10)).clusters(
        cluster(used=4, held={"default/elastic": [0, 1, 2, 3]})).policy(priority=True).add(
        make_entry("elastic").job(pods=4, gpu=8).elastic(1, running=4).admitted("spoke-1")
        .dispatched(at(0)).priority(1),
        make_entry("urgent").job(pods=2, gpu=8).priority(100)).obj()
    result = dispatch_cycle(snapshot)
    assert result.evictions == ()
    (resize,) = result.resizes
    assert (resize.key, resize.pods, resize.reason) == (KEY, 2, "Shrink")
    (pending,) = result.pending
    assert pending.reason == "WaitingForPreemption"
    assert "default/elastic to 2 pods" in pending.message


def test_a_shrink_under_way_is_waited_for_not_ordered_again() -> None:
    # Admitted at 2 (the shrink was written), 4 pods still bound: 2 are leaving.
    snapshot = make_snapshot(now=at(10)).clusters(
        cluster(used=4, held={"default/elastic": [0, 1, 2, 3]})).policy(priority=True).add(
        make_entry("elastic").job(pods=4, gpu=8).elastic(1, running=2).admitted("spoke-1")
        .dispatched(at(0)).priority(1),
        make_entry("urgent").job(pods=2, gpu=8).priority(100)).obj()
    result = dispatch_cycle(snapshot)
    assert (result.evictions, result.resizes) == ((), ())
    assert "to finish shrinking" in result.pending[0].message


def test_a_half_done_shrink_holds_the_preemptors_room_and_never_grows_back() -> None:
    """Issue 19, defect 1. The shrink from 4 to 2 was written; one of the two pods that
    go is gone, one is still bound (3 nodes held). The room the shrink frees is the
    urgent gang's: it is held for it, and the elastic one does not grow back into it
    (that grow put 24 + 16 GPUs on a 32-GPU cluster)."""
    snapshot = make_snapshot(now=at(10)).clusters(
        cluster(used=3, held={"default/elastic": [0, 1, 2]})).policy(priority=True).add(
        make_entry("elastic").job(pods=4, gpu=8).elastic(1, running=2).admitted("spoke-1")
        .dispatched(at(0)).priority(1),
        make_entry("urgent").job(pods=2, gpu=8).priority(100)).obj()
    result = dispatch_cycle(snapshot)
    assert result.resizes == ()
    assert result.evictions == ()
    (pending,) = result.pending
    assert (pending.key, pending.reason) == ("default/urgent", "WaitingForPreemption")
    assert "to finish shrinking" in pending.message


def test_no_growth_while_a_shrink_is_under_way_even_with_no_one_waiting() -> None:
    # Admitted at 2, 3 pods still bound, a free node: the room is not taken back until
    # the leaving pod is gone (the next cycles decide on what is really free).
    snapshot = make_snapshot(now=at(10)).clusters(
        cluster(used=3, held={"default/elastic": [0, 1, 2]})).add(
        make_entry("elastic").job(pods=4, gpu=8).elastic(1, running=2).admitted("spoke-1")
        .dispatched(at(0)).priority(1)).obj()
    assert dispatch_cycle(snapshot).resizes == ()


def test_when_shrinking_to_the_minimum_is_not_enough_whole_appwrappers_are_evicted() -> None:
    snapshot = make_snapshot(now=at(10)).clusters(
        cluster(used=4, held={"default/elastic": [0, 1], "default/gang": [2, 3]})
    ).policy(priority=True).add(
        make_entry("elastic").job(pods=2, gpu=8).elastic(2, running=2).admitted("spoke-1")
        .dispatched(at(0)).priority(1),
        make_entry("gang").job(pods=2, gpu=8).admitted("spoke-1").dispatched(at(1))
        .priority(1),
        make_entry("urgent").job(pods=2, gpu=8).priority(100)).obj()
    result = dispatch_cycle(snapshot)
    assert result.resizes == ()
    assert len(result.evictions) == 1


def test_reclaim_shrinks_an_elastic_borrower_instead_of_evicting_it() -> None:
    # Silver runs 4 x 8 GPUs on a quota of 16 (16 borrowed from gold); gold wants 16 back.
    tree = (make_tree("t").node("root", gpu=32).child("gold", parent="root", gpu=16)
            .child("silver", parent="root", gpu=16).build())
    snapshot = make_snapshot(now=at(10)).clusters(
        cluster(used=4, held={"default/elastic": [0, 1, 2, 3]})).quota(tree).add(
        make_entry("elastic").job(pods=4, gpu=8).elastic(1, running=4).admitted("spoke-1")
        .dispatched(at(0)).priority(50).labels(t="silver"),
        make_entry("owner").job(pods=2, gpu=8).labels(t="gold")).obj()
    result = dispatch_cycle(snapshot)
    assert result.evictions == ()
    assert result.resizes == (Resize(KEY, 2, "Shrink", "shrunk to 2 pods to return borrowed "
                                                     "quota to default/owner"),)
    (pending,) = result.pending
    assert (pending.reason, pending.message) == (
        "WaitingForPreemption", "waiting for elastic AppWrappers to shrink: default/elastic "
                                "to 2 pods")


def test_reclaim_evicts_an_elastic_borrower_that_cannot_give_back_enough() -> None:
    tree = (make_tree("t").node("root", gpu=32).child("gold", parent="root", gpu=16)
            .child("silver", parent="root", gpu=16).build())
    snapshot = make_snapshot(now=at(10)).clusters(
        cluster(used=4, held={"default/elastic": [0, 1, 2, 3]})).quota(tree).add(
        make_entry("elastic").job(pods=4, gpu=8).elastic(3, running=4).admitted("spoke-1")
        .dispatched(at(0)).labels(t="silver"),
        make_entry("owner").job(pods=2, gpu=8).labels(t="gold")).obj()
    result = dispatch_cycle(snapshot)
    assert result.resizes == ()
    assert [e.key for e in result.evictions] == [KEY]


# -- properties ----------------------------------------------------------------------------

@st.composite
def elastic_worlds(draw: st.DrawFn) -> Snapshot:
    used = draw(st.integers(0, 4))
    quota = draw(st.integers(8, 40))
    tree = make_tree("t").node("root", gpu=quota).build()
    c = cluster(used=0)
    entries = []
    node = 0
    for i in range(draw(st.integers(0, 2))):  # admitted elastic ones
        full = draw(st.integers(1, 4))
        running = draw(st.integers(1, full))
        minimum = draw(st.integers(1, running))
        nodes = list(range(node, min(4, node + running)))
        if len(nodes) < running:
            break
        node += running
        for n in nodes:
            c.used(n, gpu=8).held(f"default/e{i}", n, gpu=8)
        entries.append(make_entry(f"e{i}").job(pods=full, gpu=8).elastic(minimum,
                                                                          running=running)
                       .admitted("spoke-1").dispatched(at(i)).labels(t="root")
                       .priority(draw(st.integers(0, 2))))
    for n in range(node, min(4, node + used)):
        c.used(n, gpu=8)
    for i in range(draw(st.integers(0, 3))):
        pods = draw(st.integers(1, 4))
        entry = make_entry(f"q{i}").job(pods=pods, gpu=draw(st.sampled_from([4, 8]))) \
            .labels(t="root").created(at(10 + i)).priority(draw(st.integers(0, 3)))
        if draw(st.booleans()):
            entry = entry.elastic(draw(st.integers(1, pods)))
        entries.append(entry)
    return make_snapshot(now=at(100)).clusters(c).quota(tree) \
        .policy(priority=draw(st.booleans())).add(*entries).obj()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(elastic_worlds())
def test_never_below_the_minimum_never_over_quota_or_nodes(snapshot: Snapshot) -> None:
    result = dispatch_cycle(snapshot)
    entries = {e.key: e for e in snapshot.appwrappers}
    for dispatch in result.dispatches:
        minimum = entries[dispatch.key].elastic_min
        if dispatch.pods is not None:
            assert minimum is not None and minimum <= dispatch.pods
    for resize in result.resizes:
        entry = entries[resize.key]
        assert entry.elastic_min is not None and entry.full_pods is not None
        assert entry.elastic_min <= resize.pods <= entry.full_pods
    # The hard root quota: what the cycle adds (dispatches, growth) fits in what is left.
    limit = snapshot.quota.limit("t", "root")["nvidia.com/gpu"]
    before = sum(e.demand.total.get("nvidia.com/gpu", 0) for e in snapshot.appwrappers
                 if e.demand is not None and isinstance(e.phase, Admitted))
    added = 0
    for dispatch in result.dispatches:
        demand = entries[dispatch.key].demand
        assert demand is not None
        added += demand.pod_sets[0].requests["nvidia.com/gpu"] * (dispatch.pods or demand.pods)
    for resize in result.resizes:
        demand = entries[resize.key].demand
        assert demand is not None
        if resize.pods > demand.pods:
            added += demand.pod_sets[0].requests["nvidia.com/gpu"] * (resize.pods - demand.pods)
    assert added == 0 or before + added <= limit
    # Nodes: growth and dispatches fit in what the nodes have free.
    (capacity,) = snapshot.clusters
    free = sum(n.allocatable.get("nvidia.com/gpu", 0) - n.requested.get("nvidia.com/gpu", 0)
               for n in capacity.nodes)
    assert added <= max(free, 0) or result.evictions or any(
        r.reason == "Shrink" for r in result.resizes)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(elastic_worlds())
def test_growth_never_jumps_the_queue(snapshot: Snapshot) -> None:
    with_growth = dispatch_cycle(snapshot)
    frozen = Snapshot(now=snapshot.now, clusters=snapshot.clusters, quota=snapshot.quota,
                      policy=snapshot.policy, appwrappers=tuple(
                          e if e.full_pods is None else
                          replace(e, full_pods=e.demand.pods if e.demand else None)
                          for e in snapshot.appwrappers))
    without = dispatch_cycle(frozen)
    assert [(d.key, d.pods) for d in with_growth.dispatches] == \
        [(d.key, d.pods) for d in without.dispatches]


def test_a_resize_sets_the_jobs_parallelism_and_keeps_the_pod_group_within_it() -> None:
    group = {"spec": {"minMember": 4}}
    assert resized_manifest("Job", "batch/v1", {"spec": {"parallelism": 4}}, 2) == \
        {"spec": {"parallelism": 2}}
    assert resized_manifest("PodGroup", "scheduling.x-k8s.io/v1alpha1", group, 2) == \
        {"spec": {"minMember": 2}}
    assert resized_manifest("PodGroup", "scheduling.x-k8s.io/v1alpha1", group, 4) == \
        {"spec": {"minMember": 4}}  # grown back: the template's gang again
    assert resized_manifest("ConfigMap", "v1", {"data": {}}, 2) is None


# -- the parts alone ---------------------------------------------------------------------

def test_shrink_plan_counts_pods_still_leaving_and_names_them_settling() -> None:
    snapshot = make_snapshot(now=at(10)).clusters(
        cluster(used=3, held={"default/elastic": [0, 1, 2]})).obj()
    books = CycleBooks(snapshot)
    urgent = make_entry("urgent").job(pods=2, gpu=8).obj()
    assert urgent.demand is not None
    held = snapshot.clusters[0].held_by[KEY]
    per_pod = urgent.demand.pod_sets[0].requests
    plan = shrink_plan(urgent.demand, books.board.pools[0], [
        ShrinkCandidate(Holder(KEY, 1, "spoke-1", per_pod.scale(2), at(0), held),
                        admitted=2, minimum=1, per_pod=per_pod)])
    assert plan is not None
    assert plan.orders == {}                      # nothing more to order
    assert list(plan.settling) == [KEY]           # one pod still leaving: counted as free
    assert len(plan.settling[KEY]) == 1


def test_start_small_leaves_the_board_as_it_found_it() -> None:
    snapshot = make_snapshot(now=at(10)).clusters(cluster(used=3)).add(
        make_entry("elastic").job(pods=4, gpu=8).elastic(1)).obj()
    books = CycleBooks(snapshot)
    entry = snapshot.appwrappers[0]
    assert entry.demand is not None
    assignment = books.assignment({})
    assert isinstance(assignment, QuotaAssignment)
    before = books.board.pools[0].total
    start = start_small(entry, entry.demand, quota=books.quota, assignment=assignment,
                        board=books.board, candidates=books.everywhere,
                        policy=books.policy.placement)
    assert start is not None and start.pods == 1
    assert books.board.pools[0].total == before
