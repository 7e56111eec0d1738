"""Capacity math: per-node free room, reservations placed first, cluster totals, and
which nodes may take which pods (nodeSelector, taints, cordoned, not ready)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from mcad.core.placement.capacity import NodePool, blocking_taints
from mcad.core.workload.demand import PodSet, Taint, Toleration
from mcad.core.workload.resources import ResourceList
from tests.builders.clusters import ClusterBuilder, NodeBuilder, make_cluster, make_node, pod_set


@dataclass
class TotalsCase:
    id: str
    cluster: ClusterBuilder
    want_capacity: dict[str, int | str]
    want_allocatable: dict[str, int | str]
    want_free: dict[str, int | str]
    want_node_free: dict[str, dict[str, int | str]] = field(default_factory=dict)


TOTALS = [
    TotalsCase(
        id="empty nodes: everything free",
        cluster=make_cluster("c").nodes(2, gpu=8, cpu=32),
        want_capacity={"gpu": 16, "cpu": 64}, want_allocatable={"gpu": 16, "cpu": 64},
        want_free={"gpu": 16, "cpu": 64},
    ),
    TotalsCase(
        id="bound pods' requests are not free",
        cluster=make_cluster("c").nodes(2, gpu=8, cpu=32).used(0, gpu=6, cpu=4),
        want_capacity={"gpu": 16, "cpu": 64}, want_allocatable={"gpu": 16, "cpu": 64},
        want_free={"gpu": 10, "cpu": 60},
        want_node_free={"c-node-1": {"gpu": 2, "cpu": 28}, "c-node-2": {"gpu": 8, "cpu": 32}},
    ),
    TotalsCase(
        id="an over-committed node has zero free, not negative",
        cluster=make_cluster("c").nodes(1, gpu=8).used(0, gpu=9),
        want_capacity={"gpu": 8}, want_allocatable={"gpu": 8}, want_free={},
    ),
    TotalsCase(
        id="cordoned and not-ready nodes count in capacity only",
        cluster=make_cluster("c").nodes(3, gpu=8).cordon(1).node_not_ready(2),
        want_capacity={"gpu": 24}, want_allocatable={"gpu": 8}, want_free={"gpu": 8},
        want_node_free={"c-node-1": {"gpu": 8}},
    ),
    TotalsCase(
        id="reservations take room first-fit in node order",
        cluster=(make_cluster("c").nodes(2, gpu=8)
                 .reserve("ns/a", pod_set(3, gpu=4))),
        want_capacity={"gpu": 16}, want_allocatable={"gpu": 16}, want_free={"gpu": 4},
        want_node_free={"c-node-1": {}, "c-node-2": {"gpu": 4}},
    ),
    TotalsCase(
        id="a reservation pod that fits nowhere claims nothing",
        cluster=(make_cluster("c").nodes(1, gpu=8).reserve("ns/a", pod_set(2, gpu=6))),
        want_capacity={"gpu": 8}, want_allocatable={"gpu": 8}, want_free={"gpu": 2},
    ),
    TotalsCase(
        id="reservations honour taints: a tainted node is skipped",
        cluster=(make_cluster("c").nodes(2, gpu=8).taint("infra", nodes=[0])
                 .reserve("ns/a", pod_set(1, gpu=8))),
        want_capacity={"gpu": 16}, want_allocatable={"gpu": 16}, want_free={"gpu": 8},
        want_node_free={"c-node-1": {"gpu": 8}, "c-node-2": {}},
    ),
]


@pytest.mark.parametrize("case", TOTALS, ids=lambda c: c.id)
def test_cluster_totals(case: TotalsCase) -> None:
    cluster = case.cluster.obj()
    assert cluster.capacity() == ResourceList.of(**case.want_capacity)
    assert cluster.allocatable() == ResourceList.of(**case.want_allocatable)
    assert cluster.free() == ResourceList.of(**case.want_free)
    node_free = cluster.node_free()
    for name, want in case.want_node_free.items():
        assert node_free[name] == ResourceList.of(**want), name


@dataclass
class AcceptCase:
    id: str
    node: NodeBuilder
    pods: PodSet
    want: bool


ACCEPTS = [
    AcceptCase("plain node takes a plain pod", make_node("n").alloc(gpu=8), pod_set(), True),
    AcceptCase("NoSchedule taint blocks", make_node("n").taint("gpu", "a100"), pod_set(),
               False),
    AcceptCase("NoExecute taint blocks", make_node("n").taint("gpu", effect="NoExecute"),
               pod_set(), False),
    AcceptCase("PreferNoSchedule does not block",
               make_node("n").taint("gpu", effect="PreferNoSchedule"), pod_set(), True),
    AcceptCase("Equal toleration with the value lets it in",
               make_node("n").taint("gpu", "a100"),
               pod_set(tolerations=[Toleration("gpu", "Equal", "a100")]), True),
    AcceptCase("Equal toleration with another value does not",
               make_node("n").taint("gpu", "a100"),
               pod_set(tolerations=[Toleration("gpu", "Equal", "h100")]), False),
    AcceptCase("Exists toleration ignores the value",
               make_node("n").taint("gpu", "a100"),
               pod_set(tolerations=[Toleration("gpu", "Exists")]), True),
    AcceptCase("toleration for another effect does not help",
               make_node("n").taint("gpu", "a100", "NoExecute"),
               pod_set(tolerations=[Toleration("gpu", "Equal", "a100", "NoSchedule")]), False),
    AcceptCase("empty key Exists tolerates everything",
               make_node("n").taint("a").taint("b", effect="NoExecute"),
               pod_set(tolerations=[Toleration("", "Exists")]), True),
    AcceptCase("every taint must be tolerated",
               make_node("n").taint("a").taint("b"),
               pod_set(tolerations=[Toleration("a", "Exists")]), False),
    AcceptCase("nodeSelector matches labels",
               make_node("n").label(gpu="a100", zone="z1"),
               pod_set(node_selector={"gpu": "a100"}), True),
    AcceptCase("nodeSelector with a wrong value",
               make_node("n").label(gpu="v100"), pod_set(node_selector={"gpu": "a100"}),
               False),
    AcceptCase("nodeSelector with a missing label", make_node("n"),
               pod_set(node_selector={"gpu": "a100"}), False),
    AcceptCase("cordoned node takes nothing", make_node("n").cordoned(), pod_set(), False),
    AcceptCase("not-ready node takes nothing", make_node("n").not_ready(), pod_set(), False),
]


@pytest.mark.parametrize("case", ACCEPTS, ids=lambda c: c.id)
def test_node_accepts(case: AcceptCase) -> None:
    assert case.node.obj().accepts(case.pods) is case.want


def test_blocking_taints_lists_only_untolerated_blocking_ones() -> None:
    taints = [Taint("a"), Taint("b", effect="PreferNoSchedule"), Taint("c", effect="NoExecute")]
    assert blocking_taints(taints, [Toleration("a", "Exists")]) == [taints[2]]


@dataclass
class FitCase:
    id: str
    cluster: ClusterBuilder
    pods: PodSet
    count: int
    want_takes: list[tuple[int, int]]


FITS = [
    FitCase("several pods share a node", make_cluster("c").nodes(2, gpu=8),
            pod_set(gpu=2), 4, [(0, 4)]),
    FitCase("first fit spills to the next node", make_cluster("c").nodes(2, gpu=8),
            pod_set(gpu=4), 3, [(0, 2), (1, 1)]),
    FitCase("4+4 free GPUs do not hold one 8-GPU pod",
            make_cluster("c").nodes(2, gpu=8).used(0, gpu=4).used(1, gpu=4),
            pod_set(gpu=8), 1, []),
    FitCase("the scarcest resource limits pods per node",
            make_cluster("c").nodes(1, gpu=8, cpu=4), pod_set(gpu=1, cpu=2), 3, []),
    FitCase("a resource the node lacks never fits",
            make_cluster("c").nodes(1, cpu=8), pod_set(gpu=1), 1, []),
    FitCase("a pod that requests nothing fits anywhere",
            make_cluster("c").nodes(1, cpu=1), pod_set(), 5, [(0, 5)]),
]


@pytest.mark.parametrize("case", FITS, ids=lambda c: c.id)
def test_node_pool_fit(case: FitCase) -> None:
    pool = NodePool.of(case.cluster.obj())
    assert pool.fit(case.pods, case.count) == case.want_takes


def test_take_and_give_back_restore_the_pool() -> None:
    pool = NodePool.of(make_cluster("c").nodes(2, gpu=8, cpu=8).obj())
    pods = pod_set(gpu=4, cpu=1)
    before = ([dict(f) for f in pool.free], dict(pool.total))
    takes = pool.fit(pods, 3)
    pool.take(pods, takes)
    assert pool.total == {"nvidia.com/gpu": 4 * 10**9, "cpu": 13 * 10**9}
    pool.give_back(pods, takes)
    assert ([dict(f) for f in pool.free], dict(pool.total)) == before


def test_empty_pool_ignores_bound_pods() -> None:
    cluster = make_cluster("c").nodes(1, gpu=8).used(0, gpu=8).obj()
    assert NodePool.of(cluster).fit(pod_set(gpu=8), 1) == []
    assert NodePool.empty(cluster.nodes).fit(pod_set(gpu=8), 1) == [(0, 1)]
