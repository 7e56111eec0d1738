"""What ``mcad queue`` and ``mcad explain`` say, from one cycle: the queue in the order
the cycle considered it, each check in the cycle's order, each cluster's reason, and
an estimated start only when running work declares when it ends."""

from __future__ import annotations

from mcad.core.cycle.decide import dispatch_cycle
from mcad.core.placement.capacity import AppWrapperKey
from mcad.core.views.explain import describe_demand, explain, queue_rows, with_candidate
from tests.builders.clusters import RACK, ClusterBuilder, make_cluster
from tests.builders.quota import make_tree
from tests.builders.snapshots import EntryBuilder, at, make_entry, make_snapshot


def full_clusters() -> list[ClusterBuilder]:
    """Two clusters of 2 x 8 GPUs, each full with two 1 x 8-GPU AppWrappers."""
    return [make_cluster(name).nodes(2, gpu=8).used(0, gpu=8).used(1, gpu=8)
            .held(f"default/{name}-0", 0, gpu=8).held(f"default/{name}-1", 1, gpu=8)
            for name in ("spoke-1", "spoke-2")]


def running(name: str, cluster: str, ends: float | None = None) -> EntryBuilder:
    entry = make_entry(name).job(gpu=8).admitted(cluster).dispatched(at(0))
    return entry if ends is None else entry.expected_end(at(ends))


def test_the_queue_is_listed_in_the_order_the_cycle_considered_it() -> None:
    snapshot = make_snapshot(now=at(100)).clusters(*full_clusters()).add(
        *(running(f"{c}-{i}", c) for c in ("spoke-1", "spoke-2") for i in range(2)),
        make_entry("low").job(gpu=8).priority(1).created(at(10)),
        make_entry("high").job(gpu=8).priority(9).created(at(30)),
        make_entry("mid").job(pods=2, gpu=8).priority(5).created(at(20))).obj()
    rows = queue_rows(snapshot, dispatch_cycle(snapshot))
    assert [(r.position, r.key, r.priority, r.demand) for r in rows] == [
        (1, "default/high", 9, "1x8 GPU"), (2, "default/mid", 5, "2x8 GPU"),
        (3, "default/low", 1, "1x8 GPU")]
    assert {r.reason for r in rows} == {"InsufficientCapacity"}


def test_explain_names_every_cluster_and_why_it_says_no() -> None:
    snapshot = make_snapshot(now=at(100)).clusters(*full_clusters()).add(
        *(running(f"{c}-{i}", c) for c in ("spoke-1", "spoke-2") for i in range(2)),
        make_entry("first").job(gpu=8).priority(9),
        make_entry("wait").job(pods=2, gpu=8).priority(1)).obj()
    why = explain(snapshot, dispatch_cycle(snapshot), AppWrapperKey("default/wait"))
    assert why is not None
    assert (why.outcome, why.position, why.ahead) == ("InsufficientCapacity", 2,
                                                     ("default/first",))
    assert [c.step for c in why.checks] == ["requeue pause", "demand", "quota", "clusters"]
    assert [(v.cluster, v.ok) for v in why.clusters] == [("spoke-1", False),
                                                         ("spoke-2", False)]
    assert all("no node has 8 free nvidia.com/gpu" in v.detail for v in why.clusters)
    assert why.estimated_start is None
    assert "declares no dispatchDuration.expected" in why.estimate_basis


def test_quota_numbers_are_shown_per_tree_node() -> None:
    tree = make_tree("team").node("root", gpu=16).child("a", parent="root", gpu=8).build()
    snapshot = make_snapshot(now=at(100)).quota(tree).clusters(
        make_cluster("spoke-1").nodes(4, gpu=8)).add(
        make_entry("big").job(pods=3, gpu=8).labels(team="a")).obj()
    why = explain(snapshot, dispatch_cycle(snapshot), AppWrapperKey("default/big"))
    assert why is not None and why.outcome == "QuotaExceeded"
    shown = {c.step: c for c in why.checks}
    assert shown["quota team/a"].detail == "nvidia.com/gpu: 0 used of 8, needs 24"
    assert not shown["quota"].ok
    assert why.clusters[0].ok  # capacity is not what stops it


def test_an_estimate_comes_from_the_declared_ends_of_running_work() -> None:
    snapshot = make_snapshot(now=at(100)).clusters(*full_clusters()).add(
        running("spoke-1-0", "spoke-1", ends=700), running("spoke-1-1", "spoke-1", ends=400),
        running("spoke-2-0", "spoke-2"), running("spoke-2-1", "spoke-2"),
        make_entry("wait").job(gpu=8)).obj()
    why = explain(snapshot, dispatch_cycle(snapshot), AppWrapperKey("default/wait"))
    assert why is not None
    assert why.estimated_start == at(400)
    assert why.estimate_basis.startswith("estimate:")


def test_a_dry_run_is_the_same_question_about_one_not_submitted() -> None:
    base = make_snapshot(now=at(100)).clusters(make_cluster("spoke-1").nodes(1, gpu=8)).obj()
    trial = with_candidate(base, make_entry("new").job(gpu=4).created(at(100)).obj())
    why = explain(trial, dispatch_cycle(trial), AppWrapperKey("default/new"))
    assert why is not None
    assert why.outcome == "Dispatched" and why.message == "dispatched to cluster spoke-1"
    assert why.clusters[0].detail.startswith("the whole gang fits now")
    assert base.appwrappers == ()  # the controller's snapshot is left alone


def test_demand_is_described_per_pod_shape() -> None:
    entry = make_entry("x").job(pods=2, gpu=8).obj()
    assert describe_demand(entry.demand) == "2x8 GPU"
    assert describe_demand(make_entry("c").job(cpu=2).obj().demand) == "1x2 CPU"
    assert describe_demand(None) == "invalid"


def test_a_waiting_elastic_appwrapper_shows_the_sizes_it_may_start_with() -> None:
    snapshot = make_snapshot(now=at(100)).clusters(*full_clusters()).add(
        *(running(f"{c}-{i}", c) for c in ("spoke-1", "spoke-2") for i in range(2)),
        make_entry("elastic").job(pods=4, gpu=8).elastic(2)).obj()
    result = dispatch_cycle(snapshot)
    (row,) = queue_rows(snapshot, result)
    assert row.demand == "4x8 GPU (elastic, from 2)"
    checks = {c.step: c.detail for c in explain(snapshot, result,
                                                  AppWrapperKey("default/elastic")).checks}
    assert checks["demand"].endswith("elastic: may start with 2 to 4 pods")


def test_explain_shows_each_cluster_and_each_domain_of_the_level_asked() -> None:
    """A required-rack 2 x 8 gang: spoke-1's free GPUs are scattered (4 on every node),
    spoke-2 has one empty rack."""
    spoke_1 = make_cluster("spoke-1").racks(blocks=1, racks=2, per_rack=2, gpu=8)
    for index in range(4):
        spoke_1.used(index, gpu=4)
    spoke_2 = make_cluster("spoke-2").racks(blocks=1, racks=2, per_rack=2, gpu=8) \
        .used(0, gpu=8).used(1, gpu=4)
    snapshot = make_snapshot(now=at(100)).clusters(spoke_1, spoke_2).add(
        make_entry("train").job(pods=2, gpu=8).topology(required=RACK)).obj()
    why = explain(snapshot, dispatch_cycle(snapshot), AppWrapperKey("default/train"))
    assert why is not None and why.outcome == "Dispatched"
    one, two = why.clusters
    assert (one.ok, two.ok) == (False, True)
    assert one.detail.startswith("no rack holds the whole gang (16 nvidia.com/gpu)")
    assert [(d.domain, d.ok) for d in one.domains] == [("rack b1/r1", False),
                                                       ("rack b1/r2", False)]
    assert two.detail == ("the whole gang fits now in nodes spoke-2-node-3, spoke-2-node-4 "
                          "(rack b1/r2): 1 on spoke-2-node-3, 1 on spoke-2-node-4")
    assert [(d.domain, d.ok, d.detail) for d in two.domains] == [
        ("rack b1/r2", True, "16 nvidia.com/gpu free: the whole gang fits"),
        ("rack b1/r1", False, "4 nvidia.com/gpu free: no node has 8 free nvidia.com/gpu for "
                              "a pod of GenericItems[0] Job/train-job-0 (largest free: 4 on "
                              "node spoke-2-node-2)")]
