"""The dispatch cycle: one snapshot in, every decision out.

Kueue's shape: the controller gathers AppWrappers, quota and cluster capacity into a
``Snapshot``; ``dispatch_cycle`` decides on private copies and returns what to do
(dispatch here, keep pending for this reason, evict these); the controller applies it.
Nothing in the snapshot is changed, so the same snapshot always gives the same result.

Phases:

1. Charge the admitted AppWrappers to a copy of the quota forest (they hold quota);
   they are also the eviction candidates. Their pods already hold capacity, through
   the nodes' requests or the clusters' reservations.
2. Order the queued AppWrappers (``mcad.core.queue``).
3. Build the capacity board: per-node free room, reservations placed first.
4. Walk the queue. Each AppWrapper gets exactly one outcome, from the first check it
   fails: RequeuePause, InvalidDemand, QuotaNodeNotFound, NoMatchingCluster,
   QuotaExceeded (or WaitingForPreemption once evictions are issued for it),
   InsufficientCapacity, WaitingForHeadOfLine; or it is dispatched, and its quota and
   nodes are charged at once, so no later decision in the cycle counts on them.
   The head-of-line rule and its reservation are stated in ``mcad.core.queue``.
5. Return the decisions.

Speed (10,000 queued AppWrappers in a few tens of milliseconds): free room only
shrinks during a cycle, so "this quota shape did not fit" and "this pod shape did not
fit these clusters" are cached for the rest of the cycle, and most of a long queue is
answered from those caches. Cluster totals reject a gang before any node is looked at.

Preemption (``CyclePolicy.preemption``) covers quota: an AppWrapper blocked by quota
that lower-priority borrowers hold gets them evicted (``QuotaForest.evictions_for``)
when its pods then have room, either now or once the evicted pods are gone (cluster
totals). It is dispatched in a later cycle, after the evictions; meanwhile its quota
and (when it fits now) its nodes are held so nothing behind it takes them. Each quota
assignment gets one preemption turn per cycle, taken by the first AppWrapper quota
blocks there (Kueue likewise considers one head per queue): later ones decide on fresh
facts next cycle, and one cycle's eviction work stays bounded. Victims already chosen
are not chosen again, and their quota counts as returned when later preemptors of other
assignments look for victims (but not for anything dispatched in this cycle).

Contract with the caller: ``Snapshot.quota`` has no usage of the snapshot's admitted
AppWrappers (the cycle charges them); clusters carry bound pods in node requests and
dispatched-but-unbound pods as reservations.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import NamedTuple

from mcad.core.capacity import AppWrapperKey, ClusterCapacity, ClusterName
from mcad.core.demand import Demand
from mcad.core.placement import (
    EVERY_CLUSTER,
    ClusterBoard,
    ClusterSelector,
    NoFit,
    Placement,
    PlacementPolicy,
    resource_weight_order,
)
from mcad.core.queue import DEFAULT_STARVATION_SECONDS, BackfillPolicy, in_queue_order
from mcad.core.quota import QuotaAssignment, QuotaCharge, QuotaForest, QuotaProblem
from mcad.core.resources import ResourceList


class PendingReason(StrEnum):
    """Why a queued AppWrapper was not dispatched in this cycle."""

    REQUEUE_PAUSE = "RequeuePause"
    INVALID_DEMAND = "InvalidDemand"
    QUOTA_NODE_NOT_FOUND = "QuotaNodeNotFound"
    NO_MATCHING_CLUSTER = "NoMatchingCluster"
    QUOTA_EXCEEDED = "QuotaExceeded"
    WAITING_FOR_PREEMPTION = "WaitingForPreemption"
    INSUFFICIENT_CAPACITY = "InsufficientCapacity"
    WAITING_FOR_HEAD_OF_LINE = "WaitingForHeadOfLine"


PREEMPTED = "Preempted"
"""Reason of every eviction: a higher-priority AppWrapper needs the borrowed quota."""


@dataclass(frozen=True, slots=True)
class Queued:
    """Waiting to be dispatched."""


@dataclass(frozen=True, slots=True)
class Admitted:
    """Dispatched to ``cluster``: it holds quota and capacity there."""

    cluster: ClusterName


Phase = Queued | Admitted
QUEUED = Queued()


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


@dataclass(frozen=True, slots=True)
class CyclePolicy:
    placement: PlacementPolicy = PlacementPolicy.BEST_FIT
    preemption: bool = False
    starvation_seconds: float = DEFAULT_STARVATION_SECONDS


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


class Pending(NamedTuple):
    key: AppWrapperKey
    reason: PendingReason
    message: str


_pending = functools.partial(tuple.__new__, Pending)
"""``Pending`` from a 3-tuple without NamedTuple's Python-level ``__new__`` (hot path)."""


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


def dispatch_cycle(snapshot: Snapshot) -> CycleResult:
    """Decide, for every queued AppWrapper of ``snapshot``, dispatch or why not."""
    # 1. Admitted AppWrappers hold quota; they are the eviction candidates.
    quota = snapshot.quota.copy()
    decider = _Decider(snapshot, quota)
    queued = []
    admitted = []
    for entry in snapshot.appwrappers:
        if isinstance(entry.phase, Admitted):
            admitted.append((entry, entry.phase.cluster))
        else:
            queued.append(entry)
    decider.hold_admitted(admitted)

    # 2. Queue order, once.
    ordered = in_queue_order(queued)

    # 3. The capacity board was built with the decider: per-node free room with every
    #    cluster's reservations placed first.

    # 4. Decide, in order, charging quota and nodes as AppWrappers are dispatched.
    for entry in ordered:
        decider.decide(entry)

    # 5. The decisions.
    return CycleResult(tuple(decider.dispatches), tuple(decider.pending),
                       tuple(decider.evictions))


# -- phase 4, one AppWrapper at a time -----------------------------------------------------

_Outcome = tuple[PendingReason, str, bool]
"""A cached failure: reason, message, and whether the AppWrapper could ever run."""


class _Decider:
    """The mutable state of one cycle: charged quota, charged nodes, caches, results."""

    def __init__(self, snapshot: Snapshot, quota: QuotaForest) -> None:
        self.now = snapshot.now
        self.policy = snapshot.policy
        self.preemption = snapshot.policy.preemption
        self.backfill = BackfillPolicy(snapshot.policy.starvation_seconds)
        self.unused_quota = snapshot.quota
        self.quota = quota
        self.trees = tuple(quota.trees())
        # With one tree (the usual case) the label value alone keys the assignment.
        self.one_tree = self.trees[0] if len(self.trees) == 1 else None
        self.board = ClusterBoard(snapshot.clusters)
        self.everywhere = self.board.eligible()
        self.dispatches: list[Dispatch] = []
        self.pending: list[Pending] = []
        self.evictions: list[Eviction] = []
        self.holders: list[tuple[AppWrapperEntry, str, QuotaAssignment]] = []
        # Eviction candidates, lowest priority first, built on the first preemption.
        self.charges: list[QuotaCharge] | None = None
        self.charge_priorities: list[int] = []
        self.admitted_on: dict[str, tuple[str, ResourceList]] = {}
        """Where each admitted AppWrapper runs and what it holds (with the candidates)."""
        self._assignments: dict[object, QuotaAssignment | QuotaProblem] = {}
        self._quota_no: dict[tuple[object, ...], _Outcome] = {}
        """Quota misfits: (assignment id, total's items) -> outcome."""
        self._capacity_no: dict[tuple[object, ...], _Outcome] = {}
        # The head of line (see mcad.core.queue) and what is reserved for it.
        self.head_seen = False
        """True once the head of line is known (whether or not it holds a reservation)."""
        self.head: AppWrapperEntry | None = None
        self.held_quota: QuotaForest | None = None
        self.held_nodes: Placement | None = None
        self.closed_cluster: int | None = None
        # Quota as it will be once this cycle's evictions are done: evictions for a later
        # preemptor are computed on it, so two preemptors never count on one victim.
        # Everything else is decided on ``quota``, where victims still hold their share
        # until they are gone.
        self.after_evictions: QuotaForest | None = None
        # Who took each quota assignment's one preemption turn, and whether it evicted.
        self.preempt_turns: dict[QuotaAssignment, tuple[AppWrapperKey, bool]] = {}

    def assignment(self, labels: Mapping[str, str]) -> QuotaAssignment | QuotaProblem:
        """The quota assignment for ``labels``, one object per label set in a cycle."""
        one_tree = self.one_tree
        key: object = (labels.get(one_tree) if one_tree is not None
                       else tuple(map(labels.get, self.trees)))
        found = self._assignments.get(key)
        if found is None:
            found = self._assignments[key] = self.quota.resolve(labels)
        return found

    def hold_admitted(self, admitted: Sequence[tuple[AppWrapperEntry, str]]) -> None:
        """Charge what admitted AppWrappers hold (summed per quota assignment)."""
        sums: dict[int, tuple[QuotaAssignment, dict[str, int]]] = {}
        for entry, cluster in admitted:
            if entry.demand is None:
                continue
            assignment = self.assignment(entry.quota_labels)
            if isinstance(assignment, QuotaProblem):
                continue
            total = entry.demand.total
            summed = sums.setdefault(id(assignment), (assignment, {}))[1]
            for name, value in total.items():
                summed[name] = summed.get(name, 0) + value
            self.holders.append((entry, cluster, assignment))
        for assignment, summed in sums.values():
            self.quota.charge(assignment, ResourceList(summed))

    def eviction_candidates(self) -> list[QuotaCharge]:
        """The admitted AppWrappers as eviction candidates, lowest priority first."""
        if self.charges is None:
            self.charges = sorted(
                (QuotaCharge(entry.key, entry.priority, assignment, entry.demand.total)
                 for entry, _, assignment in self.holders if entry.demand is not None),
                key=lambda c: (c.priority, c.key))
            self.charge_priorities = [c.priority for c in self.charges]
            self.admitted_on = {entry.key: (cluster, entry.demand.total)
                                for entry, cluster, _ in self.holders
                                if entry.demand is not None}
        return self.charges

    def pend(self, entry: AppWrapperEntry, reason: PendingReason, message: str) -> None:
        self.pending.append(Pending(entry.key, reason, message))

    def decide(self, entry: AppWrapperEntry) -> None:
        # The hot path of the cycle: most of a long queue ends at a cached misfit, so
        # the checks below avoid calls and allocations where they can.
        not_before = entry.not_before
        if not_before is not None and not_before > self.now:
            self.pend(entry, PendingReason.REQUEUE_PAUSE,
                      f"requeued; it may be dispatched again from {not_before.isoformat()}")
            return
        demand = entry.demand
        if demand is None:
            self.pend(entry, PendingReason.INVALID_DEMAND,
                      entry.demand_error or "its resource demand could not be read")
            return
        labels = entry.quota_labels
        one_tree = self.one_tree
        assignment = self._assignments.get(
            labels.get(one_tree) if one_tree is not None else tuple(map(labels.get, self.trees)))
        if assignment is None:
            assignment = self.assignment(labels)
        if isinstance(assignment, QuotaProblem):
            self.pend(entry, PendingReason(assignment.reason), assignment.message)
            return
        selector = entry.cluster_selector
        if entry.clusters or (selector is not EVERY_CLUSTER and (
                selector.match_labels or selector.match_expressions)) or \
                (self.board.kinds_differ and entry.kinds):
            candidates = self.board.eligible(entry.clusters, selector, entry.kinds)
        else:
            candidates = self.everywhere
        if isinstance(candidates, str):
            self.pend(entry, PendingReason.NO_MATCHING_CLUSTER, candidates)
            return
        total = demand.total
        # The assignment object is this cycle's one per label set: its id is its identity.
        quota_key = (id(assignment), tuple(total.items()))
        cached = self._quota_no.get(quota_key)
        if cached is not None:
            if self.head_seen:
                self.pending.append(_pending((entry.key, cached[0], cached[1])))
            else:
                self.blocked(entry, demand, assignment, candidates, cached, by_quota=True)
            return
        if not self.quota_fits(entry, demand, assignment, candidates, quota_key):
            return
        placement = self.place(entry, demand, assignment, candidates)
        if placement is None:
            return
        self.charge(assignment, total)
        self.dispatches.append(Dispatch(entry.key, placement.cluster, placement))

    # -- quota ---------------------------------------------------------------------------

    def charge(self, assignment: QuotaAssignment, amount: ResourceList) -> None:
        """Charge every working view of the quota forest."""
        self.quota.charge(assignment, amount)
        if self.held_quota is not None:
            self.held_quota.charge(assignment, amount)
        if self.after_evictions is not None:
            self.after_evictions.charge(assignment, amount)

    def quota_fits(self, entry: AppWrapperEntry, demand: Demand,
                   assignment: QuotaAssignment, candidates: tuple[int, ...],
                   key: tuple[object, ...]) -> bool:
        """True when ``demand`` may be charged; else records why not (cached by ``key``)."""
        total = demand.total
        held = self.held_quota
        problem = (held or self.quota).fits(assignment, total)
        if problem is None:
            return True
        if held is not None:
            problem = self.quota.fits(assignment, total)
            if problem is None:
                outcome = self.behind_head(True)
                self._quota_no[key] = outcome
                self.blocked(entry, demand, assignment, candidates, outcome, by_quota=True)
                return False
        assert problem is not None
        message = problem.message
        cache = True
        if self.preemption and problem.reason == PendingReason.QUOTA_EXCEEDED:
            turn = self.preempt_turns.get(assignment)
            if turn is None:
                # This AppWrapper's outcome is its own: it is not cached for the others.
                cache = False
                refusal = self.preempt(entry, demand, assignment, candidates)
                if refusal is None:
                    return False
            elif turn[1]:
                refusal = f"it waits for the evictions issued this cycle for {turn[0]}"
            else:
                refusal = (f"preemption for its quota node was tried this cycle for "
                           f"{turn[0]}, first in line")
            message = f"{message}; {refusal}"
        never = self.unused_quota.fits(assignment, total) is not None
        if never:
            message += "; it asks for more than the quota allows even with nothing else running"
        outcome = (PendingReason(problem.reason), message, not never)
        if cache:
            self._quota_no[key] = outcome
        self.blocked(entry, demand, assignment, candidates, outcome, by_quota=True)
        return False

    def preempt(self, entry: AppWrapperEntry, demand: Demand, assignment: QuotaAssignment,
                candidates: tuple[int, ...]) -> str | None:
        """Evict borrowers for ``entry``; None when done, else why it was not.

        Once per quota assignment and cycle (Kueue considers one head per queue): the
        first AppWrapper quota blocks there takes the turn, the others decide on fresh
        facts in the next cycle. That also bounds the eviction work of one cycle.
        """
        self.preempt_turns[assignment] = (entry.key, False)
        charges = self.eviction_candidates()
        lower = charges[:bisect.bisect_left(self.charge_priorities, entry.priority)]
        view = self.after_evictions or self.quota
        victims = view.evictions_for(assignment, demand.total, lower,
                                     priority=entry.priority) if lower else None
        if not victims:
            return "no lower-priority borrower can be evicted to make room"
        placement = self.board.place(demand, self.open(candidates),
                                     policy=self.policy.placement, avoid=entry.avoid_cluster)
        if isinstance(placement, NoFit) and not self.fits_after_eviction(demand, candidates,
                                                                        victims):
            return "evicting the borrowers would not make room for its pods"
        self.preempt_turns[assignment] = (entry.key, True)
        gone = set(victims)
        if self.after_evictions is None:
            self.after_evictions = self.quota.copy()
        for charge in charges:
            if charge.key in gone:
                self.after_evictions.release(charge.assignment, charge.amount)
        self.charges = [c for c in charges if c.key not in gone]
        self.charge_priorities = [c.priority for c in self.charges]
        self.charge(assignment, demand.total)
        for victim in victims:
            self.evictions.append(Eviction(
                AppWrapperKey(victim), PREEMPTED,
                f"evicted to return borrowed quota to {entry.key} (priority "
                f"{entry.priority})", entry.key))
        self.pend(entry, PendingReason.WAITING_FOR_PREEMPTION,
                  f"waiting for {len(victims)} lower-priority AppWrapper"
                  f"{'s' if len(victims) > 1 else ''} borrowing its quota to be evicted: "
                  f"{', '.join(victims)}")
        return None

    def fits_after_eviction(self, demand: Demand, candidates: tuple[int, ...],
                            victims: Sequence[str]) -> bool:
        """True when some cluster's total free room plus the victims' there holds it."""
        for i in self.open(candidates):
            name = self.board.clusters[i].name
            free = dict(self.board.pools[i].total)
            for victim in victims:
                cluster, amount = self.admitted_on[victim]
                if cluster == name:
                    for resource, value in amount.items():
                        free[resource] = free.get(resource, 0) + value
            if demand.total.fits_in(free):
                return True
        return False

    # -- capacity ------------------------------------------------------------------------

    def open(self, candidates: tuple[int, ...]) -> tuple[int, ...]:
        closed = self.closed_cluster
        if closed is None or closed not in candidates:
            return candidates
        return tuple(i for i in candidates if i != closed)

    def place(self, entry: AppWrapperEntry, demand: Demand, assignment: QuotaAssignment,
              candidates: tuple[int, ...]) -> Placement | None:
        shape = (tuple((s.count, s.requests, s.node_selector, s.tolerations)
                       for s in demand.pod_sets), candidates)
        cached = self._capacity_no.get(shape)
        if cached is not None:
            self.blocked(entry, demand, assignment, candidates, cached, by_quota=False)
            return None
        placement = self.board.place(demand, self.open(candidates),
                                     policy=self.policy.placement, avoid=entry.avoid_cluster)
        if isinstance(placement, Placement):
            return placement
        if self.fits_without_reservation(demand, candidates):
            outcome = self.behind_head(False)
        else:
            never = not self.board.fits_when_empty(demand, candidates)
            message = placement.message
            if never:
                message += "; it does not fit even with nothing else running"
            outcome = (PendingReason.INSUFFICIENT_CAPACITY, message, not never)
        self._capacity_no[shape] = outcome
        self.blocked(entry, demand, assignment, candidates, outcome, by_quota=False)
        return None

    def fits_without_reservation(self, demand: Demand, candidates: tuple[int, ...]) -> bool:
        board = self.board
        policy = self.policy.placement
        if self.closed_cluster is not None and self.closed_cluster in candidates:
            trial = board.place(demand, (self.closed_cluster,), policy=policy)
            if isinstance(trial, Placement):
                board.unplace(trial)
                return True
        if self.held_nodes is not None:
            board.unplace(self.held_nodes)
            trial = board.place(demand, candidates, policy=policy)
            if isinstance(trial, Placement):
                board.unplace(trial)
            board.replace(self.held_nodes)
            return isinstance(trial, Placement)
        return False

    # -- head of line ----------------------------------------------------------------------

    def behind_head(self, by_quota: bool) -> _Outcome:
        head = self.head
        assert head is not None
        waited = int((self.now - (head.queued_since or head.created)).total_seconds())
        what = "quota" if by_quota else "room"
        return (PendingReason.WAITING_FOR_HEAD_OF_LINE,
                f"it would fit, but the {what} is held for {head.key}, first in line and "
                f"waiting for {waited}s", True)

    def blocked(self, entry: AppWrapperEntry, demand: Demand, assignment: QuotaAssignment,
                candidates: tuple[int, ...], outcome: _Outcome, *, by_quota: bool) -> None:
        """Record ``outcome``; the first AppWrapper that could run may become the head."""
        reason, message, could_run = outcome
        self.pend(entry, reason, message)
        if self.head_seen or not could_run or reason not in (
                PendingReason.QUOTA_EXCEEDED, PendingReason.INSUFFICIENT_CAPACITY):
            return
        if by_quota and not self.board.fits_when_empty(demand, candidates):
            return
        self.head_seen = True
        if not self.backfill.is_starving(now=self.now,
                                         waiting_since=entry.queued_since or entry.created):
            return
        self.head = entry
        held = self.quota.copy()
        held.charge(assignment, demand.total)
        self.held_quota = held
        if by_quota:
            placement = self.board.place(demand, candidates, policy=self.policy.placement,
                                         avoid=entry.avoid_cluster)
            if isinstance(placement, Placement):
                self.held_nodes = placement
                return
        self.closed_cluster = self.cluster_to_drain(demand, candidates)

    def cluster_to_drain(self, demand: Demand, candidates: tuple[int, ...]) -> int | None:
        """The cluster held for a head that fits nowhere now: most free of its scarcest."""
        board = self.board
        runnable = [i for i in candidates if board.fits_when_empty(demand, (i,))]
        if not runnable:
            return None
        order = resource_weight_order(demand.total)

        def share(i: int) -> tuple[float, str]:
            total = board.pools[i].total
            allocatable = board.allocatable(i)
            worst = min((total.get(r, 0) / allocatable[r] if allocatable[r] else 0.0
                         for r in order), default=1.0)
            return (-worst, board.clusters[i].name)

        return min(runnable, key=share)
