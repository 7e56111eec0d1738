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

Preemption within a cycle: each quota assignment gets one preemption turn (Kueue
likewise considers one head per queue), and one AppWrapper may evict for capacity:
later ones decide on fresh facts next cycle, and one cycle's eviction work stays
bounded. Victims already chosen are not chosen again, and their quota counts as
returned when later preemptors of other assignments look for victims. A preemptor
holds what it waits for: its quota is charged, and its nodes are held with its victims'
pods counted as gone, so nothing behind it takes its room while they drain; in later
cycles, while its victims drain, it waits (and holds) instead of evicting more.

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

import bisect
import functools
from collections.abc import Mapping, Sequence

from mcad.core.capacity import AppWrapperKey, NodeName
from mcad.core.demand import Demand
from mcad.core.elastic import shrink_plan, sized
from mcad.core.fairness import FairOrder
from mcad.core.headofline import HeadOfLine, Outcome
from mcad.core.placement import EVERY_CLUSTER, ClusterBoard, NoFit, Placement, fit_gang
from mcad.core.preemption import Holder, capacity_victims, gpus
from mcad.core.queue import BackfillPolicy
from mcad.core.quota import QuotaAssignment, QuotaCharge, QuotaForest, QuotaProblem
from mcad.core.resources import ResourceList
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
GROW, SHRINK = "Grow", "Shrink"
"""The reasons of ``Resize`` orders."""


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
        decider.decide(entry)

    # 5. Elastic AppWrappers grow into what is left (``mcad.core.elastic``).
    decider.grow()

    # 6. The decisions.
    return CycleResult(tuple(decider.dispatches), tuple(decider.pending),
                       tuple(decider.evictions), tuple(decider.resizes))


class _Decider:
    """The mutable state of one cycle: charged quota, charged nodes, caches, results."""

    def __init__(self, snapshot: Snapshot, quota: QuotaForest) -> None:
        self.now = snapshot.now
        self.policy = snapshot.policy
        self.preemption = snapshot.policy.preemption
        self.unused_quota = snapshot.quota
        self.quota = quota
        self.order: FairOrder[AppWrapperEntry] | None = None
        self.trees = tuple(quota.trees())
        # With one tree (the usual case) the label value alone keys the assignment.
        self.one_tree = self.trees[0] if len(self.trees) == 1 else None
        self.board = ClusterBoard(snapshot.clusters)
        self.everywhere = self.board.eligible()
        self.line = HeadOfLine(board=self.board, now=self.now, placement=self.policy.placement,
                               backfill=BackfillPolicy(snapshot.policy.starvation_seconds))
        self.dispatches: list[Dispatch] = []
        self.pending: list[Pending] = []
        self.evictions: list[Eviction] = []
        self.resizes: list[Resize] = []
        self.admitted: list[tuple[AppWrapperEntry, QuotaAssignment]] = []
        self.draining_for: dict[AppWrapperKey, list[AppWrapperEntry]] = {}
        # Quota eviction candidates, lowest priority first, built on the first preemption.
        self.charges: list[QuotaCharge] | None = None
        self.charge_priorities: list[int] = []
        self.admitted_on: dict[str, tuple[str, ResourceList]] = {}
        """Where each admitted AppWrapper runs and what it holds (with the candidates)."""
        self.evicted: set[str] = set()
        self._assignments: dict[object, QuotaAssignment | QuotaProblem] = {}
        self._quota_no: dict[tuple[object, ...], Outcome] = {}
        """Quota misfits: (assignment id, total's items) -> outcome."""
        self._capacity_no: dict[tuple[object, ...], Outcome] = {}
        # Quota as it will be once this cycle's evictions are done: evictions for a later
        # preemptor are computed on it, so two preemptors never count on one victim.
        # Everything else is decided on ``quota``, where victims still hold their share
        # until they are gone.
        self.after_evictions: QuotaForest | None = None
        # Who took each quota assignment's one preemption turn, and whether it evicted.
        self.preempt_turns: dict[QuotaAssignment, tuple[AppWrapperKey, bool]] = {}
        self.capacity_turn: AppWrapperKey | None = None
        self.shrinking: set[str] = set()
        """Elastic AppWrappers ordered to shrink this cycle (they do not grow)."""

    def assignment(self, labels: Mapping[str, str]) -> QuotaAssignment | QuotaProblem:
        """The quota assignment for ``labels``, one object per label set in a cycle."""
        one_tree = self.one_tree
        key: object = (labels.get(one_tree) if one_tree is not None
                       else tuple(map(labels.get, self.trees)))
        found = self._assignments.get(key)
        if found is None:
            found = self._assignments[key] = self.quota.resolve(labels)
        return found

    def hold_admitted(self, admitted: Sequence[AppWrapperEntry]) -> None:
        """Charge what admitted AppWrappers hold (summed per quota assignment)."""
        sums: dict[int, tuple[QuotaAssignment, dict[str, int]]] = {}
        for entry in admitted:
            if entry.draining_for is not None:
                self.draining_for.setdefault(entry.draining_for, []).append(entry)
            if entry.demand is None:
                continue
            assignment = self.assignment(entry.quota_labels)
            if isinstance(assignment, QuotaProblem):
                continue
            total = entry.demand.total
            summed = sums.setdefault(id(assignment), (assignment, {}))[1]
            for name, value in total.items():
                summed[name] = summed.get(name, 0) + value
            self.admitted.append((entry, assignment))
        for assignment, summed in sums.values():
            self.quota.charge(assignment, ResourceList(summed))

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

    # -- quota ---------------------------------------------------------------------------

    def charge(self, assignment: QuotaAssignment, amount: ResourceList) -> None:
        """Charge every working view of the quota forest."""
        self.quota.charge(assignment, amount)
        if self.line.held_quota is not None:
            self.line.held_quota.charge(assignment, amount)
        if self.after_evictions is not None:
            self.after_evictions.charge(assignment, amount)
        if self.order is not None:
            self.order.charged(assignment)

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

    def eviction_candidates(self) -> list[QuotaCharge]:
        """The admitted AppWrappers that may be evicted, lowest priority first."""
        if self.charges is None:
            self.charges = sorted(
                (QuotaCharge(entry.key, entry.priority, assignment, entry.demand.total)
                 for entry, assignment in self.admitted
                 if entry.demand is not None and not entry.draining),
                key=lambda c: (c.priority, c.key))
            self.charge_priorities = [c.priority for c in self.charges]
            self.admitted_on = {entry.key: (entry.phase.cluster, entry.demand.total)
                                for entry, _ in self.admitted
                                if entry.demand is not None and
                                isinstance(entry.phase, Admitted)}
        return self.charges

    def preempt_quota(self, entry: AppWrapperEntry, demand: Demand,
                      assignment: QuotaAssignment, candidates: tuple[int, ...]) -> str | None:
        """Evict for ``entry``'s quota; None when done, else why it was not ("" when no
        kind of preemption applies to it).

        Once per quota assignment and cycle (Kueue considers one head per queue): the
        first AppWrapper quota blocks there to which preemption applies takes the turn,
        the others decide on fresh facts in the next cycle. That also bounds the eviction
        work of one cycle.
        """
        view = self.after_evictions or self.quota
        total = demand.total
        reclaims = self.preemption.reclaim and view.within_own_quota(assignment, total)
        if not reclaims and not self.preemption.priority:
            return ""
        self.preempt_turns[assignment] = (entry.key, False)
        charges = self.eviction_candidates()
        victims: list[str] | None = None
        reclaiming = False
        if reclaims:
            victims = view.evictions_for(assignment, total, charges, priority=None)
            reclaiming = bool(victims)
        if not victims and self.preemption.priority:
            lower = charges[:bisect.bisect_left(self.charge_priorities, entry.priority)]
            if lower:
                victims = view.evictions_for(assignment, total, lower, priority=entry.priority)
                if not victims:  # within its own node: lower priority, borrowing or not
                    same_node = [c for c in lower if c.assignment == assignment]
                    victims = view.evictions_for(assignment, total, same_node,
                                                 priority=entry.priority,
                                                 borrowers_only=False) if same_node else None
        if not victims:
            return ("no lower-priority AppWrapper can be evicted to make room"
                    if self.preemption.priority else
                    "no borrower of its quota can be evicted to make room")
        shrink = self.shrink_instead(assignment, total, victims, view)
        freed = {} if shrink is None else shrink[1]
        if shrink is not None:
            victims = shrink[0]
        placement = self.board.place(demand, self.line.open(candidates),
                                     policy=self.policy.placement, avoid=entry.avoid_cluster)
        if isinstance(placement, NoFit) and not self.fits_after_eviction(
                demand, candidates, victims, {k: amount for k, (_, amount) in freed.items()}):
            return "evicting them would not make room for its pods"
        # A placement that fits now stays charged to the board: its nodes are held.
        self.preempt_turns[assignment] = (entry.key, True)
        why = (f"to return borrowed quota to {entry.key}" if reclaiming else
               f"to make room for {entry.key} (priority {entry.priority})")
        if shrink is not None:
            self.shrink(freed, view, why=why)
            if not victims:
                self.charge(assignment, total)
                what = ", ".join(f"{key} to {size} pods"
                                 for key, (size, _) in sorted(freed.items()))
                self.pend(entry, PendingReason.WAITING_FOR_PREEMPTION,
                          f"waiting for elastic AppWrappers to shrink: {what}")
                return None
        self.evict(victims, entry, view, why=f"evicted {why}")
        self.charge(assignment, total)
        what = "borrowing its quota" if reclaiming else "lower-priority"
        self.pend(entry, PendingReason.WAITING_FOR_PREEMPTION,
                  f"waiting for {len(victims)} AppWrapper{'s' if len(victims) > 1 else ''} "
                  f"({what}) to be evicted: {', '.join(victims)}")
        return None

    def evict(self, victims: Sequence[str], entry: AppWrapperEntry, view: QuotaForest,
              *, why: str) -> None:
        charges = self.eviction_candidates()
        gone = set(victims)
        if self.after_evictions is None:
            self.after_evictions = view.copy()
        for charge in charges:
            if charge.key in gone:
                self.after_evictions.release(charge.assignment, charge.amount)
        self.charges = [c for c in charges if c.key not in gone]
        self.charge_priorities = [c.priority for c in self.charges]
        self.evicted |= gone
        for victim in victims:
            self.evictions.append(Eviction(AppWrapperKey(victim), PREEMPTED, why, entry.key))

    def shrink_instead(self, assignment: QuotaAssignment, total: ResourceList,
                       victims: Sequence[str], view: QuotaForest
                       ) -> tuple[list[str], dict[str, tuple[int, ResourceList]]] | None:
        """Shrink the elastic ``victims`` (never below their minimum) rather than evict
        them, when that with the others' eviction gives ``assignment`` room for
        ``total``: (whom to evict still, {key: (new size, what it gives back)}), or
        None (evict them all)."""
        admitted = {e.key: (e, a) for e, a in self.admitted}
        elastic = [v for v in victims if (e := admitted[AppWrapperKey(v)][0]).elastic_min
                   is not None and e.demand is not None and e.demand.pods > e.elastic_min
                   and v not in self.shrinking]
        if not elastic:
            return None
        amounts = {c.key: c for c in self.eviction_candidates()}
        trial = view.copy()
        evicted = [v for v in victims if v not in elastic]
        for victim in evicted:
            trial.release(amounts[victim].assignment, amounts[victim].amount)
        sizes: dict[str, tuple[int, ResourceList]] = {}
        for victim in elastic:
            entry, charged = admitted[AppWrapperKey(victim)]
            assert entry.demand is not None and entry.elastic_min is not None
            per_pod = entry.demand.pod_sets[0].requests
            size = entry.demand.pods
            while size > entry.elastic_min:
                trial.release(charged, per_pod)
                size -= 1
                sizes[victim] = (size, per_pod.scale(entry.demand.pods - size))
                if trial.fits(assignment, total) is None:
                    return evicted, sizes
        return None

    def shrink(self, orders: Mapping[str, tuple[int, ResourceList]], view: QuotaForest, *,
               why: str) -> None:
        """Order elastic AppWrappers to shrink, and give back their quota for this cycle."""
        if self.after_evictions is None:
            self.after_evictions = view.copy()
        charges = self.eviction_candidates()
        for charge in charges:
            if charge.key in orders:
                self.after_evictions.release(charge.assignment, orders[charge.key][1])
        self.charges = [c for c in charges if c.key not in orders]
        self.charge_priorities = [c.priority for c in self.charges]
        for key, (size, _) in sorted(orders.items()):
            self.shrinking.add(key)
            self.resizes.append(Resize(AppWrapperKey(key), size, SHRINK,
                                       f"shrunk to {size} pods {why}"))

    def fits_after_eviction(self, demand: Demand, candidates: tuple[int, ...],
                            victims: Sequence[str],
                            shrunk: Mapping[str, ResourceList] | None = None) -> bool:
        """True when some cluster's total free room plus the victims' there (and what
        the ``shrunk`` elastic ones give back) holds it."""
        gone = [(victim, self.admitted_on[victim][1]) for victim in victims]
        gone += list((shrunk or {}).items())
        for i in self.line.open(candidates):
            name = self.board.clusters[i].name
            free = dict(self.board.pools[i].total)
            for victim, amount in gone:
                if self.admitted_on[victim][0] == name:
                    for resource, value in amount.items():
                        free[resource] = free.get(resource, 0) + value
            if demand.total.fits_in(free):
                return True
        return False

    # -- waiting for victims -------------------------------------------------------------

    def wait_for_victims(self, entry: AppWrapperEntry, demand: Demand,
                         assignment: QuotaAssignment, candidates: tuple[int, ...]) -> bool:
        """``entry``'s victims are still going: hold its quota and room, and wait.

        False when it can go already (its victims' share is free): it is then decided
        as anyone else.
        """
        victims = self.draining_for[entry.key]
        if self.quota.fits(assignment, demand.total) is None:
            trial = self.board.place(demand, self.line.open(candidates),
                                     policy=self.policy.placement, avoid=entry.avoid_cluster)
            if isinstance(trial, Placement):
                self.board.unplace(trial)
                return False
        self.charge(assignment, demand.total)
        for i in candidates:
            cluster = self.board.clusters[i]
            on_it = [Holder(v.key, v.priority, cluster.name, v.demand.total if v.demand
                            else ResourceList(), v.dispatched, cluster.held_by.get(v.key, ()))
                     for v in victims if isinstance(v.phase, Admitted) and
                     v.phase.cluster == cluster.name]
            if on_it and self.hold(demand, i, on_it):
                break
        self.pend(entry, PendingReason.WAITING_FOR_PREEMPTION,
                  f"waiting for {len(victims)} evicted AppWrapper"
                  f"{'s' if len(victims) > 1 else ''} to go: "
                  f"{', '.join(sorted(v.key for v in victims))}")
        return True

    def hold(self, demand: Demand, index: int, victims: Sequence[Holder]) -> bool:
        """Charge ``demand``'s gang to cluster ``index`` as if ``victims`` were gone, so
        nothing else takes the room it waits for (their pods still count until then)."""
        pool = self.board.pools[index]
        for victim in victims:
            for node, requests in victim.pods_on:
                pool.release(node, requests)
        takes = fit_gang(pool, demand, explain=False)
        for victim in victims:
            for node, requests in victim.pods_on:
                pool.release(node, requests, sign=-1)
        return not isinstance(takes, str)

    # -- capacity ------------------------------------------------------------------------

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

    def preempt_capacity(self, entry: AppWrapperEntry, demand: Demand,
                         assignment: QuotaAssignment, candidates: tuple[int, ...]) -> bool:
        """With priority preemption: evict lower-priority AppWrappers on one cluster so the
        gang fits there; True when done (``entry`` is then pending, waiting for them)."""
        if not self.preemption.priority or self.capacity_turn is not None:
            return False
        lower = [e for e, _ in self.admitted
                 if e.priority < entry.priority and not e.draining and e.demand is not None
                 and e.key not in self.evicted]
        if not lower:
            return False
        self.capacity_turn = entry.key
        if self.shrink_for(entry, demand, lower, candidates):
            return True
        best: tuple[tuple[int, int, int, str], int, list[Holder]] | None = None
        for i in self.line.open(candidates):
            cluster = self.board.clusters[i]
            holders = [Holder(e.key, e.priority, cluster.name, e.demand.total, e.dispatched,
                              cluster.held_by.get(e.key, ()))
                       for e in lower if isinstance(e.phase, Admitted) and
                       e.phase.cluster == cluster.name and e.demand is not None]
            victims = capacity_victims(demand, self.board.pools[i], holders)
            if victims is None:
                continue
            rank = (gpus(victims), len(victims), max(v.priority for v in victims), cluster.name)
            if best is None or rank < best[0]:
                best = (rank, i, victims)
        if best is None:
            return False
        _, index, victims = best
        keys = [v.key for v in victims]
        self.evict(keys, entry, self.after_evictions or self.quota,
                   why=f"evicted to make room for {entry.key} (priority {entry.priority}) on "
                       f"cluster {self.board.clusters[index].name}")
        self.charge(assignment, demand.total)
        self.hold(demand, index, victims)
        self.pend(entry, PendingReason.WAITING_FOR_PREEMPTION,
                  f"waiting for {len(keys)} lower-priority AppWrapper"
                  f"{'s' if len(keys) > 1 else ''} on cluster "
                  f"{self.board.clusters[index].name} to be evicted: {', '.join(keys)}")
        return True

    # -- elastic ---------------------------------------------------------------------------

    def start_small(self, entry: AppWrapperEntry, demand: Demand,
                    assignment: QuotaAssignment, candidates: tuple[int, ...]) -> bool:
        """Dispatch an elastic ``entry`` at the largest size down to its minimum that fits
        quota and one cluster now; True when done."""
        minimum = entry.elastic_min
        assert minimum is not None
        quota = self.line.held_quota or self.quota
        for pods in range(demand.pods - 1, minimum - 1, -1):
            trial = sized(demand, pods)
            if quota.fits(assignment, trial.total) is not None:
                continue
            placement = self.board.place(trial, self.line.open(candidates),
                                         policy=self.policy.placement,
                                         avoid=entry.avoid_cluster)
            if isinstance(placement, Placement):
                self.charge(assignment, trial.total)
                self.dispatches.append(Dispatch(entry.key, placement.cluster, placement, pods))
                return True
        return False

    def grow(self) -> None:
        """Admitted elastic AppWrappers below full size take what is left on their own
        cluster and in quota, highest priority first: after every queued AppWrapper was
        decided, so growth never takes room from one that fits, nor from the head of the
        line (its held quota and closed cluster are respected)."""
        growing = [(e, a) for e, a in self.admitted
                   if e.elastic_min is not None and e.full_pods is not None
                   and e.demand is not None and e.demand.pods < e.full_pods
                   and not e.draining and e.key not in self.evicted
                   and e.key not in self.shrinking]
        growing.sort(key=lambda ea: (-ea[0].priority, ea[0].dispatched or self.now, ea[0].key))
        quota = self.line.held_quota or self.quota
        for entry, assignment in growing:
            assert entry.demand is not None and entry.full_pods is not None
            assert isinstance(entry.phase, Admitted)
            index = self.board.index(entry.phase.cluster)
            if index is None or not self.line.open((index,)):
                continue
            for extra in range(entry.full_pods - entry.demand.pods, 0, -1):
                more = sized(entry.demand, extra)
                if quota.fits(assignment, more.total) is not None:
                    continue
                if isinstance(fit_gang(self.board.pools[index], more, explain=False), str):
                    continue
                self.charge(assignment, more.total)
                size = entry.demand.pods + extra
                self.resizes.append(Resize(entry.key, size, GROW,
                                           f"room for {extra} more pod"
                                           f"{'s' if extra > 1 else ''}: grows to {size} of "
                                           f"{entry.full_pods}"))
                break

    def shrink_for(self, entry: AppWrapperEntry, demand: Demand,
                   lower: Sequence[AppWrapperEntry], candidates: tuple[int, ...]) -> bool:
        """Make room for ``entry`` on one cluster by shrinking lower-priority elastic
        AppWrappers there (never below their minimum); True when that is enough (orders
        recorded, room held, ``entry`` pending), False to evict instead."""
        best: tuple[tuple[int, str], int, dict[str, tuple[int, list[tuple[NodeName,
                                                                     ResourceList]]]]] | None
        best = None
        for i in self.line.open(candidates):
            cluster = self.board.clusters[i]
            elastic = sorted(
                (e for e in lower if e.elastic_min is not None and e.demand is not None
                 and isinstance(e.phase, Admitted) and e.phase.cluster == cluster.name),
                key=lambda e: (e.priority, -(e.dispatched or self.now).timestamp(), e.key))
            if not elastic:
                continue
            plan = shrink_plan(demand, self.board.pools[i], [
                (Holder(e.key, e.priority, cluster.name, e.demand.total, e.dispatched,
                        cluster.held_by.get(e.key, ())),
                 e.demand.pods, e.elastic_min or 0, e.demand.pod_sets[0].requests)
                for e in elastic if e.demand is not None])
            if plan is None:
                continue
            gone = sum(len(pods) for _, pods in plan.values())
            if best is None or (gone, cluster.name) < best[0]:
                best = ((gone, cluster.name), i, plan)
        if best is None:
            return False
        _, index, plan = best
        name = self.board.clusters[index].name
        for key, (size, _) in sorted(plan.items()):
            self.shrinking.add(key)
            self.resizes.append(Resize(AppWrapperKey(key), size, SHRINK,
                                       f"shrunk to {size} pods to make room for {entry.key} "
                                       f"(priority {entry.priority}) on cluster {name}"))
        leaving = [Holder(AppWrapperKey(key), 0, name, ResourceList(), None, tuple(pods))
                   for key, (_, pods) in plan.items()]
        self.hold(demand, index, leaving)
        what = ", ".join(f"{key} to {size} pods" for key, (size, _) in sorted(plan.items()))
        self.pend(entry, PendingReason.WAITING_FOR_PREEMPTION,
                  f"waiting for elastic AppWrappers on cluster {name} to shrink: {what}"
                  if plan else f"waiting for elastic AppWrappers on cluster {name} to "
                               "finish shrinking")
        return True

    # -- head of line ----------------------------------------------------------------------

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
