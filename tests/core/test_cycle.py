"""The dispatch cycle: which AppWrappers go where, the one reason each of the others
gets, backfill and the head-of-line reservation, and evictions for preemption."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from mcad.core.cycle.decide import CycleResult, Snapshot, dispatch_cycle
from mcad.core.cycle.snapshot import SUSPENDED, PendingReason
from mcad.core.quota.forest import QuotaForest
from tests.builders.clusters import make_cluster, pod_set
from tests.builders.quota import make_forest, make_tree
from tests.builders.snapshots import SnapshotBuilder, at, demand_of, make_entry, make_snapshot


def gold_silver(*, root: int = 16, gold: int = 8, silver: int = 8,
                hard: bool = False) -> QuotaForest:
    """quota_context: root (hard) with children gold and silver (soft unless ``hard``)."""
    return (make_tree("quota_context").node("root", gpu=root)
            .child("gold", parent="root", gpu=gold, hard=hard)
            .child("silver", parent="root", gpu=silver, hard=hard).build())


def one_spoke(nodes: int = 2) -> SnapshotBuilder:
    return make_snapshot(now=at(1000)).clusters(make_cluster("spoke-1").nodes(nodes, gpu=8))


@dataclass
class CycleCase:
    id: str
    snapshot: Callable[[], Snapshot]
    want_dispatched: dict[str, str] = field(default_factory=dict)   # key -> cluster
    want_pending: dict[str, str] = field(default_factory=dict)      # key -> reason
    want_messages: dict[str, str] = field(default_factory=dict)     # key -> message
    want_evictions: dict[str, str] = field(default_factory=dict)    # evicted -> for key


CASES = [
    CycleCase(
        id="a gang that fits is dispatched and charged",
        snapshot=lambda: one_spoke().quota(gold_silver()).add(
            make_entry("a").job(pods=2, gpu=4).labels(quota_context="gold")).obj(),
        want_dispatched={"default/a": "spoke-1"},
    ),
    CycleCase(
        id="two gangs of one shape that fit no node are each told of their own Job",
        snapshot=lambda: one_spoke().add(
            make_entry("first").demand(demand_of(pod_set(source="GenericItems[0] Job/first",
                                                         gpu=16))),
            make_entry("second").demand(demand_of(pod_set(source="GenericItems[0] Job/second",
                                                          gpu=16)))).obj(),
        want_pending={"default/first": "InsufficientCapacity",
                      "default/second": "InsufficientCapacity"},
        want_messages={
            "default/first": "spoke-1: no node has 16 free nvidia.com/gpu for a pod of "
                             "GenericItems[0] "
                             "Job/first (largest free: 8 on node spoke-1-node-1); "
                             "it does not fit even with nothing else running",
            "default/second": "spoke-1: no node has 16 free nvidia.com/gpu for a pod of "
                             "GenericItems[0] "
                              "Job/second (largest free: 8 on node spoke-1-node-1); "
                             "it does not fit even with nothing else running"},
    ),
    CycleCase(
        id="requeue pause holds an AppWrapper until not_before",
        snapshot=lambda: one_spoke().add(
            make_entry("paused").job(gpu=1).not_before(at(1001)),
            make_entry("resumed").job(gpu=1).not_before(at(1000))).obj(),
        want_dispatched={"default/resumed": "spoke-1"},
        want_pending={"default/paused": "RequeuePause"},
        want_messages={"default/paused": "requeued; it may be dispatched again from "
                                         "2024-05-01T10:16:41+00:00"},
    ),
    CycleCase(
        id="an unreadable demand is InvalidDemand with the reader's sentence",
        snapshot=lambda: one_spoke().add(
            make_entry("bad").invalid("GenericItems[0] has neither a generictemplate nor "
                                      "custompodresources")).obj(),
        want_pending={"default/bad": "InvalidDemand"},
        want_messages={"default/bad": "GenericItems[0] has neither a generictemplate nor "
                                      "custompodresources"},
    ),
    CycleCase(
        id="an unknown quota node is QuotaNodeNotFound",
        snapshot=lambda: one_spoke().quota(gold_silver()).add(
            make_entry("lost").job(gpu=1).labels(quota_context="bronze")).obj(),
        want_pending={"default/lost": "QuotaNodeNotFound"},
        want_messages={"default/lost": "quota tree quota_context has no node bronze; label "
                                       "the AppWrapper quota_context: <node> with one of "
                                       "its nodes"},
    ),
    CycleCase(
        id="no cluster by name or selector is NoMatchingCluster",
        snapshot=lambda: one_spoke().add(
            make_entry("named").job(gpu=1).clusters("spoke-9"),
            make_entry("selected").job(gpu=1).selector({"matchLabels": {"region": "x"}}),
        ).obj(),
        want_pending={"default/named": "NoMatchingCluster",
                      "default/selected": "NoMatchingCluster"},
        want_messages={"default/named": "none of the clusters it names (spoke-9) is known",
                       "default/selected": "no cluster matches its clusterSelector "
                                           "(region=x)"},
    ),
    CycleCase(
        id="quota is charged as the cycle admits: the second gold gang exceeds the root",
        snapshot=lambda: one_spoke(4).quota(gold_silver(root=12)).add(
            make_entry("g1").job(gpu=8).labels(quota_context="gold").created(at(0)),
            make_entry("g2").job(gpu=8).labels(quota_context="gold").created(at(1))).obj(),
        want_dispatched={"default/g1": "spoke-1"},
        want_pending={"default/g2": "QuotaExceeded"},
        want_messages={"default/g2": "quota tree quota_context node root: needs 8 "
                                     "nvidia.com/gpu, 4 free"},
    ),
    CycleCase(
        id="admitted AppWrappers hold their quota",
        snapshot=lambda: one_spoke().quota(gold_silver(hard=True)).add(
            make_entry("running").job(gpu=6).labels(quota_context="gold")
            .admitted("spoke-1"),
            make_entry("next").job(gpu=4).labels(quota_context="gold")).obj(),
        want_pending={"default/next": "QuotaExceeded"},
        want_messages={"default/next": "quota tree quota_context node gold: needs 4 "
                                       "nvidia.com/gpu, 2 free"},
    ),
    CycleCase(
        id="nodes are charged as the cycle admits: one empty node, two 8-GPU pods",
        snapshot=lambda: one_spoke(1).add(
            make_entry("first").job(gpu=8).created(at(0)),
            make_entry("second").job(gpu=8, name="train").created(at(1))).obj(),
        want_dispatched={"default/first": "spoke-1"},
        want_pending={"default/second": "InsufficientCapacity"},
        want_messages={"default/second": "needs 8 nvidia.com/gpu in all; the most free in "
                                         "one cluster is 0 (on spoke-1)"},
    ),
    CycleCase(
        id="4+4 free GPUs do not take a one-pod 8-GPU gang",
        snapshot=lambda: make_snapshot(now=at(0)).clusters(
            make_cluster("spoke-1").nodes(2, gpu=8).used(0, gpu=4).used(1, gpu=4)).add(
            make_entry("big").job(gpu=8, name="train")).obj(),
        want_pending={"default/big": "InsufficientCapacity"},
        want_messages={"default/big": "spoke-1: no node has 8 free nvidia.com/gpu for a "
                                      "pod of GenericItems[0] Job/train (largest free: 4 on "
                                      "node spoke-1-node-1)"},
    ),
    CycleCase(
        id="higher priority goes first when there is room for one",
        snapshot=lambda: one_spoke(1).add(
            make_entry("old-low").job(gpu=8).priority(1).created(at(0)),
            make_entry("new-high").job(gpu=8).priority(5).created(at(500))).obj(),
        want_dispatched={"default/new-high": "spoke-1"},
        want_pending={"default/old-low": "InsufficientCapacity"},
    ),
    CycleCase(
        id="the cluster policy applies: spread",
        snapshot=lambda: make_snapshot().clusters(
            make_cluster("a").nodes(1, gpu=8).used(0, gpu=4),
            make_cluster("b").nodes(1, gpu=8)).policy(placement="spread").add(
            make_entry("x").job(gpu=2)).obj(),
        want_dispatched={"default/x": "b"},
    ),
    CycleCase(
        id="best-fit by default",
        snapshot=lambda: make_snapshot().clusters(
            make_cluster("a").nodes(1, gpu=8).used(0, gpu=4),
            make_cluster("b").nodes(1, gpu=8)).add(make_entry("x").job(gpu=2)).obj(),
        want_dispatched={"default/x": "a"},
    ),
    CycleCase(
        id="avoid the cluster of the failed attempt when another fits",
        snapshot=lambda: make_snapshot().clusters(
            make_cluster("a").nodes(1, gpu=8).used(0, gpu=4),
            make_cluster("b").nodes(1, gpu=8)).add(
            make_entry("x").job(gpu=2).avoid("a")).obj(),
        want_dispatched={"default/x": "b"},
    ),
    CycleCase(
        id="reservations of dispatched-but-unbound pods take room first",
        snapshot=lambda: make_snapshot().clusters(
            make_cluster("a").nodes(1, gpu=8).reserve("default/early", pod_set(1, gpu=8)),
            make_cluster("b").nodes(1, gpu=8)).add(make_entry("x").job(gpu=8)).obj(),
        want_dispatched={"default/x": "b"},
    ),
    CycleCase(
        id="with two quota trees an AppWrapper must fit both",
        snapshot=lambda: one_spoke(4).quota(make_forest(
            make_tree("quota_context").node("root", gpu=32).child("gold", parent="root",
                                                                  gpu=32),
            make_tree("org").node("root", gpu=8).child("default", parent="root", gpu=8)))
        .add(make_entry("first").job(gpu=6).labels(quota_context="gold").created(at(0)),
             make_entry("second").job(gpu=6).labels(quota_context="gold").created(at(1)))
        .obj(),
        want_dispatched={"default/first": "spoke-1"},
        want_pending={"default/second": "QuotaExceeded"},
        want_messages={"default/second": "quota tree org node root: needs 6 "
                                         "nvidia.com/gpu, 2 free"},
    ),
    # -- backfill and the head of line -----------------------------------------------
    CycleCase(
        id="backfill: a small job passes a big one that has not waited long",
        snapshot=lambda: make_snapshot(now=at(100)).clusters(
            make_cluster("spoke-1").nodes(2, gpu=8).used(0, gpu=4)).add(
            make_entry("big").job(pods=2, gpu=8).priority(5).created(at(0)),
            make_entry("small").job(gpu=4).created(at(10))).obj(),
        want_dispatched={"default/small": "spoke-1"},
        want_pending={"default/big": "InsufficientCapacity"},
    ),
    CycleCase(
        id="starving head: the drained cluster is closed to smaller jobs",
        snapshot=lambda: make_snapshot(now=at(400)).clusters(
            make_cluster("spoke-1").nodes(2, gpu=8).used(0, gpu=4)).add(
            make_entry("big").job(pods=2, gpu=8).priority(5).created(at(0)),
            make_entry("small").job(gpu=4).created(at(10))).obj(),
        want_pending={"default/big": "InsufficientCapacity",
                      "default/small": "WaitingForHeadOfLine"},
        want_messages={"default/small": "it would fit, but the room is held for "
                                        "default/big, first in line and waiting since "
                                        "2024-05-01T10:00:00+00:00"},
    ),
    CycleCase(
        id="starving head: smaller jobs still use other clusters",
        snapshot=lambda: make_snapshot(now=at(400)).clusters(
            make_cluster("spoke-1").nodes(2, gpu=8).used(0, gpu=4),
            make_cluster("spoke-2").nodes(1, gpu=8).used(0, gpu=6)).add(
            make_entry("big").job(pods=2, gpu=8).priority(5).created(at(0)),
            make_entry("small").job(gpu=2).created(at(10)),
            make_entry("medium").job(gpu=4).created(at(11))).obj(),
        want_dispatched={"default/small": "spoke-2"},
        want_pending={"default/big": "InsufficientCapacity",
                      "default/medium": "WaitingForHeadOfLine"},
    ),
    CycleCase(
        id="the wait counts from the last requeue, not from creation",
        snapshot=lambda: make_snapshot(now=at(400)).clusters(
            make_cluster("spoke-1").nodes(2, gpu=8).used(0, gpu=4)).add(
            make_entry("big").job(pods=2, gpu=8).priority(5).created(at(0))
            .queued_since(at(350)),
            make_entry("small").job(gpu=4).created(at(10))).obj(),
        want_dispatched={"default/small": "spoke-1"},
        want_pending={"default/big": "InsufficientCapacity"},
    ),
    CycleCase(
        id="a head that can never fit holds nobody back",
        snapshot=lambda: make_snapshot(now=at(4000)).clusters(
            make_cluster("spoke-1").nodes(2, gpu=8)).add(
            make_entry("huge").job(pods=3, gpu=8).priority(5).created(at(0)),
            make_entry("small").job(gpu=4).created(at(10))).obj(),
        want_dispatched={"default/small": "spoke-1"},
        want_pending={"default/huge": "InsufficientCapacity"},
        want_messages={"default/huge": "needs 24 nvidia.com/gpu in all; the most free in one "
                                       "cluster is 16 (on spoke-1); it does not fit even "
                                       "with nothing else running"},
    ),
    CycleCase(
        id="starving head blocked by quota: its quota is held, its nodes too",
        snapshot=lambda: make_snapshot(now=at(400)).clusters(
            make_cluster("spoke-1").nodes(4, gpu=8)).quota(gold_silver(root=16)).add(
            make_entry("running").job(gpu=8).labels(quota_context="silver")
            .admitted("spoke-1"),
            make_entry("head").job(pods=2, gpu=8).priority(5).labels(quota_context="gold")
            .created(at(0)),
            make_entry("gold-small").job(gpu=2).labels(quota_context="gold").created(at(5)),
            make_entry("silver-small").job(gpu=2).labels(quota_context="silver")
            .created(at(6))).obj(),
        want_pending={"default/head": "QuotaExceeded",
                      "default/gold-small": "WaitingForHeadOfLine",
                      "default/silver-small": "WaitingForHeadOfLine"},
        want_messages={"default/head": "quota tree quota_context node root: needs 16 "
                                       "nvidia.com/gpu, 8 free",
                       "default/gold-small": "it would fit, but the quota is held for "
                                             "default/head, first in line and waiting since "
                                             "2024-05-01T10:00:00+00:00"},
    ),
    CycleCase(
        id="starving head blocked by quota: work under its own quota still goes",
        snapshot=lambda: make_snapshot(now=at(400)).clusters(
            make_cluster("spoke-1").nodes(4, gpu=8)).quota(
            make_tree("quota_context").node("root", gpu=32)
            .child("gold", parent="root", gpu=8, hard=True)
            .child("silver", parent="root", gpu=8, hard=True).build()).add(
            make_entry("running").job(gpu=8).labels(quota_context="gold")
            .admitted("spoke-1"),
            make_entry("head").job(gpu=8).priority(5).labels(quota_context="gold")
            .created(at(0)),
            make_entry("silver-small").job(gpu=2).labels(quota_context="silver")
            .created(at(6))).obj(),
        want_dispatched={"default/silver-small": "spoke-1"},
        want_pending={"default/head": "QuotaExceeded"},
    ),
    # -- preemption ----------------------------------------------------------------------
    CycleCase(
        id="reclaim: the owner takes back what a borrower holds, lowest priority first",
        snapshot=lambda: _borrowed().obj(),  # reclaim is on by default
        want_pending={"default/owner": "WaitingForPreemption"},
        want_evictions={"default/borrower-a": "default/owner"},
        want_messages={"default/owner": "waiting for 1 AppWrapper (borrowing its quota) to "
                                        "be evicted: default/borrower-a"},
    ),
    CycleCase(
        id="reclaim evicts borrowers of any priority, even higher than the owner's",
        snapshot=lambda: _borrowed(owner_priority=0).policy(reclaim=True).obj(),
        want_pending={"default/owner": "WaitingForPreemption"},
        want_evictions={"default/borrower-a": "default/owner"},
    ),
    CycleCase(
        id="two trees: a victim borrowing in one tree is reclaimed though it does not "
           "borrow in the other (MCAD's quota forest)",
        snapshot=lambda: _two_trees().obj(),
        want_pending={"default/gold-gold": "WaitingForPreemption"},
        want_evictions={"default/silver-gold": "default/gold-gold"},
        want_messages={"default/gold-gold": "waiting for 1 AppWrapper (borrowing its quota) "
                                            "to be evicted: default/silver-gold"},
    ),
    CycleCase(
        id="two trees: no reclaim for a preemptor that would itself borrow afterwards",
        snapshot=lambda: _two_trees(gold_gold_gpus=16).obj(),
        want_pending={"default/gold-gold": "QuotaExceeded"},
    ),
    CycleCase(
        id="without preemption the owner waits with QuotaExceeded",
        snapshot=lambda: _borrowed().policy(preemption=False).obj(),
        want_pending={"default/owner": "QuotaExceeded"},
        want_messages={"default/owner": "quota tree quota_context node root: needs 8 "
                                        "nvidia.com/gpu, 0 free"},
    ),
    CycleCase(
        id="priority preemption alone never evicts higher priority",
        snapshot=lambda: _borrowed(owner_priority=0).policy(priority=True).obj(),
        want_pending={"default/owner": "QuotaExceeded"},
        want_messages={"default/owner": "quota tree quota_context node root: needs 8 "
                                        "nvidia.com/gpu, 0 free; no lower-priority "
                                        "AppWrapper can be evicted to make room"},
    ),
    CycleCase(
        id="a lender within its own quota is not a borrower: nobody to reclaim from",
        snapshot=lambda: _lent_within_quota().policy(reclaim=True).obj(),
        want_pending={"default/gold-b": "QuotaExceeded"},
    ),
    CycleCase(
        id="priority: within its own quota node, a lower-priority sibling is evicted",
        snapshot=lambda: _lent_within_quota().policy(priority=True).obj(),
        want_pending={"default/gold-b": "WaitingForPreemption"},
        want_evictions={"default/gold-a": "default/gold-b"},
    ),
    CycleCase(
        id="evicting borrowers that would not make room for the pods is pointless",
        snapshot=lambda: make_snapshot(now=at(100)).clusters(
            make_cluster("spoke-1").nodes(2, gpu=8).used(0, gpu=8).used(1, gpu=8),
            make_cluster("spoke-2").nodes(1, gpu=8).used(0, gpu=8))
        .quota(gold_silver(gold=12, silver=4))
        .policy(preemption=True).add(
            make_entry("borrower").job(gpu=8).priority(1).labels(quota_context="silver")
            .admitted("spoke-1"),
            make_entry("borrower-2").job(gpu=8).priority(1).labels(quota_context="silver")
            .admitted("spoke-1"),
            make_entry("owner").job(gpu=8).priority(10).labels(quota_context="gold")
            .clusters("spoke-2")).obj(),
        want_pending={"default/owner": "QuotaExceeded"},
        want_messages={"default/owner": "quota tree quota_context node root: needs 8 "
                                        "nvidia.com/gpu, 0 free; evicting them would not make "
                                        "room for its pods"},
    ),
    CycleCase(
        id="short of quota and fitting no cluster even empty, it leads with the lasting cause",
        snapshot=lambda: make_snapshot(now=at(100)).clusters(
            make_cluster("spoke-1").nodes(2, gpu=8), make_cluster("spoke-2").nodes(2, gpu=8))
        .quota(gold_silver(root=64, gold=48, silver=16, hard=True)).policy(preemption=True)
        .add(
            make_entry("running").job(pods=2, gpu=8).labels(quota_context="gold")
            .admitted("spoke-1"),
            make_entry("huge").job(pods=5, gpu=8).labels(quota_context="gold"),
            make_entry("huge-2").job(pods=5, gpu=8).labels(quota_context="gold")
            .created(at(1))).obj(),
        want_pending={"default/huge": "InsufficientCapacity",
                      "default/huge-2": "InsufficientCapacity"},
        want_messages={"default/huge": "it needs 40 nvidia.com/gpu in all, and the largest "
                                       "cluster it may use, spoke-1, has 16; it does not fit "
                                       "even with nothing else running"},
    ),
    CycleCase(
        id="two gangs of one shape short of quota that fit no node are told of their own Job",
        # The lasting cause is cached per shape; each is told of its own pods (a full and
        # a carried cycle ask in a different order, and must say the same).
        snapshot=lambda: one_spoke().quota(gold_silver(root=24, gold=16, silver=8, hard=True))
        .add(make_entry("running").job(gpu=8).labels(quota_context="gold").admitted("spoke-1"),
             make_entry("first").demand(demand_of(pod_set(source="GenericItems[0] Job/first",
                                                          gpu=16)))
             .labels(quota_context="gold"),
             make_entry("second").demand(demand_of(pod_set(
                 source="GenericItems[0] Job/second", gpu=16)))
             .labels(quota_context="gold").created(at(1))).obj(),
        want_pending={"default/first": "InsufficientCapacity",
                      "default/second": "InsufficientCapacity"},
        want_messages={
            "default/first": "spoke-1: no node has 16 free nvidia.com/gpu for a pod of "
                             "GenericItems[0] Job/first (largest free: 8 on node "
                             "spoke-1-node-1); it does not fit even with nothing else running",
            "default/second": "spoke-1: no node has 16 free nvidia.com/gpu for a pod of "
                              "GenericItems[0] Job/second (largest free: 8 on node "
                              "spoke-1-node-1); it does not fit even with nothing else "
                              "running"},
    ),
    CycleCase(
        id="a gang that never fits a node's shape says so per node",
        snapshot=lambda: make_snapshot(now=at(100)).clusters(
            make_cluster("spoke-1").nodes(4, gpu=8))
        .quota(gold_silver(root=64, gold=24, silver=16, hard=True)).add(
            make_entry("running").job(pods=2, gpu=8).labels(quota_context="gold")
            .admitted("spoke-1"),
            make_entry("wide").job(pods=1, gpu=16).labels(quota_context="gold")).obj(),
        want_pending={"default/wide": "InsufficientCapacity"},
        want_messages={"default/wide": "spoke-1: no node has 16 free nvidia.com/gpu for a pod "
                                       "of GenericItems[0] Job/wide-job-0 (largest free: 8 on "
                                       "node spoke-1-node-1); it does not fit even with "
                                       "nothing else running"},
    ),
    CycleCase(
        id="one preemptor per quota node per cycle: the next decides on fresh facts",
        snapshot=lambda: _borrowed().policy(preemption=True).add(
            make_entry("owner-2").job(gpu=8).priority(10).labels(quota_context="gold")
            .created(at(20))).obj(),
        want_pending={"default/owner": "WaitingForPreemption",
                      "default/owner-2": "QuotaExceeded"},
        want_evictions={"default/borrower-a": "default/owner"},
        want_messages={"default/owner-2": "quota tree quota_context node root: needs 8 "
                                          "nvidia.com/gpu, 0 free; it waits for the "
                                          "evictions issued this cycle for default/owner"},
    ),
    CycleCase(
        id="preemptors under other quota nodes do not count on the same victim",
        snapshot=lambda: make_snapshot(now=at(100)).clusters(
            make_cluster("spoke-1").nodes(2, gpu=8).used(0, gpu=8).used(1, gpu=8),
        ).quota(make_tree("quota_context").node("root", gpu=16)
                .child("gold", parent="root", gpu=12).child("bronze", parent="root", gpu=8)
                .child("silver", parent="root", gpu=4).build()).policy(preemption=True).add(
            make_entry("borrower-a").job(gpu=8).priority(1).labels(quota_context="silver")
            .admitted("spoke-1"),
            make_entry("borrower-b").job(gpu=8).priority(1).labels(quota_context="silver")
            .admitted("spoke-1"),
            make_entry("owner").job(gpu=8).priority(10).labels(quota_context="gold")
            .created(at(10)),
            make_entry("owner-2").job(gpu=4).priority(10).labels(quota_context="bronze")
            .created(at(20))).obj(),
        want_pending={"default/owner": "WaitingForPreemption",
                      "default/owner-2": "WaitingForPreemption"},
        want_evictions={"default/borrower-a": "default/owner",
                        "default/borrower-b": "default/owner-2"},
    ),
    CycleCase(
        id="a held AppWrapper waits with its sentence whatever room there is",
        snapshot=lambda: one_spoke().add(
            make_entry("suspended").job(gpu=8).held(PendingReason.SUSPENDED, "suspended"),
            make_entry("lost").job(gpu=8).held(PendingReason.QUEUE_NOT_FOUND, "no queue q"),
            make_entry("unclassed").job(gpu=8).held(PendingReason.PRIORITY_CLASS_NOT_FOUND,
                                                    "no class c"),
            make_entry("free").job(gpu=8).created(at(10))).obj(),
        want_dispatched={"default/free": "spoke-1"},
        want_pending={"default/suspended": "Suspended", "default/lost": "QueueNotFound",
                      "default/unclassed": "PriorityClassNotFound"},
        want_messages={"default/suspended": "suspended", "default/lost": "no queue q",
                       "default/unclassed": "no class c"},
    ),
    CycleCase(
        id="a running AppWrapper suspended is taken back, once",
        snapshot=lambda: one_spoke().add(
            make_entry("running").job(gpu=8).admitted("spoke-1")
            .held(PendingReason.SUSPENDED, "spec.suspend is true"),
            make_entry("draining").job(gpu=8).admitted("spoke-1").draining()
            .held(PendingReason.SUSPENDED, "spec.suspend is true")).obj(),
        want_evictions={"default/running": ""},
    ),
]


def _lent_within_quota() -> SnapshotBuilder:
    """Gold and silver each use their own 8 of root's 16; gold-b (priority 10) waits."""
    return make_snapshot(now=at(100)).clusters(
        make_cluster("spoke-1").nodes(2, gpu=8).used(0, gpu=8).used(1, gpu=8)
    ).quota(gold_silver()).add(
        make_entry("silver-a").job(gpu=8).priority(1).labels(quota_context="silver")
        .admitted("spoke-1"),
        make_entry("gold-a").job(gpu=8).priority(1).labels(quota_context="gold")
        .admitted("spoke-1"),
        make_entry("gold-b").job(gpu=8).priority(10).labels(quota_context="gold"))


def _two_trees(gold_gold_gpus: int = 8) -> SnapshotBuilder:
    """MCAD's users charge every AppWrapper in two trees. quota_context: root 16 over
    gold 8 and silver 8 (soft); quota_service: root 16 over gold 16. silver-gold (2 x 8)
    runs, borrowing 8 in quota_context and within its quota in quota_service; gold-gold
    (same priority) is within its own quota in quota_context, and in quota_service once
    silver-gold is gone."""
    forest = make_forest(
        make_tree("quota_context").node("root", gpu=16)
        .child("gold", parent="root", gpu=8).child("silver", parent="root", gpu=8),
        make_tree("quota_service").node("root", gpu=16).child("gold", parent="root", gpu=16))
    return make_snapshot(now=at(100)).clusters(
        make_cluster("spoke-1").nodes(2, gpu=8).used(0, gpu=8).used(1, gpu=8)
    ).quota(forest).policy(preemption=True).add(
        make_entry("silver-gold").job(pods=2, gpu=8)
        .labels(quota_context="silver", quota_service="gold").admitted("spoke-1"),
        make_entry("gold-gold").job(pods=gold_gold_gpus // 8, gpu=8)
        .labels(quota_context="gold", quota_service="gold").created(at(10)))


def _borrowed(owner_priority: int = 10) -> SnapshotBuilder:
    """Silver (quota 4) borrowed: two silver gangs of 8 run on 16 GPUs (root 16)."""
    return make_snapshot(now=at(100)).clusters(
        make_cluster("spoke-1").nodes(2, gpu=8).used(0, gpu=8).used(1, gpu=8)
    ).quota(gold_silver(gold=12, silver=4)).add(
        make_entry("borrower-a").job(gpu=8).priority(1).labels(quota_context="silver")
        .admitted("spoke-1"),
        make_entry("borrower-b").job(gpu=8).priority(1).labels(quota_context="silver")
        .admitted("spoke-1"),
        make_entry("owner").job(gpu=8).priority(owner_priority).labels(quota_context="gold")
        .created(at(10)),
    )


def _check(result: CycleResult, case: CycleCase, snapshot: Snapshot) -> None:
    assert {d.key: d.cluster for d in result.dispatches} == case.want_dispatched
    assert {p.key: p.reason for p in result.pending} == case.want_pending
    messages = {p.key: p.message for p in result.pending}
    for key, message in case.want_messages.items():
        assert messages[key] == message
    assert {e.key: e.for_key for e in result.evictions} == case.want_evictions
    queued = [a.key for a in snapshot.appwrappers if a.phase.__class__.__name__ == "Queued"]
    decided = [d.key for d in result.dispatches] + [p.key for p in result.pending]
    assert sorted(decided) == sorted(queued), "every queued AppWrapper gets one outcome"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_dispatch_cycle(case: CycleCase) -> None:
    snapshot = case.snapshot()
    result = dispatch_cycle(snapshot)
    _check(result, case, snapshot)
    assert dispatch_cycle(snapshot) == result, "same snapshot, same decisions"


def test_a_suspended_run_is_evicted_for_nobody_with_its_own_reason() -> None:
    snapshot = one_spoke().add(make_entry("running").job(gpu=8).admitted("spoke-1").held(
        PendingReason.SUSPENDED, "spec.suspend is true")).obj()
    (eviction,) = dispatch_cycle(snapshot).evictions
    assert (eviction.reason, eviction.message) == (SUSPENDED, "spec.suspend is true")


def test_placement_lists_pods_per_node() -> None:
    snapshot = one_spoke(2).add(make_entry("a").job(pods=3, gpu=4)).obj()
    (dispatch,) = dispatch_cycle(snapshot).dispatches
    assert dispatch.placement.pods == (("spoke-1-node-1", 2), ("spoke-1-node-2", 1))


def test_pending_come_in_queue_order() -> None:
    snapshot = make_snapshot().add(
        make_entry("c").job(gpu=1).priority(1).created(at(2)),
        make_entry("a").job(gpu=1).priority(9).created(at(5)),
        make_entry("b").job(gpu=1).priority(1).created(at(1))).obj()
    result = dispatch_cycle(snapshot)
    assert [p.key for p in result.pending] == ["default/a", "default/b", "default/c"]
    assert {p.reason for p in result.pending} == {"NoMatchingCluster"}
