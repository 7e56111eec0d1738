"""What one dispatch cycle decides on, and what it decides.

``Snapshot`` in (the AppWrappers, the clusters' capacity, the quota forest, the policy),
``CycleResult`` out (dispatches, one pending reason per waiting AppWrapper, evictions).
Everything here is a frozen value: a cycle never changes its snapshot, so the same
snapshot always gives the same result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import NamedTuple

from mcad.core.cycle.backfill import DEFAULT_STARVATION_SECONDS, BackfillRule
from mcad.core.life import requeue
from mcad.core.placement.capacity import AppWrapperKey, ClusterCapacity, ClusterName
from mcad.core.placement.clusters import EVERY_CLUSTER, ClusterSelector, PlacementPolicy
from mcad.core.placement.nodefit import Placement
from mcad.core.placement.victims import PreemptionPolicy
from mcad.core.quota.fairness import queue_key
from mcad.core.quota.forest import QuotaForest
from mcad.core.workload.demand import Demand, Interned
from mcad.core.workload.resources import ResourceList
from mcad.core.workload.topology import TopologyPin


class PendingReason(StrEnum):
    """Why a queued AppWrapper was not dispatched in this cycle."""

    SUSPENDED = "Suspended"
    QUEUE_NOT_FOUND = "QueueNotFound"
    PRIORITY_CLASS_NOT_FOUND = "PriorityClassNotFound"
    REQUEUE_PAUSE = "RequeuePause"
    INVALID_DEMAND = "InvalidDemand"
    QUOTA_NODE_NOT_FOUND = "QuotaNodeNotFound"
    NO_MATCHING_CLUSTER = "NoMatchingCluster"
    QUOTA_EXCEEDED = "QuotaExceeded"
    WAITING_FOR_PREEMPTION = "WaitingForPreemption"
    INSUFFICIENT_CAPACITY = "InsufficientCapacity"
    WAITING_FOR_HEAD_OF_LINE = "WaitingForHeadOfLine"


@dataclass(frozen=True, slots=True)
class Blocked:
    """Why a queued AppWrapper waits this cycle, as a part of the cycle found it.

    ``could_run``: it would fit its quota and some cluster with nothing else running,
    so it may become the head of line; False when it never could (its message says so).
    """

    reason: PendingReason
    message: str
    could_run: bool = True


PREEMPTED = "Preempted"
"""Reason of every eviction the cycle orders to make room."""
SUSPENDED = requeue.SUSPENDED
"""Reason of the eviction of a running AppWrapper whose spec.suspend is true (an
uncounted requeue: ``mcad.core.life.requeue``)."""


@dataclass(frozen=True, slots=True)
class Hold:
    """Why an AppWrapper stays out of the queue whatever room there is, until someone
    acts: it is suspended (v1beta2's ``spec.suspend``), or a Kueue label of it names a
    queue or priority class that does not exist. Admitted and suspended, it is taken
    back first."""

    reason: PendingReason
    message: str


@dataclass(frozen=True, slots=True)
class Queued:
    """Waiting to be dispatched."""


@dataclass(frozen=True, slots=True)
class Admitted:
    """Dispatched to ``cluster``: it holds quota and capacity there (inside ``pin``'s
    topology domains, when it is pinned)."""

    cluster: ClusterName
    pin: TopologyPin | None = None


Phase = Queued | Admitted
QUEUED = Queued()


@dataclass(frozen=True, slots=True)
class BackfillPromise:
    """What a job started by reservation backfill promised the head of the line: it took
    room reserved for ``head`` because it was expected to end by ``end``, the start of
    that reservation, and it is held to that (``mcad.core.cycle.promises.broken_promises``:
    still running then, while ``head`` waits and cannot start without it, it is
    evicted)."""

    head: AppWrapperKey
    end: datetime


class Alike(Interned):
    """What a waiting AppWrapper's decision reads of it once its quota node is known and
    nothing holds it back (no hold, no requeue pause, not elastic): its demand's total and
    shape, the clusters it names or selects, the kinds it wraps, its namespace and its
    quota labels.
    Interned (``Interned``): entries that are alike hold one object, so the cycle answers
    a long queue's many alike waiters from one decision (``mcad.core.cycle.decide``).

    It gives ``total`` and ``labels`` as attributes: the cycle reads a 100,000-long
    queue's totals and quota assignments through it, a few hundred shared objects,
    instead of each entry's demand and label mapping (those, scattered in memory, cost
    the order 115 ms a cycle)."""

    __slots__ = ("labels", "total")

    def __init__(self, key: tuple[object, ...]) -> None:
        super().__init__(key)
        total, labels = key[0], key[-1]
        assert isinstance(total, ResourceList) and isinstance(labels, tuple)
        self.total = total
        self.labels: Mapping[str, str] = dict(labels)


def alike_of(entry: AppWrapperEntry) -> Alike | None:
    """The interned ``Alike`` of ``entry``; None when it has no demand, is elastic (an
    elastic one may start small: its decision reads room each time), or is held or was
    requeued (rare: each such one is decided on its own, so the cycle checks neither for
    the many alike)."""
    demand = entry.demand
    if demand is None or entry.elastic_min is not None or entry.hold is not None or \
            entry.not_before is not None:
        return None
    return Alike.of((demand.total, demand.shape, entry.clusters, entry.cluster_selector,
                     entry.kinds, entry.namespace, tuple(sorted(entry.quota_labels.items()))))


@dataclass(frozen=True, slots=True)
class AppWrapperEntry:
    """One AppWrapper as the cycle sees it."""

    key: AppWrapperKey
    uid: str
    priority: int
    created: datetime
    demand: Demand | None
    demand_error: str | None = None
    quota_labels: Mapping[str, str] = field(default_factory=dict)
    clusters: tuple[str, ...] = ()
    cluster_selector: ClusterSelector = EVERY_CLUSTER
    phase: Phase = QUEUED
    avoid_cluster: str | None = None
    not_before: datetime | None = None
    queued_since: datetime | None = None
    """When it last entered the queue (creation or last requeue); None: ``created``."""
    kinds: tuple[tuple[str, str], ...] = ()
    """The (apiVersion, kind) of every object it wraps: only clusters serving them all
    may take it."""
    priority_slope: float = 0.0
    """MCAD's ``priorityslope``: the priority grows by this much per second waited."""
    dispatched: datetime | None = None
    """When an admitted AppWrapper was dispatched (victims: most recent goes first)."""
    draining: bool = False
    """Admitted, and being taken back (requeued or evicted): never an eviction victim."""
    draining_for: AppWrapperKey | None = None
    """Being evicted to make room for this AppWrapper."""
    expected_end: datetime | None = None
    """Admitted: when its run should end (``dispatchDuration.expected``), for estimates."""
    elastic_min: int | None = None
    """Elastic (``mcad.core.cycle.elastic``): the fewest pods it may run with; None: a gang."""
    full_pods: int | None = None
    """Elastic and admitted: its full size (``demand`` is then its admitted size)."""
    expected_runtime: float | None = None
    """Seconds it is expected to run once started (declared, or learned from its
    family's past runs); None: not known. Reservation backfill reads it."""
    backfill_promise: BackfillPromise | None = None
    """Admitted by reservation backfill on the promise to end before the head's
    reservation (``status.backfillPromise``); None: admitted on no promise."""
    hold: Hold | None = None
    """Kept out of the queue (``Hold``); None: it may be dispatched."""
    since: float = field(init=False, repr=False, compare=False)
    """``queued_since or created`` as POSIX seconds: the queue's sort key, computed once
    per entry (the controller keeps entries across cycles) since sorting 10,000 aware
    datetimes costs more than the rest of the sort."""
    namespace: str = field(init=False, repr=False, compare=False)
    """The namespace part of ``key``, split once per entry: the cycle looks it up in the
    namespaces closed on some cluster (``mcad.core.placement.namespaces``)."""
    queue_key: str | None = field(init=False, repr=False, compare=False)
    """Its priority, ``since`` and ``uid`` as one string that sorts in queue order
    (``mcad.core.quota.fairness.queue_key``); None when it has a priority slope or a
    priority too large to stamp."""
    alike: Alike | None = field(init=False, repr=False, compare=False)
    """What its decision reads of it while it waits (``Alike``), worked out once."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "namespace", self.key.partition("/")[0])
        moment = self.queued_since or self.created
        try:  # (naive: UTC, as everywhere in the core; datetime.min: first of all)
            since = (moment if moment.tzinfo is not None
                     else moment.replace(tzinfo=UTC)).timestamp()
        except (OverflowError, ValueError):
            since = float("-inf")
        object.__setattr__(self, "since", since)
        object.__setattr__(self, "queue_key",
                           queue_key(self.priority, self.priority_slope, since, self.uid))
        object.__setattr__(self, "alike", alike_of(self))

    def end(self, runtime: float | None) -> datetime | None:
        """When it should end, admitted: its declared end, else its dispatch plus
        ``runtime`` seconds (its ``expected_runtime``, or a run time the caller learned);
        None: not known. The one rule for reservation backfill and start estimates."""
        if self.expected_end is not None:
            return self.expected_end
        if self.dispatched is not None and runtime is not None:
            return self.dispatched + timedelta(seconds=runtime)
        return None


@dataclass(frozen=True, slots=True)
class CyclePolicy:
    placement: PlacementPolicy = PlacementPolicy.BEST_FIT
    preemption: PreemptionPolicy = field(default_factory=PreemptionPolicy)
    starvation_seconds: float = DEFAULT_STARVATION_SECONDS
    fair_sharing: bool = True
    """Order borrowers by their node's share (``mcad.core.quota.fairness``); False: by priority
    and age alone."""
    backfill: BackfillRule = BackfillRule.MCAD
    """How the head of the line is kept from starving (``mcad.core.cycle.backfill``)."""


@dataclass(frozen=True)
class Snapshot:
    """Everything one cycle decides on.

    ``quota`` carries the trees' limits and no usage of the AppWrappers listed here:
    the cycle charges the admitted ones itself (usage already in it counts as well).
    """

    now: datetime
    appwrappers: tuple[AppWrapperEntry, ...]
    clusters: tuple[ClusterCapacity, ...]
    quota: QuotaForest
    policy: CyclePolicy = CyclePolicy()


class Dispatch(NamedTuple):
    key: AppWrapperKey
    cluster: ClusterName
    placement: Placement
    pods: int | None = None
    """Elastic, dispatched below its full size: the pods it starts with."""
    promise: BackfillPromise | None = None
    """Started by reservation backfill on this promise to the head of the line."""


class Resize(NamedTuple):
    """An admitted elastic AppWrapper grows or shrinks to ``pods``."""

    key: AppWrapperKey
    pods: int
    reason: str
    """``Grow``, or ``Shrink`` (to make room for ``message``'s AppWrapper)."""
    message: str


class Pending(NamedTuple):
    key: AppWrapperKey
    reason: PendingReason
    message: str


class Eviction(NamedTuple):
    key: AppWrapperKey
    reason: str
    message: str
    for_key: AppWrapperKey


@dataclass(frozen=True)
class CycleResult:
    dispatches: tuple[Dispatch, ...]
    pending: tuple[Pending, ...]
    evictions: tuple[Eviction, ...]
    resizes: tuple[Resize, ...] = ()
