"""Fluent builders for dispatch-cycle snapshots and the AppWrappers in them.

    snap = (make_snapshot(now=at(600))
            .clusters(make_cluster("spoke-1").nodes(2, gpu=8))
            .quota(make_tree("quota_context").node("root", gpu=16).build())
            .add(make_entry("big").priority(5).job(pods=2, gpu=8).created(at(0)),
                 make_entry("small").job(gpu=1).labels(quota_context="root"))
            .obj())

An entry's demand is read from a wire AppWrapper (``tests.builders.appwrappers``) with
``appwrapper_demand``, exactly as the controller will read it; ``demand(...)`` sets it
directly. Times are ``at(seconds)`` after a fixed epoch, so tests never read a clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from mcad.core.cycle.backfill import BackfillRule
from mcad.core.cycle.decide import (
    QUEUED,
    Admitted,
    AppWrapperEntry,
    CyclePolicy,
    Phase,
    Snapshot,
)
from mcad.core.cycle.elastic import sized
from mcad.core.cycle.snapshot import BackfillPromise, Hold, PendingReason
from mcad.core.placement.capacity import AppWrapperKey, ClusterCapacity, ClusterName
from mcad.core.placement.clusters import ClusterSelector, PlacementPolicy
from mcad.core.placement.victims import PreemptionPolicy
from mcad.core.quota.forest import QuotaForest
from mcad.core.workload.demand import Demand, PodSet, appwrapper_demand
from mcad.core.workload.resources import EMPTY
from mcad.core.workload.topology import TopologyPin
from tests.builders.appwrappers import make_appwrapper
from tests.builders.clusters import ClusterBuilder

EPOCH = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """``seconds`` after the tests' fixed epoch."""
    return EPOCH + timedelta(seconds=seconds)


def demand_of(*pod_sets: PodSet, min_available: int | None = None) -> Demand:
    """A Demand straight from pod sets (no wire AppWrapper)."""
    total = EMPTY
    for pod_set in pod_sets:
        total = total + pod_set.requests.scale(pod_set.count)
    pods = sum(s.count for s in pod_sets)
    return Demand(pod_sets=tuple(pod_sets), min_available=min_available or pods,
                  total=total, pods=pods)


def make_entry(name: str, namespace: str = "default") -> EntryBuilder:
    return EntryBuilder(name, namespace)


def make_snapshot(*, now: datetime = EPOCH) -> SnapshotBuilder:
    return SnapshotBuilder(now)


class EntryBuilder:
    """One AppWrapper in a snapshot; every method returns the builder."""

    def __init__(self, name: str, namespace: str) -> None:
        self.key = f"{namespace}/{name}"
        self.wire = make_appwrapper(name, namespace)
        self._uid = f"uid-{namespace}-{name}"
        self._priority = 0
        self._created = EPOCH
        self._demand: Demand | None = None
        self._demand_error: str | None = None
        self._labels: dict[str, str] = {}
        self._clusters: tuple[str, ...] = ()
        self._selector = ClusterSelector()
        self._phase: Phase = QUEUED
        self._avoid: str | None = None
        self._not_before: datetime | None = None
        self._queued_since: datetime | None = None
        self._slope = 0.0
        self._dispatched: datetime | None = None
        self._draining_for: str | None = None
        self._draining = False
        self._expected_end: datetime | None = None
        self._runtime: float | None = None
        self._elastic: tuple[int, int | None] | None = None
        self._promise: BackfillPromise | None = None
        self._hold: Hold | None = None

    def held(self, reason: PendingReason, message: str = "held") -> EntryBuilder:
        """Kept out of the queue (suspended, an unknown queue or priority class)."""
        self._hold = Hold(reason, message)
        return self

    def priority(self, priority: int) -> EntryBuilder:
        self._priority = priority
        return self

    def created(self, when: datetime) -> EntryBuilder:
        self._created = when
        return self

    def uid(self, uid: str) -> EntryBuilder:
        self._uid = uid
        return self

    def job(self, **shape: Any) -> EntryBuilder:
        """A wrapped batch/v1 Job (``pods=``, ``gpu=``, ``cpu=``, ``node_selector=``...)."""
        self.wire.job(**shape)
        return self

    def pod(self, **shape: Any) -> EntryBuilder:
        self.wire.pod(**shape)
        return self

    def demand(self, demand: Demand) -> EntryBuilder:
        self._demand = demand
        return self

    def invalid(self, error: str) -> EntryBuilder:
        self._demand_error = error
        return self

    def labels(self, **labels: str) -> EntryBuilder:
        """Quota labels: ``<tree>=<node>``."""
        self._labels.update(labels)
        return self

    def clusters(self, *names: str) -> EntryBuilder:
        self._clusters = names
        return self

    def selector(self, spec: dict[str, Any]) -> EntryBuilder:
        """A ``clusterSelector`` as on the wire."""
        self._selector = ClusterSelector.from_spec(spec)
        return self

    def admitted(self, cluster: str, pin: TopologyPin | None = None) -> EntryBuilder:
        self._phase = Admitted(ClusterName(cluster), pin)
        return self

    def topology(self, *, required: str | None = None,
                 preferred: str | None = None) -> EntryBuilder:
        """``schedulingSpec.topology`` (read with the demand)."""
        self.wire.topology(required=required, preferred=preferred)
        return self

    def avoid(self, cluster: str) -> EntryBuilder:
        self._avoid = cluster
        return self

    def not_before(self, when: datetime) -> EntryBuilder:
        self._not_before = when
        return self

    def queued_since(self, when: datetime) -> EntryBuilder:
        self._queued_since = when
        return self

    def slope(self, per_second: float) -> EntryBuilder:
        """MCAD's ``priorityslope``."""
        self._slope = per_second
        return self

    def dispatched(self, when: datetime) -> EntryBuilder:
        self._dispatched = when
        return self

    def elastic(self, minimum: int, *, running: int | None = None) -> EntryBuilder:
        """Elastic down to ``minimum`` pods; admitted, it runs ``running`` of its pods."""
        self._elastic = (minimum, running)
        return self

    def expected_end(self, when: datetime) -> EntryBuilder:
        """Admitted, and declares (``dispatchDuration.expected``) it ends then."""
        self._expected_end = when
        return self

    def runtime(self, seconds: float) -> EntryBuilder:
        """It is expected to run ``seconds`` once started."""
        self._runtime = seconds
        return self

    def promised(self, head: str, end: datetime) -> EntryBuilder:
        """Admitted by reservation backfill on the promise to ``head`` to end by ``end``."""
        self._promise = BackfillPromise(AppWrapperKey(head), end)
        return self

    def draining(self, for_key: str | None = None) -> EntryBuilder:
        """Being taken back (evicted for ``for_key``, or requeued)."""
        self._draining = True
        self._draining_for = for_key
        return self

    def obj(self) -> AppWrapperEntry:
        demand = self._demand
        if demand is None and self._demand_error is None:
            demand = appwrapper_demand(self.wire.spec())
        elastic_min = full_pods = None
        if self._elastic is not None:
            elastic_min, running = self._elastic
            if running is not None and demand is not None:
                full_pods, demand = demand.pods, sized(demand, running)
            elif demand is not None:
                demand = sized(demand, demand.pods)
        return AppWrapperEntry(
            key=AppWrapperKey(self.key), uid=self._uid, priority=self._priority,
            created=self._created, demand=None if self._demand_error else demand,
            demand_error=self._demand_error, quota_labels=dict(self._labels),
            clusters=self._clusters, cluster_selector=self._selector, phase=self._phase,
            avoid_cluster=self._avoid, not_before=self._not_before,
            queued_since=self._queued_since, priority_slope=self._slope,
            dispatched=self._dispatched, draining=self._draining,
            draining_for=(AppWrapperKey(self._draining_for) if self._draining_for
                          else None), expected_end=self._expected_end,
            elastic_min=elastic_min, full_pods=full_pods,
            expected_runtime=self._runtime, backfill_promise=self._promise, hold=self._hold)


class SnapshotBuilder:
    def __init__(self, now: datetime) -> None:
        self._now = now
        self._entries: list[AppWrapperEntry] = []
        self._clusters: list[ClusterCapacity] = []
        self._quota: QuotaForest | None = None
        self._policy = CyclePolicy()

    def add(self, *entries: EntryBuilder | AppWrapperEntry) -> SnapshotBuilder:
        self._entries.extend(e.obj() if isinstance(e, EntryBuilder) else e for e in entries)
        return self

    def clusters(self, *clusters: ClusterBuilder | ClusterCapacity) -> SnapshotBuilder:
        self._clusters.extend(c.obj() if isinstance(c, ClusterBuilder) else c
                              for c in clusters)
        return self

    def quota(self, forest: QuotaForest) -> SnapshotBuilder:
        self._quota = forest
        return self

    def policy(self, *, placement: str = "best-fit", preemption: bool | None = None,
               priority: bool = False, reclaim: bool = False,
               starvation_seconds: float = 300.0, fair_sharing: bool = True,
               backfill: str = "mcad") -> SnapshotBuilder:
        """``preemption=True`` turns on both kinds (the configuration's old boolean)."""
        if preemption is not None:
            priority = reclaim = preemption
        self._policy = CyclePolicy(PlacementPolicy(placement),
                                   PreemptionPolicy(priority=priority, reclaim=reclaim),
                                   starvation_seconds, fair_sharing, BackfillRule(backfill))
        return self

    def obj(self) -> Snapshot:
        quota = self._quota
        if quota is None:
            quota, _ = QuotaForest.build([])
        return Snapshot(now=self._now, appwrappers=tuple(self._entries),
                        clusters=tuple(self._clusters), quota=quota, policy=self._policy)
