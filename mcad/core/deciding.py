"""The state of one dispatch cycle, and the steps every kind of decision shares.

``CycleState`` is what ``mcad.core.cycle`` decides on: the charged quota forest, the
capacity board, the head of the line, the results so far and the per-cycle caches.
The decisions themselves are layered on it, one idea per module:
``mcad.core.elastic.ElasticSteps`` (start small, grow, shrink) under
``mcad.core.preempting.PreemptionSteps`` (evict for quota or capacity, hold the room)
under the cycle's own ``_Decider`` (walk the queue: quota, placement, head of line).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mcad.core.capacity import AppWrapperKey
from mcad.core.demand import Demand
from mcad.core.fairness import FairOrder
from mcad.core.headofline import HeadOfLine, Outcome
from mcad.core.placement import ClusterBoard, fit_gang
from mcad.core.preemption import Holder
from mcad.core.queue import BackfillPolicy
from mcad.core.quota import QuotaAssignment, QuotaCharge, QuotaForest, QuotaProblem
from mcad.core.resources import ResourceList
from mcad.core.snapshot import (
    Admitted,
    AppWrapperEntry,
    Dispatch,
    Eviction,
    Pending,
    PendingReason,
    Resize,
    Snapshot,
)


class CycleState:
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

    def charge(self, assignment: QuotaAssignment, amount: ResourceList) -> None:
        """Charge every working view of the quota forest."""
        self.quota.charge(assignment, amount)
        if self.line.held_quota is not None:
            self.line.held_quota.charge(assignment, amount)
        if self.after_evictions is not None:
            self.after_evictions.charge(assignment, amount)
        if self.order is not None:
            self.order.charged(assignment)

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
