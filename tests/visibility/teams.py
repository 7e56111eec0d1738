"""One queue shared by teams, for the visibility API's tests."""

from __future__ import annotations

from mcad.core.cycle.decide import dispatch_cycle
from mcad.core.cycle.snapshot import CycleResult, Snapshot
from tests.builders.clusters import make_cluster
from tests.builders.quota import make_tree
from tests.builders.snapshots import at, make_entry, make_snapshot


def two_teams() -> tuple[Snapshot, CycleResult]:
    """team-a's 2x8 gang has waited long enough to hold its cluster; team-b's small job
    would fit but waits for it; team-x runs on one node."""
    cluster = (make_cluster("spoke-1").nodes(2, gpu=8).used(0, gpu=8)
               .held("team-x/run", 0, gpu=8))
    tree = (make_tree("quota_context").node("root", gpu=32)
            .child("org-a", parent="root", gpu=16).child("team-a", parent="org-a", gpu=16)
            .child("team-b", parent="root", gpu=16).child("team-x", parent="root", gpu=16)
            .build())
    snapshot = make_snapshot(now=at(3600)).clusters(cluster).quota(tree).add(
        make_entry("run", "team-x").job(gpu=8).labels(quota_context="team-x")
        .admitted("spoke-1").dispatched(at(-60)),
        make_entry("big", "team-a").job(pods=2, gpu=8).labels(quota_context="team-a")
        .priority(5).created(at(0)),
        make_entry("small", "team-b").job(gpu=1).labels(quota_context="team-b")
        .created(at(10))).obj()
    return snapshot, dispatch_cycle(snapshot)
