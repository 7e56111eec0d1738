"""What the web view's page is drawn from (``mcad.webui.view``): the queue in the
cycle's order with each estimated start, what runs where, each node's GPUs in use, and
the quota trees' use against their limits (the running work charged)."""

from __future__ import annotations

from mcad.controller.estimator import Plan
from mcad.core.capacity import AppWrapperKey
from mcad.core.cycle import dispatch_cycle
from mcad.core.estimates import Estimate, Estimates
from mcad.webui import view
from tests.builders.clusters import make_cluster
from tests.builders.quota import make_tree
from tests.builders.snapshots import at, make_entry, make_snapshot


def test_the_page_shows_queue_clusters_running_and_quota() -> None:
    cluster = (make_cluster("spoke-1").nodes(2, gpu=8).used(0, gpu=8)
               .held("default/run", 0, gpu=8))
    snapshot = make_snapshot(now=at(0)).clusters(cluster).quota(
        make_tree("quota_context").node("root", gpu=16).build()).add(
        make_entry("run").job(gpu=8).labels(quota_context="root").admitted("spoke-1")
        .dispatched(at(-60)),
        make_entry("big").job(pods=2, gpu=8).labels(quota_context="root").priority(5)
        .created(at(-30)),
        make_entry("small").job(gpu=4).labels(quota_context="root").created(at(-20))).obj()
    result = dispatch_cycle(snapshot)
    plan = Plan(at(0), Estimates({AppWrapperKey("default/big"): Estimate(
        at(600), (AppWrapperKey("default/run"),), "after default/run ends")}, 2, at(600)),
        {}, 0.01)
    page = view(snapshot, result, plan)
    assert [(q["key"], q["estimatedStart"]) for q in page["queue"]] == [
        ("default/big", "2024-05-01T10:10:00Z")]
    assert page["clusters"][0]["nodes"][0] == {"name": "spoke-1-node-1", "gpus": 8,
                                               "used": 8, "ready": True}
    assert (page["clusters"][0]["used"], page["clusters"][0]["gpus"]) == (8, 16)
    assert page["clusters"][0]["starting"] == ["default/small"]  # dispatched this cycle
    assert [r["key"] for r in page["running"]] == ["default/run"]
    (root,) = page["quota"]
    assert root["limit"]["nvidia.com/gpu"] == 16 and root["used"]["nvidia.com/gpu"] == 8
    assert page["planned"] == "2024-05-01T10:00:00Z"
