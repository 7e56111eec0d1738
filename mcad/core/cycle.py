"""The dispatch cycle: one snapshot in, every decision out.

Kueue's shape: the controller gathers AppWrappers, quota and cluster capacity into a
``Snapshot`` (``mcad.core.snapshot``); ``dispatch_cycle`` decides on private copies and
returns what to do (dispatch here, keep pending for this reason, evict these); the
controller applies it. The same snapshot always gives the same result.

Phases:

1. Charge the admitted AppWrappers to a copy of the quota forest (they hold quota);
   they are also the eviction candidates. Their pods already hold capacity, through the
   nodes' requests or the clusters' reservations.
2. Order the queued AppWrappers: within quota first, then fair shares
   (``mcad.core.fairness``; plain priority order without quota trees).
3. Build the capacity board: per-node free room, reservations placed first.
4. Walk the queue. Each AppWrapper gets exactly one outcome, from the first check it
   fails: RequeuePause, InvalidDemand, QuotaNodeNotFound, NoMatchingCluster,
   WaitingForPreemption (its victims are still going), QuotaExceeded,
   InsufficientCapacity, WaitingForHeadOfLine; or it is dispatched, and its quota and
   nodes are charged at once, so no later decision in the cycle counts on them. The
   head-of-line rule and its reservation are stated in ``mcad.core.queue``
   (``mcad.core.headofline`` keeps its state); preemption is stated in
   ``mcad.core.preemption``.
5. Return the decisions.

The decisions are layered, one idea per module, on one cycle's state
(``mcad.core.deciding.CycleState``: charged quota and nodes, results, caches): the
elastic steps (``mcad.core.elastic``: start small, grow, shrink) under the preemption
steps (``mcad.core.preempting``: evict for quota or capacity, at most one turn per
quota assignment and one capacity eviction per cycle, the room held while victims
drain) under the queue walk here (quota, placement, head of line).

Speed (10,000 queued AppWrappers in a few tens of milliseconds): free room only shrinks
during a cycle, so "this quota shape did not fit" and "this pod shape did not fit these
clusters" are cached for the rest of the cycle, and most of a long queue is answered
from those caches. Cluster totals reject a gang before any node is looked at.

Contract with the caller: ``Snapshot.quota`` has no usage of the snapshot's admitted
AppWrappers (the cycle charges them); clusters carry bound pods in node requests and
dispatched-but-unbound pods as reservations, and (for preemption) each admitted
AppWrapper's bound pods in ``held_by``.
"""

from __future__ import annotations

import functools

from mcad.core.demand import Demand
from mcad.core.fairness import FairOrder
from mcad.core.headofline import Outcome
from mcad.core.placement import EVERY_CLUSTER, Placement
from mcad.core.preempting import PreemptionSteps
from mcad.core.quota import QuotaAssignment, QuotaProblem
from mcad.core.snapshot import (
    PREEMPTED,
    QUEUED,
    Admitted,
    AppWrapperEntry,
    CyclePolicy,
    CycleResult,
    Dispatch,
    Eviction,
    Pending,
    PendingReason,
    Phase,
    Queued,
    Resize,
    Snapshot,
)

__all__ = ["PREEMPTED", "QUEUED", "Admitted", "AppWrapperEntry", "CyclePolicy",
           "CycleResult", "Dispatch", "Eviction", "Pending", "PendingReason", "Phase",
           "Queued", "Resize", "Snapshot", "dispatch_cycle"]

_pending = functools.partial(tuple.__new__, Pending)
"""``Pending`` from a 3-tuple without NamedTuple's Python-level ``__new__`` (hot path)."""
_ROOM_REASONS = (PendingReason.QUOTA_EXCEEDED, PendingReason.INSUFFICIENT_CAPACITY)


def dispatch_cycle(snapshot: Snapshot) -> CycleResult:
    """Decide, for every queued AppWrapper of ``snapshot``, dispatch or why not."""
    # 1. Admitted AppWrappers hold quota; they are the eviction candidates.
    decider = _Decider(snapshot, snapshot.quota.copy())
    queued = []
    admitted = []
    for entry in snapshot.appwrappers:
        if isinstance(entry.phase, Admitted):
            admitted.append(entry)
        else:
            queued.append(entry)
    decider.hold_admitted(admitted)

    # 2. Queue order: within quota first, then fair shares (live, as quota is charged).
    order = FairOrder(queued, now=snapshot.now, forest=decider.quota,
                      assignment_of=lambda e: decider.assignment(e.quota_labels),
                      demand_of=lambda e: e.demand.total if e.demand else None,
                      fair=snapshot.policy.fair_sharing)
    decider.order = order

    # 3. The capacity board was built with the decider: per-node free room with every
    #    cluster's reservations placed first.

    # 4. Decide, in order, charging quota and nodes as AppWrappers are dispatched.
    for entry in order:
        decider.decide(entry, order.assignment)

    # 5. Elastic AppWrappers grow into what is left (``mcad.core.elastic``).
    decider.grow()

    # 6. The decisions.
    return CycleResult(tuple(decider.dispatches), tuple(decider.pending),
                       tuple(decider.evictions), tuple(decider.resizes))


class _Decider(PreemptionSteps):
    """Walks the queue: each AppWrapper's quota, placement and place in line."""

    def decide(self, entry: AppWrapperEntry, known: QuotaAssignment | None = None) -> None:
        """Decide ``entry`` (``known``: its quota assignment, when the order has it)."""
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
        assignment: QuotaAssignment | QuotaProblem | None = known
        if assignment is None:
            labels = entry.quota_labels
            one_tree = self.one_tree
            assignment = self._assignments.get(
                labels.get(one_tree) if one_tree is not None
                else tuple(map(labels.get, self.trees)))
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
        if self.draining_for and entry.key in self.draining_for and \
                self.wait_for_victims(entry, demand, assignment, candidates):
            return
        total = demand.total
        # The assignment object is this cycle's one per label set: its id is its identity.
        quota_key = (id(assignment), total)  # a ResourceList hashes once, then is cached
        cached = self._quota_no.get(quota_key)
        if cached is not None:
            if self.line.seen and entry.elastic_min is None:
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

    def quota_fits(self, entry: AppWrapperEntry, demand: Demand,
                   assignment: QuotaAssignment, candidates: tuple[int, ...],
                   key: tuple[object, ...]) -> bool:
        """True when ``demand`` may be charged; else records why not (cached by ``key``)."""
        total = demand.total
        held = self.line.held_quota
        problem = (held or self.quota).fits(assignment, total)
        if problem is None:
            return True
        if held is not None:
            problem = self.quota.fits(assignment, total)
            if problem is None:
                outcome = self.line.behind(True)
                self._quota_no[key] = outcome
                self.blocked(entry, demand, assignment, candidates, outcome, by_quota=True)
                return False
        assert problem is not None
        if entry.elastic_min is not None and \
                self.start_small(entry, demand, assignment, candidates):
            return False  # started smaller: nobody evicted for it
        message = problem.message
        cache = True
        if self.preemption.any and problem.reason == PendingReason.QUOTA_EXCEEDED:
            turn = self.preempt_turns.get(assignment)
            if turn is None:
                refusal = self.preempt_quota(entry, demand, assignment, candidates)
                if refusal is None:
                    return False
                # A preemption tried is this AppWrapper's own outcome, not the others'.
                cache = not refusal
            elif turn[1]:
                refusal = f"it waits for the evictions issued this cycle for {turn[0]}"
            else:
                refusal = (f"preemption for its quota node was tried this cycle for "
                           f"{turn[0]}, first in line")
            if refusal:
                message = f"{message}; {refusal}"
        never = self.unused_quota.fits(assignment, total) is not None
        if never:
            message += "; it asks for more than the quota allows even with nothing else running"
        outcome = (PendingReason(problem.reason), message, not never)
        if cache:
            self._quota_no[key] = outcome
        self.blocked(entry, demand, assignment, candidates, outcome, by_quota=True)
        return False

    def place(self, entry: AppWrapperEntry, demand: Demand, assignment: QuotaAssignment,
              candidates: tuple[int, ...]) -> Placement | None:
        shape = (tuple((s.count, s.requests, s.node_selector, s.tolerations)
                       for s in demand.pod_sets), candidates)
        cached = self._capacity_no.get(shape)
        if cached is not None and entry.elastic_min is not None and \
                self.start_small(entry, demand, assignment, candidates):
            return None  # started smaller: nobody evicted for it
        if cached is not None:
            if not self.preempt_capacity(entry, demand, assignment, candidates):
                self.blocked(entry, demand, assignment, candidates, cached, by_quota=False)
            return None
        placement = self.board.place(demand, self.line.open(candidates),
                                     policy=self.policy.placement, avoid=entry.avoid_cluster)
        if isinstance(placement, Placement):
            return placement
        if self.line.would_fit_unreserved(demand, candidates):
            outcome = self.line.behind(False)
        else:
            never = not self.board.fits_when_empty(demand, candidates)
            message = placement.message
            if never:
                message += "; it does not fit even with nothing else running"
            outcome = (PendingReason.INSUFFICIENT_CAPACITY, message, not never)
        self._capacity_no[shape] = outcome
        if entry.elastic_min is not None and outcome[0] == PendingReason.INSUFFICIENT_CAPACITY \
                and self.start_small(entry, demand, assignment, candidates):
            return None  # started smaller: nobody evicted for it
        if outcome[0] == PendingReason.INSUFFICIENT_CAPACITY and outcome[2] and \
                self.preempt_capacity(entry, demand, assignment, candidates):
            return None
        self.blocked(entry, demand, assignment, candidates, outcome, by_quota=False)
        return None

    def blocked(self, entry: AppWrapperEntry, demand: Demand, assignment: QuotaAssignment,
                candidates: tuple[int, ...], outcome: Outcome, *, by_quota: bool) -> None:
        """Record ``outcome``; the first AppWrapper that could run may become the head.
        An elastic one refused for quota or room first tries to start smaller."""
        if entry.elastic_min is not None and outcome[0] in _ROOM_REASONS and \
                self.start_small(entry, demand, assignment, candidates):
            return
        self.pend(entry, outcome[0], outcome[1])
        self.line.consider(entry, demand, assignment, candidates, outcome, by_quota=by_quota,
                           quota=self.quota)
