"""Topology in the dispatch cycle: a required gang waits with the sentence while its GPUs
are free but scattered, an unknown level is refused, the domain is held for the rest of
the cycle, the pin rides on the dispatch, preemption frees one rack, an elastic gang
grows only inside its domain, and a plain gang of the same shape is not held back by a
topology gang's misfit.

Clusters are ``racks(blocks=2, racks=2, per_rack=2)`` of 8-GPU nodes (nodes 1-2 b1/r1,
3-4 b1/r2, 5-6 b2/r1, 7-8 b2/r2)."""

from __future__ import annotations

from mcad.core.cycle.decide import NEVER_FITS_ROOM, dispatch_cycle
from mcad.core.workload.topology import HOSTNAME, TopologyPin
from tests.builders.clusters import BLOCK, RACK, ClusterBuilder, make_cluster
from tests.builders.snapshots import at, make_entry, make_snapshot


def racked(name: str = "spoke-1", *, full: tuple[int, ...] = (),
           half: tuple[int, ...] = ()) -> ClusterBuilder:
    cluster = make_cluster(name).racks(blocks=2, racks=2, per_rack=2, gpu=8)
    for index in full:
        cluster.used(index, gpu=8)
    for index in half:
        cluster.used(index, gpu=4)
    return cluster


def test_a_required_rack_gang_waits_while_its_gpus_are_free_but_scattered() -> None:
    snapshot = make_snapshot(now=at(10)).clusters(racked(half=(0, 2, 4, 6))).add(
        make_entry("train").job(pods=2, gpu=8, name="train").topology(required=RACK)).obj()
    result = dispatch_cycle(snapshot)
    assert result.dispatches == ()
    (pending,) = result.pending
    assert pending.reason == "InsufficientCapacity"
    assert pending.message == (
        "spoke-1: no rack holds the whole gang (16 nvidia.com/gpu), as its required rack "
        "(example.com/rack) asks: the closest, rack b1/r1, has 12 nvidia.com/gpu free: no "
        "node has 8 free nvidia.com/gpu for a pod of GenericItems[0] Job/train (largest "
        "free: 4 on node spoke-1-node-1) (1 of its 2 pods fit)")


def test_a_gang_bigger_than_any_rack_never_fits() -> None:
    snapshot = make_snapshot(now=at(10)).clusters(racked()).add(
        make_entry("big").job(pods=3, gpu=8).topology(required=RACK)).obj()
    (pending,) = dispatch_cycle(snapshot).pending
    assert pending.message.endswith(f"; {NEVER_FITS_ROOM}")


def test_a_level_no_cluster_knows_is_refused() -> None:
    snapshot = make_snapshot(now=at(10)).clusters(racked()).add(
        make_entry("row").job(gpu=8).topology(required="example.com/row")).obj()
    (pending,) = dispatch_cycle(snapshot).pending
    assert pending.reason == "NoMatchingCluster"
    assert pending.message.startswith(
        "no cluster it may use knows the topology level example.com/row it asks for "
        "(spec.schedulingSpec.topology.required): spoke-1 has no topology level")


def test_the_rack_free_only_on_spoke_2_and_the_pin_on_the_dispatch() -> None:
    snapshot = make_snapshot(now=at(10)).clusters(
        racked("spoke-1", half=(0, 2, 4, 6)),
        racked("spoke-2", full=(0, 1, 2, 3, 4, 5))).add(
        make_entry("train").job(pods=2, gpu=8).topology(required=RACK)).obj()
    (dispatch,) = dispatch_cycle(snapshot).dispatches
    assert dispatch.cluster == "spoke-2"
    assert dispatch.placement.pin == TopologyPin((BLOCK, RACK, HOSTNAME), (
        ("b2", "r2", "spoke-2-node-7"), ("b2", "r2", "spoke-2-node-8")))


def test_the_domain_is_held_for_the_rest_of_the_cycle() -> None:
    snapshot = make_snapshot(now=at(10)).clusters(racked(full=(0, 1, 2, 3, 4, 5))).add(
        make_entry("first").job(pods=2, gpu=8).topology(required=RACK).created(at(0)),
        make_entry("second").job(pods=2, gpu=8).topology(required=RACK).created(at(1)),
    ).obj()
    result = dispatch_cycle(snapshot)
    assert [d.key for d in result.dispatches] == ["default/first"]
    assert [p.key for p in result.pending] == ["default/second"]


def test_a_plain_gang_of_the_same_shape_is_not_held_back_by_a_topology_misfit() -> None:
    snapshot = make_snapshot(now=at(10)).clusters(racked(half=(0, 2, 4, 6))).add(
        make_entry("racked").job(pods=2, gpu=4).job(pods=1, gpu=8)
        .topology(required=HOSTNAME).created(at(0)),
        make_entry("plain").job(pods=2, gpu=4).job(pods=1, gpu=8).created(at(1))).obj()
    result = dispatch_cycle(snapshot)
    assert [d.key for d in result.dispatches] == ["default/plain"]


def test_preemption_frees_the_cheapest_rack() -> None:
    """Rack b1/r1 runs three priority-0 jobs (two of 4 GPUs on node 1, one of 8 on node
    2); rack b2/r2 two priority-1 jobs of 8; the other racks priority-3 jobs. Victims
    taken cheapest-first over the whole cluster would be the three of b1/r1; inside one
    rack at a time, b2/r2 frees the same 16 GPUs with two evictions."""
    cluster = racked(full=tuple(range(8)))
    jobs = [("a", 0, 4, 0), ("b", 0, 4, 0), ("c", 1, 8, 0), ("d", 2, 8, 3), ("e", 3, 8, 3),
            ("f", 4, 8, 3), ("g", 5, 8, 3), ("h", 6, 8, 1), ("i", 7, 8, 1)]
    entries = []
    for name, node, gpus, priority in jobs:
        cluster.held(f"default/{name}", node, gpu=gpus)
        entries.append(make_entry(name).job(gpu=gpus).priority(priority)
                       .admitted("spoke-1").dispatched(at(0)))
    snapshot = make_snapshot(now=at(10)).clusters(cluster).policy(priority=True).add(
        *entries, make_entry("train").job(pods=2, gpu=8).topology(required=RACK)
        .priority(9)).obj()
    result = dispatch_cycle(snapshot)
    assert sorted(e.key for e in result.evictions) == ["default/h", "default/i"]
    (pending,) = [p for p in result.pending if p.key == "default/train"]
    assert pending.reason == "WaitingForPreemption"


def test_an_elastic_gang_grows_only_inside_its_domain() -> None:
    """Pinned to rack b1/r1, whose other node is full: room elsewhere is not its."""
    pin = TopologyPin((BLOCK, RACK), (("b1", "r1"),))
    running = make_entry("elastic").job(pods=4, gpu=8).topology(required=RACK) \
        .elastic(1, running=1).admitted("spoke-1", pin).dispatched(at(0))
    snapshot = make_snapshot(now=at(10)).clusters(racked(full=(0, 1))).add(running).obj()
    assert dispatch_cycle(snapshot).resizes == ()
    roomy = make_snapshot(now=at(10)).clusters(racked(full=(0,))).add(running).obj()
    (grow,) = dispatch_cycle(roomy).resizes
    assert (grow.pods, grow.reason) == (2, "Grow")
    assert grow.message == "room for 1 more pod: grows to 2 of 4 in rack b1/r1"
