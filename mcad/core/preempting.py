"""Preemption in the dispatch cycle: evict for quota (reclaim, priority within a quota
node) or for capacity (priority on one cluster), and hold the room while victims drain.

Which victims is stated in ``mcad.core.preemption``; this module applies it within one
cycle. Each quota assignment gets one preemption turn per cycle (Kueue likewise
considers one head per queue), and one AppWrapper may evict for capacity: later ones
decide on fresh facts next cycle, and one cycle's eviction work stays bounded. Victims
already chosen are not chosen again, and their quota counts as returned when later
preemptors of other assignments look for victims. A preemptor holds what it waits
for: its quota is charged, and its nodes are held with its victims' pods counted as
gone, so nothing behind it takes its room while they drain; in later cycles, while its
victims drain, it waits (and holds) instead of evicting more. Elastic victims are
shrunk rather than evicted where that is enough (``mcad.core.elastic``).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

from mcad.core.capacity import AppWrapperKey
from mcad.core.demand import Demand
from mcad.core.elastic import ElasticSteps
from mcad.core.placement import NoFit, Placement
from mcad.core.preemption import Holder, capacity_victims, gpus
from mcad.core.quota import QuotaAssignment, QuotaForest
from mcad.core.resources import ResourceList
from mcad.core.snapshot import (
    PREEMPTED,
    Admitted,
    AppWrapperEntry,
    Eviction,
    PendingReason,
)


class PreemptionSteps(ElasticSteps):
    """The cycle's preemption steps (see the module's docstring)."""

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
        if not self.preemption.any:
            return ""
        charges = self.eviction_candidates()
        victims: list[str] | None = None
        if self.preemption.reclaim:
            victims = view.reclaims_for(assignment, total, charges)
        reclaiming = bool(victims)
        # Reclaim applies to an AppWrapper within its own quota (now, or once borrowers
        # are gone); then, or with priority preemption, it takes the assignment's turn.
        if not reclaiming and not self.preemption.priority and not (
                self.preemption.reclaim and view.within_own_quota(assignment, total)):
            return ""
        self.preempt_turns[assignment] = (entry.key, False)
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
