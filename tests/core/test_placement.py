"""Gang placement on nodes, the reasons a gang does not fit, and the choice of cluster:
best-fit vs spread, ``clusters`` and ``clusterSelector``, unusable clusters, ``avoid``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from mcad.core.placement.clusters import ClusterSelector, PlacementPolicy, choose_cluster, place
from mcad.core.placement.nodefit import NoFit, Placement, biggest_first
from mcad.core.workload.demand import Demand, Toleration
from tests.builders.clusters import ClusterBuilder, make_cluster, pod_set
from tests.builders.snapshots import demand_of


@dataclass
class PlaceCase:
    id: str
    cluster: ClusterBuilder
    demand: Demand
    want_pods: Sequence[tuple[str, int]] | None = None
    want_message: str | None = None


PLACES = [
    PlaceCase(
        id="one 8-GPU pod on an empty node",
        cluster=make_cluster("s").nodes(2, gpu=8),
        demand=demand_of(pod_set(1, gpu=8)),
        want_pods=[("s-node-1", 1)],
    ),
    PlaceCase(
        id="8 free GPUs split 4+4 do not take a one-pod 8-GPU gang",
        cluster=make_cluster("s").nodes(2, gpu=8).used(0, gpu=4).used(1, gpu=4),
        demand=demand_of(pod_set(1, gpu=8, source="GenericItems[0] Job/train")),
        want_message="no node has 8 free nvidia.com/gpu for a pod of GenericItems[0] "
                     "Job/train (largest free: 4 on node s-node-1)",
    ),
    PlaceCase(
        id="two 4-GPU pods do fit 4+4",
        cluster=make_cluster("s").nodes(2, gpu=8).used(0, gpu=4).used(1, gpu=4),
        demand=demand_of(pod_set(2, gpu=4)),
        want_pods=[("s-node-1", 1), ("s-node-2", 1)],
    ),
    PlaceCase(
        id="the whole gang or nothing: 3 of 4 pods fit",
        cluster=make_cluster("s").nodes(3, gpu=8),
        demand=demand_of(pod_set(4, gpu=8, source="w")),
        want_message="no node has 8 free nvidia.com/gpu for a pod of w (largest free: 0 "
                     "on node s-node-1) (3 of its 4 pods fit)",
    ),
    PlaceCase(
        id="biggest pod set first: the 8-GPU pod gets the empty node",
        cluster=make_cluster("s").nodes(2, gpu=8).used(0, gpu=4),
        demand=demand_of(pod_set(2, gpu=2), pod_set(1, gpu=8)),
        want_pods=[("s-node-1", 2), ("s-node-2", 1)],
    ),
    PlaceCase(
        id="tainted nodes are skipped, tolerated ones used",
        cluster=make_cluster("s").nodes(2, gpu=8).taint("dedicated", "infra", nodes=[0]),
        demand=demand_of(pod_set(1, gpu=8)),
        want_pods=[("s-node-2", 1)],
    ),
    PlaceCase(
        id="a toleration opens the tainted node",
        cluster=make_cluster("s").nodes(2, gpu=8).taint("dedicated", "infra"),
        demand=demand_of(pod_set(2, gpu=8, tolerations=[Toleration("dedicated", "Exists")])),
        want_pods=[("s-node-1", 1), ("s-node-2", 1)],
    ),
    PlaceCase(
        id="PreferNoSchedule taints do not keep pods away",
        cluster=make_cluster("s").nodes(1, gpu=8).taint("x", effect="PreferNoSchedule"),
        demand=demand_of(pod_set(1, gpu=8)),
        want_pods=[("s-node-1", 1)],
    ),
    PlaceCase(
        id="every node tainted: the reason names the taints",
        cluster=make_cluster("s").nodes(2, gpu=8).taint("dedicated", "infra", "NoExecute"),
        demand=demand_of(pod_set(1, gpu=1, source="p")),
        want_message="no node accepts a pod of p: 2 nodes have taints it does not "
                     "tolerate (dedicated=infra:NoExecute)",
    ),
    PlaceCase(
        id="nodeSelector picks the labelled node",
        cluster=make_cluster("s").nodes(2, gpu=8).node_labels(nodes=[1], gpu="a100"),
        demand=demand_of(pod_set(1, gpu=8, node_selector={"gpu": "a100"})),
        want_pods=[("s-node-2", 1)],
    ),
    PlaceCase(
        id="nodeSelector nobody matches",
        cluster=make_cluster("s").nodes(2, gpu=8),
        demand=demand_of(pod_set(1, gpu=1, source="p", node_selector={"gpu": "h100"})),
        want_message="no node accepts a pod of p: 2 of 2 nodes lack nodeSelector labels "
                     "gpu=h100",
    ),
    PlaceCase(
        id="cordoned and not-ready nodes are not used",
        cluster=make_cluster("s").nodes(3, gpu=8).cordon(0).node_not_ready(1),
        demand=demand_of(pod_set(1, gpu=8)),
        want_pods=[("s-node-3", 1)],
    ),
    PlaceCase(
        id="no usable node at all",
        cluster=make_cluster("s").nodes(1, gpu=8).cordon(0),
        demand=demand_of(pod_set(1, gpu=1)),
        want_message="no node is ready and schedulable",
    ),
    PlaceCase(
        id="reservations are placed first",
        cluster=make_cluster("s").nodes(2, gpu=8).reserve("ns/early", pod_set(1, gpu=8)),
        demand=demand_of(pod_set(2, gpu=8, source="p")),
        want_message="no node has 8 free nvidia.com/gpu for a pod of p (largest free: 0 "
                     "on node s-node-1) (1 of its 2 pods fit)",
    ),
    PlaceCase(
        id="room in each resource but not at once",
        cluster=make_cluster("s").node_shapes([{"gpu": 8, "cpu": 1}, {"gpu": 1, "cpu": 8}]),
        demand=demand_of(pod_set(1, gpu=4, cpu=4, source="p")),
        want_message="no node has room for a pod of p (cpu 4, nvidia.com/gpu 4) in every "
                     "resource at once",
    ),
]


@pytest.mark.parametrize("case", PLACES, ids=lambda c: c.id)
def test_place_on_one_cluster(case: PlaceCase) -> None:
    got = place(case.demand, case.cluster.obj())
    if case.want_pods is not None:
        assert isinstance(got, Placement), got
        assert list(got.pods) == list(case.want_pods)
    else:
        assert got == NoFit(case.want_message or "")


def test_biggest_first_weighs_gpus_before_cpu() -> None:
    small_gpu_big_cpu = pod_set(1, gpu=1, cpu=64)
    big_gpu = pod_set(1, gpu=2, cpu=1)
    assert list(biggest_first([small_gpu_big_cpu, big_gpu])) == [big_gpu, small_gpu_big_cpu]


def _spokes() -> list[ClusterBuilder]:
    """Three spokes of 2 x 8 GPUs with 12, 8 and 4 GPUs free."""
    return [
        make_cluster("spoke-1").nodes(2, gpu=8).used(0, gpu=4).label(region="east"),
        make_cluster("spoke-2").nodes(2, gpu=8).used(0, gpu=8).label(region="west"),
        make_cluster("spoke-3").nodes(2, gpu=8).used(0, gpu=8).used(1, gpu=4)
        .label(region="east", tier="gold"),
    ]


@dataclass
class ChooseCase:
    id: str
    demand: Demand
    clusters: list[ClusterBuilder] = field(default_factory=_spokes)
    policy: PlacementPolicy = PlacementPolicy.BEST_FIT
    names: tuple[str, ...] = ()
    selector: dict[str, Any] | None = None
    avoid: str | None = None
    want_cluster: str | None = None
    want_message: str | None = None


CHOOSES = [
    ChooseCase("best-fit packs the tightest cluster that fits",
               demand_of(pod_set(1, gpu=4)), want_cluster="spoke-3"),
    ChooseCase("best-fit skips clusters too small", demand_of(pod_set(1, gpu=8)),
               want_cluster="spoke-2"),
    ChooseCase("spread picks the most free left", demand_of(pod_set(1, gpu=4)),
               policy=PlacementPolicy.SPREAD, want_cluster="spoke-1"),
    ChooseCase("clusters names restrict the choice", demand_of(pod_set(1, gpu=4)),
               names=("spoke-1", "spoke-2"), want_cluster="spoke-2"),
    ChooseCase("unknown cluster names", demand_of(pod_set(1, gpu=4)), names=("nope",),
               want_message="none of the clusters it names (nope) is known"),
    ChooseCase("matchLabels", demand_of(pod_set(1, gpu=4)),
               selector={"matchLabels": {"region": "west"}}, want_cluster="spoke-2"),
    ChooseCase("matchExpressions In", demand_of(pod_set(1, gpu=4)),
               policy=PlacementPolicy.SPREAD,
               selector={"matchExpressions": [{"key": "region", "operator": "In",
                                               "values": ["east"]}]},
               want_cluster="spoke-1"),
    ChooseCase("matchExpressions NotIn", demand_of(pod_set(1, gpu=4)),
               selector={"matchExpressions": [{"key": "region", "operator": "NotIn",
                                               "values": ["east"]}]},
               want_cluster="spoke-2"),
    ChooseCase("matchExpressions Exists", demand_of(pod_set(1, gpu=1)),
               policy=PlacementPolicy.SPREAD,
               selector={"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
               want_cluster="spoke-3"),
    ChooseCase("matchExpressions DoesNotExist", demand_of(pod_set(1, gpu=1)),
               selector={"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]},
               want_cluster="spoke-2"),
    ChooseCase("selector matching nothing", demand_of(pod_set(1, gpu=1)),
               selector={"matchLabels": {"region": "north"}},
               want_message="no cluster matches its clusterSelector (region=north)"),
    ChooseCase("not-ready and unschedulable clusters are skipped",
               demand_of(pod_set(1, gpu=4)),
               clusters=[make_cluster("a").nodes(1, gpu=8).not_ready(),
                         make_cluster("b").nodes(1, gpu=8).unschedulable(),
                         make_cluster("c").nodes(1, gpu=8)],
               want_cluster="c"),
    ChooseCase("only unusable clusters match",
               demand_of(pod_set(1, gpu=4)),
               clusters=[make_cluster("a").nodes(1, gpu=8).not_ready(),
                         make_cluster("b").nodes(1, gpu=8).unschedulable()],
               want_message="no matching cluster takes work now: a is not ready, b is "
                            "not schedulable"),
    ChooseCase("avoid: another cluster that fits wins", demand_of(pod_set(1, gpu=4)),
               avoid="spoke-3", want_cluster="spoke-2"),
    ChooseCase("avoid: falls back to the avoided cluster when alone it fits",
               demand_of(pod_set(1, gpu=8)), avoid="spoke-1", names=("spoke-1", "spoke-3"),
               want_cluster="spoke-1"),
    ChooseCase("total too big anywhere: cheap reason", demand_of(pod_set(2, gpu=8)),
               want_message="needs 16 nvidia.com/gpu in all; the most free in one cluster "
                            "is 12 (on spoke-1)"),
    ChooseCase("enough in total but not per node",
               demand_of(pod_set(1, gpu=12, source="p")),
               clusters=[make_cluster("a").nodes(2, gpu=8)],
               want_message="a: no node has 12 free nvidia.com/gpu for a pod of p "
                            "(largest free: 8 on node a-node-1)"),
    ChooseCase("several clusters fit in total, none per node",
               demand_of(pod_set(1, gpu=12, source="p")),
               clusters=[make_cluster("a").nodes(2, gpu=8), make_cluster("b").nodes(2, gpu=8)],
               want_message="a: no node has 12 free nvidia.com/gpu for a pod of p "
                            "(largest free: 8 on node a-node-1); 1 more cluster with "
                            "enough free in total do not fit it either"),
    ChooseCase("ties go to the cluster name", demand_of(pod_set(1, gpu=1)),
               clusters=[make_cluster("b").nodes(1, gpu=8), make_cluster("a").nodes(1, gpu=8)],
               want_cluster="a"),
]


@pytest.mark.parametrize("case", CHOOSES, ids=lambda c: c.id)
def test_choose_cluster(case: ChooseCase) -> None:
    got = choose_cluster(case.demand, [c.obj() for c in case.clusters], policy=case.policy,
                         names=case.names, selector=ClusterSelector.from_spec(case.selector),
                         avoid=case.avoid)
    if case.want_cluster is not None:
        assert isinstance(got, Placement), got
        assert got.cluster == case.want_cluster
    else:
        assert got == NoFit(case.want_message or "")


@pytest.mark.parametrize(("spec", "want_error"), [
    ({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
     "clusterSelector.matchExpressions[0].operator is 'Gt'; use one of In, NotIn, Exists, "
     "DoesNotExist"),
    ({"matchExpressions": [{"key": "a", "operator": "In"}]},
     "clusterSelector.matchExpressions[0] uses In and needs values"),
    ({"matchExpressions": [{"operator": "Exists"}]},
     "clusterSelector.matchExpressions[0] must be an object with a key"),
    ({"matchLabels": ["a"]}, "clusterSelector.matchLabels must be an object of label: value"),
], ids=["unknown operator", "In without values", "no key", "matchLabels not a map"])
def test_cluster_selector_rejects_malformed_specs(spec: dict[str, Any],
                                                   want_error: str) -> None:
    with pytest.raises(ValueError, match="^" + want_error.replace("[", r"\[")
                       .replace("]", r"\]").replace("(", r"\(").replace(")", r"\)") + "$"):
        ClusterSelector.from_spec(spec)


def test_an_unusable_cluster_is_refused_with_its_state() -> None:
    got = place(demand_of(pod_set(1, gpu=1)), make_cluster("x").nodes(1, gpu=8)
                .not_ready().obj())
    assert got == NoFit("cluster x is not ready")
