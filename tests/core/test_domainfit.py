"""A gang inside topology domains: the tightest domain where it fits, the fewest when it
may spread, the sentence naming the domain that came closest, the cluster and the domain
chosen together, the pin, victims inside one domain, and what explain shows per domain.

The clusters are ``racks(blocks=2, racks=2, per_rack=2)``: nodes 1-2 in b1/r1, 3-4 in
b1/r2, 5-6 in b2/r1, 7-8 in b2/r2 (indices 0-7), 8 GPUs each, levels block, rack, host.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pytest

from mcad.core.placement.capacity import AppWrapperKey, NodeName, NodePool
from mcad.core.placement.clusters import ClusterBoard, choose_cluster, place
from mcad.core.placement.domainfit import (
    DomainVerdict,
    candidates_knowing,
    domain_verdicts,
    domain_victims,
    fit_in_domains,
)
from mcad.core.placement.domains import summary
from mcad.core.placement.nodefit import NoFit, Placement
from mcad.core.placement.victims import Holder
from mcad.core.workload.demand import Demand
from mcad.core.workload.resources import ResourceList
from mcad.core.workload.topology import HOSTNAME, TopologyPin, TopologyRequest
from tests.builders.clusters import BLOCK, RACK, ClusterBuilder, make_cluster, pod_set
from tests.builders.snapshots import demand_of

GPU = 10**9
"""One GPU in the core's nano-units."""


def racked(name: str = "s") -> ClusterBuilder:
    return make_cluster(name).racks(blocks=2, racks=2, per_rack=2, gpu=8)


def gang(pods: int, gpu: int, *, required: str | None = None, preferred: str | None = None,
         source: str = "w") -> Demand:
    level = required or preferred
    assert level is not None
    return replace(demand_of(pod_set(pods, gpu=gpu, source=source)),
                   topology=TopologyRequest(level, required is not None, "test"))


def hosts(placement: Placement | NoFit) -> list[tuple[str, int]]:
    assert isinstance(placement, Placement), placement
    return list(placement.pods)


@dataclass
class FitCase:
    id: str
    cluster: ClusterBuilder
    demand: Demand
    want_pods: Sequence[tuple[str, int]] | None = None
    want_pin: Sequence[str] | None = None
    """The pinned domains' paths, joined with '/'."""
    want_message: str | None = None


FITS = [
    FitCase(
        "required rack: the tightest rack that holds the gang",
        racked().used(0, gpu=8).used(2, gpu=4),  # b1/r1: 8 free, b1/r2: 12, others 16
        gang(1, 8, required=RACK),
        want_pods=[("s-node-2", 1)], want_pin=["b1/r1/s-node-2"]),
    FitCase(
        "required rack: inside the rack, the fullest node first",
        racked().used(2, gpu=4).used(3, gpu=0),  # b1/r2: 4 + 8 free, the tightest with 12
        gang(1, 4, required=RACK),
        want_pods=[("s-node-3", 1)]),
    FitCase(
        "required rack: free GPUs scattered over racks do not hold a 2 x 8 gang",
        racked().used(0, gpu=4).used(2, gpu=4).used(4, gpu=4).used(6, gpu=4),
        gang(2, 8, required=RACK, source="GenericItems[0] Job/train"),
        want_message="no rack holds the whole gang (16 nvidia.com/gpu), as its required "
                     "rack (example.com/rack) asks: the closest, rack b1/r1, has 12 "
                     "nvidia.com/gpu free: no node has 8 free nvidia.com/gpu for a pod of "
                     "GenericItems[0] Job/train (largest free: 4 on node s-node-1) (1 of "
                     "its 2 pods fit)"),
    FitCase(
        "rack values repeat across blocks: b2/r1 is not b1/r1",
        racked().used(0, gpu=8).used(1, gpu=8).used(2, gpu=8).used(3, gpu=8).used(6, gpu=8),
        gang(2, 8, required=RACK),
        want_pods=[("s-node-5", 1), ("s-node-6", 1)], want_pin=["b2/r1/s-node-5",
                                                              "b2/r1/s-node-6"]),
    FitCase(
        "required block: the whole gang in one block, in as few racks as it can",
        racked().used(0, gpu=8).used(2, gpu=4).used(4, gpu=8).used(5, gpu=8).used(6, gpu=8)
        .used(7, gpu=8),  # b1: r1 has 8 free, r2 4 + 8; b2 is full
        gang(3, 4, required=BLOCK),
        want_pods=[("s-node-3", 1), ("s-node-4", 2)]),
    FitCase(
        "required block: the tightest block, even where it needs two racks",
        racked().used(0, gpu=8).used(3, gpu=4).used(5, gpu=8).used(6, gpu=8),
        gang(3, 4, required=BLOCK),  # b1 has 20 free (r2 alone holds it), b2 16 in 2 racks
        want_pods=[("s-node-5", 2), ("s-node-8", 1)]),
    FitCase(
        "preferred rack that no rack holds: the tightest block, the fewest racks",
        racked().used(1, gpu=8).used(3, gpu=8).used(4, gpu=4).used(6, gpu=4),
        gang(2, 8, preferred=RACK),  # one 8-GPU node per rack; b1 16 free, b2 24
        want_pods=[("s-node-1", 1), ("s-node-3", 1)],
        want_pin=["b1/r1/s-node-1", "b1/r2/s-node-3"]),
    FitCase(
        "preferred rack that no block holds: across blocks, the fewest racks",
        racked().used(0, gpu=8).used(2, gpu=8).used(4, gpu=8).used(6, gpu=8),
        gang(3, 8, preferred=RACK),
        want_pods=[("s-node-2", 1), ("s-node-4", 1), ("s-node-6", 1)]),
    FitCase(
        "hostname as the required level: one node",
        racked().used(0, gpu=2),
        gang(2, 3, required=HOSTNAME),
        want_pods=[("s-node-1", 2)], want_pin=["b1/r1/s-node-1"]),
    FitCase(
        "a cluster with no declared levels: the label as it stands",
        make_cluster("s").nodes(4, gpu=8).levels().node_label(0, RACK, "x")
        .node_label(1, RACK, "x").node_label(2, RACK, "y").used(0, gpu=8),
        gang(2, 8, required=RACK),  # node 4, outside every rack, does not count
        want_message="no rack holds the whole gang (16 nvidia.com/gpu), as its required "
                     "rack (example.com/rack) asks: the closest, rack x, has 8 "
                     "nvidia.com/gpu free: no node has 8 free nvidia.com/gpu for a pod of w "
                     "(largest free: 0 on node s-node-1) (1 of its 2 pods fit)"),
    FitCase(
        "a cluster with no declared levels: a rack label that holds the gang",
        make_cluster("s").nodes(4, gpu=8).levels().node_label(0, RACK, "x")
        .node_label(1, RACK, "y").node_label(2, RACK, "y").used(0, gpu=8),
        gang(2, 8, required=RACK),
        want_pods=[("s-node-2", 1), ("s-node-3", 1)], want_pin=["y"]),
    FitCase(
        "a level the cluster does not declare",
        racked(), gang(1, 8, required="example.com/row"),
        want_message="s has no topology level example.com/row (its levels: "
                     "example.com/block, example.com/rack, kubernetes.io/hostname)"),
]


@pytest.mark.parametrize("case", FITS, ids=lambda c: c.id)
def test_a_gang_inside_domains(case: FitCase) -> None:
    got = place(case.demand, case.cluster.obj())
    if case.want_message is not None:
        assert isinstance(got, NoFit), got
        assert got.message.startswith(case.want_message)
        return
    assert isinstance(got, Placement), got
    if case.want_pods is not None:
        assert list(got.pods) == list(case.want_pods)
    if case.want_pin is not None:
        assert got.pin is not None
        assert ["/".join(d) for d in got.pin.domains] == list(case.want_pin)


def test_an_elastic_gang_is_pinned_to_whole_domains_of_its_level() -> None:
    demand = gang(1, 8, required=RACK)
    assert demand.topology is not None
    grows = replace(demand, topology=replace(demand.topology, grows=True))
    got = place(grows, racked().used(0, gpu=8).obj())
    assert isinstance(got, Placement)
    assert got.pin == TopologyPin((BLOCK, RACK), (("b1", "r1"),))


def test_the_fit_says_how_far_it_spread() -> None:
    cluster = racked().used(1, gpu=8).used(3, gpu=8).used(4, gpu=4).used(6, gpu=4).obj()
    fit = fit_in_domains(NodePool.of(cluster), gang(2, 8, preferred=RACK))
    assert not isinstance(fit, str)
    assert (fit.rise, fit.spread, fit.leftover) == (1, 2, 0), "one level up, two full racks"
    fit = fit_in_domains(NodePool.of(cluster), gang(3, 8, preferred=RACK))
    assert not isinstance(fit, str)
    assert (fit.rise, fit.spread) == (2, 3), "no block holds 3 x 8: three racks of two"


# -- clusters and domains together ------------------------------------------------------------

def test_the_rack_free_only_on_spoke_2_takes_the_gang_there() -> None:
    """best-fit alone would pick spoke-1 (fuller); its free GPUs are in no one rack."""
    spoke_1 = racked("spoke-1").used(0, gpu=4).used(2, gpu=4).used(4, gpu=4).used(6, gpu=4)
    spoke_2 = racked("spoke-2").used(0, gpu=8).used(1, gpu=8).used(2, gpu=8).used(3, gpu=8) \
        .used(4, gpu=8).used(5, gpu=8)
    got = choose_cluster(gang(2, 8, required=RACK), [spoke_1.obj(), spoke_2.obj()])
    assert hosts(got) == [("spoke-2-node-7", 1), ("spoke-2-node-8", 1)]
    assert isinstance(got, Placement) and got.cluster == "spoke-2"
    assert got.pin == TopologyPin((BLOCK, RACK, HOSTNAME), (
        ("b2", "r2", "spoke-2-node-7"), ("b2", "r2", "spoke-2-node-8")))


def test_the_tightest_domain_wins_over_the_cluster_policy() -> None:
    """spread would pick the emptier spoke-2; spoke-1 has a rack that is a tighter fit."""
    spoke_1 = racked("spoke-1").used(0, gpu=8)  # b1/r1 has exactly 8 free
    spoke_2 = racked("spoke-2")
    board = ClusterBoard([spoke_1.obj(), spoke_2.obj()])
    got = board.place(gang(1, 8, required=RACK), (0, 1))
    assert isinstance(got, Placement)
    assert (got.cluster, got.pods) == ("spoke-1", (("spoke-1-node-2", 1),))


def test_the_cluster_of_a_failed_attempt_goes_last() -> None:
    spoke_1 = racked("spoke-1").used(0, gpu=8)
    spoke_2 = racked("spoke-2")
    got = ClusterBoard([spoke_1.obj(), spoke_2.obj()]).place(
        gang(1, 8, required=RACK), (0, 1), avoid="spoke-1")
    assert isinstance(got, Placement) and got.cluster == "spoke-2"


def test_a_placed_gang_holds_its_domain_for_the_rest_of_the_cycle() -> None:
    board = ClusterBoard([racked("s").used(0, gpu=8).used(1, gpu=8).used(2, gpu=8)
                          .used(3, gpu=8).used(4, gpu=8).used(5, gpu=8).obj()])
    first = board.place(gang(2, 8, required=RACK), (0,))
    second = board.place(gang(2, 8, required=RACK), (0,))
    assert isinstance(first, Placement)
    assert isinstance(second, NoFit), "the only free rack is taken by the first"


def test_no_cluster_knows_the_level() -> None:
    board = ClusterBoard([racked("spoke-1").obj(),
                          make_cluster("spoke-2").nodes(2, gpu=8).obj()])
    request = TopologyRequest("example.com/row", True, "spec.schedulingSpec.topology.required")
    assert candidates_knowing(board, (0, 1), request) == (
        "no cluster it may use knows the topology level example.com/row it asks for "
        "(spec.schedulingSpec.topology.required): spoke-1 has no topology level "
        "example.com/row (its levels: example.com/block, example.com/rack, "
        "kubernetes.io/hostname); no usable node of spoke-2 has the label example.com/row; "
        "name one of their levels")
    assert candidates_knowing(board, (0, 1), replace(request, level=RACK)) == (0,)


def test_never_fits_when_no_domain_is_big_enough_even_empty() -> None:
    board = ClusterBoard([racked().obj()])
    assert board.fits_when_empty(gang(2, 8, required=RACK), (0,))
    assert not board.fits_when_empty(gang(3, 8, required=RACK), (0,))
    assert board.fits_when_empty(gang(3, 8, preferred=RACK), (0,))


def test_a_pinned_reservation_is_placed_inside_its_domain() -> None:
    pin = TopologyPin((BLOCK, RACK), (("b2", "r2"),))
    cluster = racked().reserve("ns/a", pod_set(2, gpu=8), pin=pin).obj()
    free = cluster.node_free()
    assert [n for n, f in sorted(free.items()) if f.get("nvidia.com/gpu", 0) == 0] == \
        ["s-node-7", "s-node-8"]


# -- preemption --------------------------------------------------------------------------

def test_victims_are_found_inside_one_rack() -> None:
    """Every node is full with one 8-GPU job; the cheapest two (lowest priority) are in
    different racks, which would free 16 GPUs that no rack holds together; so the
    victims are the two jobs of the cheapest rack."""
    cluster = racked()
    for index in range(8):
        cluster.used(index, gpu=8)
    priorities = {"s-node-1": 0, "s-node-3": 0, "s-node-5": 2, "s-node-6": 2,
                  "s-node-7": 1, "s-node-8": 1, "s-node-2": 3, "s-node-4": 3}
    holders = [Holder(AppWrapperKey(f"ns/on-{node}"), priority, "s", ResourceList.of(gpu=8),
                      None, ((NodeName(node), ResourceList.of(gpu=8)),))
               for node, priority in priorities.items()]
    found = domain_victims(gang(2, 8, required=RACK), NodePool.of(cluster.obj()), holders)
    assert found is not None
    assert sorted(v.key for v in found) == ["ns/on-s-node-7", "ns/on-s-node-8"]


# -- explain and the summary -------------------------------------------------------------

def test_explain_shows_each_domain() -> None:
    cluster = racked().used(0, gpu=4).used(2, gpu=4).used(4, gpu=8).used(5, gpu=8).obj()
    verdicts = domain_verdicts(cluster, gang(2, 8, required=RACK, source="w"))
    assert verdicts == (
        DomainVerdict("rack b2/r2", True, "16 nvidia.com/gpu free: the whole gang fits"),
        DomainVerdict("rack b1/r1", False, "12 nvidia.com/gpu free: no node has 8 free "
                                           "nvidia.com/gpu for a pod of w (largest free: 4 "
                                           "on node s-node-1) (1 of its 2 pods fit)"),
        DomainVerdict("rack b1/r2", False, "12 nvidia.com/gpu free: no node has 8 free "
                                           "nvidia.com/gpu for a pod of w (largest free: 4 "
                                           "on node s-node-3) (1 of its 2 pods fit)"),
        DomainVerdict("rack b2/r1", False, "0 nvidia.com/gpu free: no node has 8 free "
                                           "nvidia.com/gpu for a pod of w (largest free: 0 "
                                           "on node s-node-5)"))


def test_the_summary_counts_free_gpus_per_domain_and_the_fragments() -> None:
    got = summary(racked().used(0, gpu=4).used(2, gpu=8).obj())
    assert (got.free, got.fragmented) == (52 * GPU, 4 * GPU)
    racks = {d.domain: d.free // GPU for d in got.domains if d.level == RACK}
    assert racks == {"b1/r1": 12, "b1/r2": 8, "b2/r1": 16, "b2/r2": 16}
    assert got.line() == ("free GPU per rack: b1/r1 12, b1/r2 8, b2/r1 16, b2/r2 16; 4 of "
                          "52 free GPU on partly used nodes")


def test_a_node_without_the_hostname_label_is_pinned_by_its_rack() -> None:
    """The pin must hold every node the gang counts on: node 2 has no hostname label, so
    the gang is pinned to its rack instead of to nodes it names."""
    cluster = make_cluster("s").racks(blocks=1, racks=1, per_rack=2, gpu=8).obj()
    bare = replace(cluster.nodes[1], labels={BLOCK: "b1", RACK: "r1"})
    cluster = replace(cluster, nodes=(cluster.nodes[0], bare))
    got = place(gang(2, 8, required=RACK), cluster)
    assert isinstance(got, Placement)
    assert got.pin == TopologyPin((BLOCK, RACK), (("b1", "r1"),))
