"""Fair order and minimal victims: an AppWrapper within its own quota node's quota is
never passed by one that must borrow; among borrowers the node with the smallest share
goes first; priority (grown by priorityslope) orders a node's own; capacity victims are
whole AppWrappers on one cluster, the fewest that free the least, none of them spare."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcad.core.cycle.decide import dispatch_cycle
from mcad.core.cycle.snapshot import AppWrapperEntry
from mcad.core.placement.capacity import AppWrapperKey, NodeCapacity, NodeName, NodePool
from mcad.core.placement.victims import Holder, capacity_victims, gang_fits_without
from mcad.core.quota.fairness import FairOrder, effective_priority
from mcad.core.quota.forest import QuotaAssignment, QuotaForest
from mcad.core.workload.resources import ResourceList
from tests.builders.clusters import make_cluster, pod_set
from tests.builders.quota import make_tree
from tests.builders.snapshots import at, demand_of, make_entry, make_snapshot

TREE = "team"


def teams(a: int = 8, b: int = 8, root: int = 16) -> QuotaForest:
    return (make_tree(TREE).node("root", gpu=root).child("a", parent="root", gpu=a)
            .child("b", parent="root", gpu=b).build())


def order(entries: list[AppWrapperEntry], forest: QuotaForest) -> FairOrder[AppWrapperEntry]:
    return FairOrder(entries, now=at(1000), forest=forest,
                     assignments_of=lambda es: [forest.resolve(e.quota_labels) for e in es],
                     demands_of=lambda es: [e.demand.total if e.demand else None for e in es])


def test_a_team_under_its_quota_goes_before_a_backlog_that_borrows() -> None:
    forest = teams()
    backlog = [make_entry(f"a{i}").job(gpu=4).labels(team="a").created(at(i)).obj()
               for i in range(6)]
    late = make_entry("b0").job(gpu=4).labels(team="b").created(at(500)).obj()
    fair = order([*backlog, late], forest)
    seen = []
    for entry in fair:
        seen.append(entry.key)
        assignment = forest.resolve(entry.quota_labels)
        assert isinstance(assignment, QuotaAssignment)
        forest.charge(assignment, entry.demand.total)  # type: ignore[union-attr]
        fair.charged(assignment)
    # a0, a1 are within a's 8; then b0 (within b's 8) before a's borrowing backlog.
    assert seen[:3] == ["default/a0", "default/a1", "default/b0"]


def test_borrowers_take_turns_by_the_smallest_share() -> None:
    forest = teams(a=4, b=4)
    a = [make_entry(f"a{i}").job(gpu=4).labels(team="a").created(at(i)).obj()
         for i in range(4)]
    b = [make_entry(f"b{i}").job(gpu=4).labels(team="b").created(at(100 + i)).obj()
         for i in range(4)]
    fair = order([*a, *b], forest)
    seen = []
    for entry in fair:
        seen.append(entry.key[-2:])
        assignment = forest.resolve(entry.quota_labels)
        assert isinstance(assignment, QuotaAssignment)
        forest.charge(assignment, entry.demand.total)  # type: ignore[union-attr]
        fair.charged(assignment)
    assert seen == ["a0", "b0", "a1", "b1", "a2", "b2", "a3", "b3"]


def test_priorityslope_grows_priority_with_the_time_waited() -> None:
    patient = make_entry("patient").job(gpu=1).priority(1).slope(0.01).created(at(0)).obj()
    eager = make_entry("eager").job(gpu=1).priority(5).created(at(990)).obj()
    assert effective_priority(patient, at(1000)) == 11.0
    forest = QuotaForest.build([])[0]
    assert [e.key for e in order([eager, patient], forest)] == ["default/patient",
                                                                 "default/eager"]


@st.composite
def queues(draw: st.DrawFn) -> tuple[list[AppWrapperEntry], QuotaForest, list[bool]]:
    quotas = [draw(st.integers(0, 16)) for _ in range(3)]
    tree = make_tree(TREE).node("root", gpu=draw(st.integers(8, 48)))
    for name, quota in zip("abc", quotas, strict=True):
        tree = tree.child(name, parent="root", gpu=quota)
    forest = tree.build()
    entries = [make_entry(f"e{i}").job(gpu=draw(st.sampled_from([1, 2, 4, 8])))
               .labels(team=draw(st.sampled_from("abc"))).priority(draw(st.integers(0, 3)))
               .created(at(draw(st.integers(0, 100)))).obj()
               for i in range(draw(st.integers(1, 20)))]
    dispatch = [draw(st.booleans()) for _ in entries]
    return entries, forest, dispatch


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queues())
def test_no_appwrapper_within_its_quota_waits_behind_a_borrower(
        case: tuple[list[AppWrapperEntry], QuotaForest, list[bool]]) -> None:
    entries, forest, dispatch = case
    fair = order(entries, forest)
    groups = list(fair.groups.values())
    for step, entry in enumerate(fair):
        demand = entry.demand.total  # type: ignore[union-attr]
        assignment = forest.resolve(entry.quota_labels)
        assert isinstance(assignment, QuotaAssignment)
        if not forest.within_own_quota(assignment, demand):
            for group in groups:
                if group.assignment != assignment and group.position < len(group.entries):
                    head = group.entries[group.position]
                    assert not forest.within_own_quota(
                        group.assignment, head.demand.total), \
                        f"{head.key} is within its quota and waits behind borrower {entry.key}"
        if dispatch[step]:
            forest.charge(assignment, demand)
            fair.charged(assignment)


def reference_order(entries: list[AppWrapperEntry], forest: QuotaForest,
                    dispatch: list[bool], *, fair: bool = True) -> list[str]:
    """The fair order's rule, stated the long way: at each step every group's head is
    placed anew ((0, rank) within its own quota, else (1, share, rank)) and the least
    goes; a dispatched one is charged before the next step."""
    ranked = sorted(entries, key=lambda e: (-e.priority, e.created, e.uid))
    rank = {e.key: r for r, e in enumerate(ranked)}
    groups: dict[QuotaAssignment, list[AppWrapperEntry]] = {}
    for entry in ranked:
        assignment = forest.resolve(entry.quota_labels)
        assert isinstance(assignment, QuotaAssignment)
        groups.setdefault(assignment, []).append(entry)
    several = len(groups) > 1 and fair  # (fair sharing off: priority order alone)
    taken: list[str] = []
    while any(groups.values()):
        def place(item: tuple[QuotaAssignment, list[AppWrapperEntry]]) -> tuple[Any, ...]:
            assignment, queue = item
            head = queue[0]
            if not several or forest.within_own_quota(assignment, head.demand.total):  # type: ignore[union-attr]
                return (0, 0.0, rank[head.key])
            return (1, forest.share(assignment), rank[head.key])
        assignment, queue = min(((a, q) for a, q in groups.items() if q), key=place)
        head = queue.pop(0)
        if dispatch[len(taken)]:
            forest.charge(assignment, head.demand.total)  # type: ignore[union-attr]
        taken.append(head.key)
    return taken


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queues(), st.booleans(), st.booleans())
def test_the_order_in_runs_is_the_rule_stated_step_by_step(
        case: tuple[list[AppWrapperEntry], QuotaForest, list[bool]], by_runs: bool,
        fair: bool) -> None:
    """``FairOrder`` works out whole runs ahead (``runs``; ``__iter__`` reads them one
    entry at a time) and is cut where a dispatch changes usage: it gives the order the
    rule gives step by step, whichever way it is read, with fair sharing on or off (off:
    priority order, each run one quota node's), each entry under its own assignment."""
    entries, forest, dispatch = case
    want = reference_order(entries, forest.copy(), dispatch, fair=fair)
    fair_order = FairOrder(entries, now=at(1000), forest=forest, fair=fair,
                           assignments_of=lambda es: [forest.resolve(e.quota_labels)
                                                      for e in es],
                           demands_of=lambda es: [e.demand.total if e.demand else None
                                                  for e in es])
    got: list[str] = []

    def decided(entry: AppWrapperEntry) -> bool:
        """Whether usage changed."""
        assert fair_order.assignment == forest.resolve(entry.quota_labels)  # (its own)
        if dispatch[len(got)]:
            assert fair_order.assignment is not None
            forest.charge(fair_order.assignment, entry.demand.total)  # type: ignore[union-attr]
            fair_order.charged(fair_order.assignment)
        got.append(entry.key)
        return dispatch[len(got) - 1]

    if by_runs:
        for run, start, stop in fair_order.runs():
            for position in range(start, stop):
                if decided(run[position]):
                    fair_order.cut = position + 1
                    break
    else:
        for entry in fair_order:
            decided(entry)
    assert got == want


# -- minimal victims ---------------------------------------------------------------------

def holder(key: str, node: str, gpu: int, priority: int = 0, age: int = 0) -> Holder:
    return Holder(AppWrapperKey(key), priority, "c", ResourceList.of(gpu=gpu),
                  at(1000 - age), ((NodeName(node), ResourceList.of(gpu=gpu)),))


@st.composite
def crowded(draw: st.DrawFn) -> tuple[NodePool, list[Holder], Any]:
    nodes = draw(st.integers(1, 4))
    holders: list[Holder] = []
    for n in range(nodes):
        left = 8
        while left > 0 and draw(st.booleans()):
            gpu = draw(st.integers(1, left))
            holders.append(holder(f"h{len(holders)}", f"n{n}", gpu,
                                  draw(st.integers(0, 3)), draw(st.integers(0, 100))))
            left -= gpu
    used: dict[str, int] = {}
    for h in holders:
        for node, requests in h.pods_on:
            used[node] = used.get(node, 0) + requests["nvidia.com/gpu"] // 10**9
    pool = NodePool(NodeCapacity(NodeName(f"n{n}"), ResourceList.of(gpu=8),
                                 requested=ResourceList.of(gpu=used.get(f"n{n}", 0)))
                    for n in range(nodes))
    demand = demand_of(pod_set(draw(st.integers(1, 2)), gpu=draw(st.sampled_from([2, 4, 8]))))
    return pool, holders, demand


@settings(max_examples=300, deadline=None)
@given(crowded())
def test_capacity_victims_are_enough_and_none_is_spare(
        case: tuple[NodePool, list[Holder], Any]) -> None:
    pool, holders, demand = case
    victims = capacity_victims(demand, pool, holders)
    if victims is None:
        assert (gang_fits_without(pool, demand, ())
                or not gang_fits_without(pool, demand, holders))
        return
    assert not gang_fits_without(pool, demand, ())
    assert gang_fits_without(pool, demand, victims)
    for spare in victims:
        rest = [v for v in victims if v is not spare]
        assert not gang_fits_without(pool, demand, rest), f"{spare.key} was not needed"


def test_one_victim_is_the_one_that_frees_the_least() -> None:
    pool = NodePool([NodeCapacity(NodeName("n0"), ResourceList.of(gpu=8),
                                  requested=ResourceList.of(gpu=8)),
                     NodeCapacity(NodeName("n1"), ResourceList.of(gpu=8),
                                  requested=ResourceList.of(gpu=8))])
    holders = [holder("big", "n0", 8, priority=0), holder("small", "n1", 4, priority=2),
               holder("small-old", "n1", 4, priority=2, age=50)]
    victims = capacity_victims(demand_of(pod_set(1, gpu=4)), pool, holders)
    assert [v.key for v in victims or []] == ["small"]  # fewest GPUs; newest of equals


def test_priority_preemption_frees_one_cluster_for_a_high_priority_gang() -> None:
    snapshot = make_snapshot(now=at(100)).clusters(
        make_cluster("spoke-1").nodes(4, gpu=8).used(0, gpu=8).used(1, gpu=8).used(2, gpu=8)
        .used(3, gpu=8).held("default/w0", 0, gpu=8).held("default/w1", 1, gpu=8)
        .held("default/w2", 2, gpu=8).held("default/w3", 3, gpu=8)
    ).policy(priority=True).add(
        *(make_entry(f"w{i}").job(gpu=8).priority(1).admitted("spoke-1")
          .dispatched(at(i)) for i in range(4)),
        make_entry("urgent").job(pods=2, gpu=8).priority(100)).obj()
    result = dispatch_cycle(snapshot)
    assert sorted(e.key for e in result.evictions) == ["default/w2", "default/w3"]
    (pending,) = result.pending
    assert pending.reason == "WaitingForPreemption"
    assert "on cluster spoke-1" in pending.message
    again = dispatch_cycle(snapshot)
    assert again == result
