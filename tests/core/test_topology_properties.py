"""Invariants of topology-aware placement on generated racked clusters: a required gang
never spans two domains of its level; no gang is spread over domains when one domain of
its level would hold it, and then it takes the tightest such domain; the pin holds every
node the gang uses; and through whole cycles, no node is over-committed."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcad.core.cycle.decide import AppWrapperEntry, Snapshot, dispatch_cycle
from mcad.core.placement.capacity import (
    AppWrapperKey,
    ClusterCapacity,
    ClusterName,
    NodeName,
    NodePool,
)
from mcad.core.placement.clusters import ClusterBoard
from mcad.core.placement.domains import free_of, tree_of
from mcad.core.placement.gangfit import fit_gang
from mcad.core.placement.nodefit import Placement
from mcad.core.quota.forest import QuotaForest
from mcad.core.workload.demand import Demand
from mcad.core.workload.resources import EMPTY, ResourceList
from mcad.core.workload.topology import HOSTNAME, TopologyRequest
from tests.builders.clusters import BLOCK, RACK, make_cluster, pod_set
from tests.builders.snapshots import at, demand_of

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
LEVELS = (BLOCK, RACK, HOSTNAME)
GPU = "nvidia.com/gpu"


@st.composite
def racked_clusters(draw: st.DrawFn) -> tuple[ClusterCapacity, ...]:
    out = []
    for c in range(draw(st.integers(1, 2))):
        cluster = make_cluster(f"c{c}").racks(blocks=draw(st.integers(1, 3)),
                                              racks=draw(st.integers(1, 3)),
                                              per_rack=draw(st.integers(1, 3)), gpu=8)
        built = cluster.obj()
        for index in range(len(built.nodes)):
            cluster.used(index, gpu=draw(st.sampled_from([0, 0, 2, 4, 6, 8])))
        out.append(cluster.obj())
    return tuple(out)


@st.composite
def gangs(draw: st.DrawFn) -> Demand:
    sets = [pod_set(draw(st.integers(1, 4)), gpu=draw(st.sampled_from([1, 2, 4, 8])),
                    source=f"set{j}") for j in range(draw(st.integers(1, 2)))]
    request = TopologyRequest(draw(st.sampled_from(LEVELS)), draw(st.booleans()), "test")
    return replace(demand_of(*sets), topology=request)


def _depth(demand: Demand) -> int:
    assert demand.topology is not None
    return LEVELS.index(demand.topology.level)


def _paths(cluster: ClusterCapacity, placement: Placement, depth: int) -> set[tuple[str, ...]]:
    """The domains of level ``depth`` holding the placement's nodes."""
    labels = {n.name: n.labels for n in cluster.nodes}
    return {tuple(labels[NodeName(node)].get(k, "") for k in LEVELS[:depth + 1])
            for node, _ in placement.pods}


def _fitting_domains(cluster: ClusterCapacity, demand: Demand) -> list[int]:
    """The free GPUs of every domain of the gang's level that holds it alone (tried one
    by one on a fresh pool: the brute force the placement must agree with)."""
    plain = replace(demand, topology=None)
    pool = NodePool.of(cluster)
    out = []
    for domain in tree_of(pool, LEVELS).at(_depth(demand)):
        if not isinstance(fit_gang(NodePool.of(cluster).within(domain.members), plain), str):
            out.append(free_of(pool, domain.members, GPU))
    return out


@SETTINGS
@given(racked_clusters(), gangs())
def test_a_required_gang_never_spans_two_domains(clusters: tuple[ClusterCapacity, ...],
                                                 demand: Demand) -> None:
    demand = replace(demand, topology=replace(demand.topology, required=True))
    placed = ClusterBoard(clusters).place(demand, tuple(range(len(clusters))))
    if not isinstance(placed, Placement):
        assert not any(_fitting_domains(c, demand) for c in clusters), placed.message
        return
    cluster = next(c for c in clusters if c.name == placed.cluster)
    assert len(_paths(cluster, placed, _depth(demand))) == 1


@SETTINGS
@given(racked_clusters(), gangs())
def test_no_gang_spreads_when_one_domain_would_hold_it_and_it_takes_the_tightest(
        clusters: tuple[ClusterCapacity, ...], demand: Demand) -> None:
    fitting = {c.name: _fitting_domains(c, demand) for c in clusters}
    placed = ClusterBoard(clusters).place(demand, tuple(range(len(clusters))))
    if not any(fitting.values()):
        return
    assert isinstance(placed, Placement), placed
    cluster = next(c for c in clusters if c.name == placed.cluster)
    (path,) = _paths(cluster, placed, _depth(demand))
    pool = NodePool.of(cluster)
    chosen = next(d for d in tree_of(pool, LEVELS).at(_depth(demand)) if d.path == path)
    tightest = min(free for frees in fitting.values() for free in frees)
    assert free_of(pool, chosen.members, GPU) == tightest


@SETTINGS
@given(racked_clusters(), gangs())
def test_the_pin_holds_every_node_the_gang_uses(clusters: tuple[ClusterCapacity, ...],
                                                demand: Demand) -> None:
    placed = ClusterBoard(clusters).place(demand, tuple(range(len(clusters))))
    if not isinstance(placed, Placement):
        return
    assert placed.pin is not None
    cluster = next(c for c in clusters if c.name == placed.cluster)
    labels = {n.name: n.labels for n in cluster.nodes}
    for node, _ in placed.pods:
        assert placed.pin.holds(labels[NodeName(node)])


@SETTINGS
@given(racked_clusters(), st.lists(gangs(), min_size=1, max_size=8))
def test_through_a_cycle_no_node_is_over_committed_and_required_gangs_stay_whole(
        clusters: tuple[ClusterCapacity, ...], demands: list[Demand]) -> None:
    entries = tuple(AppWrapperEntry(key=AppWrapperKey(f"ns/g{i}"), uid=f"u{i}", priority=0,
                                    created=at(i), demand=demand)
                    for i, demand in enumerate(demands))
    forest, _ = QuotaForest.build([])
    result = dispatch_cycle(Snapshot(at(100), entries, clusters, forest))
    free = {c.name: c.node_free() for c in clusters}
    placed: dict[tuple[ClusterName, NodeName], ResourceList] = {}
    by_key = {e.key: e for e in entries}
    for dispatch in result.dispatches:
        for node, requests in dispatch.placement.node_requests().items():
            key = (dispatch.cluster, node)
            placed[key] = placed.get(key, EMPTY) + requests
        demand = by_key[dispatch.key].demand
        assert demand is not None and demand.topology is not None
        if demand.topology.required:
            cluster = next(c for c in clusters if c.name == dispatch.cluster)
            assert len(_paths(cluster, dispatch.placement, _depth(demand))) == 1
    for (cluster_name, node), requests in placed.items():
        assert requests.fits_in(free[cluster_name][node])
