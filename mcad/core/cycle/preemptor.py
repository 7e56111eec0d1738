"""Preemption, one part of the dispatch cycle: a plan to make room, or why not.

Whom to evict is stated in ``mcad.core.placement.victims`` (and, across quota trees, in
``mcad.core.quota.forest``); this part reads the cycle's books and answers with a
``PreemptionPlan`` (victims, shrinks, the room and quota held for the preemptor, its
waiting sentence) or ``Refused``; the cycle applies the plan. The rules of one cycle:

- each quota assignment gets one preemption turn (Kueue likewise considers one head per
  queue), and one AppWrapper may evict for capacity: later ones decide on fresh facts
  next cycle, and one cycle's eviction work stays bounded;
- victims already chosen are not chosen again, and their quota counts as returned when
  later preemptors of other assignments look for victims (``CycleBooks.eviction_view``);
- a preemptor holds what it waits for: its quota is charged, and its nodes are held with
  its victims' pods counted as gone, so nothing behind it takes its room while they
  drain; in later cycles, while its victims drain, it waits (``while_victims_drain``)
  instead of evicting more;
- elastic victims are shrunk rather than evicted where that is enough
  (``mcad.core.cycle.elastic``).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

from mcad.core.cycle import elastic
from mcad.core.cycle.books import BooksView
from mcad.core.cycle.plans import HoldRoom, PreemptionPlan, Refused
from mcad.core.cycle.snapshot import AppWrapperEntry
from mcad.core.placement.capacity import AppWrapperKey
from mcad.core.placement.domainfit import domain_victims
from mcad.core.placement.nodefit import Placement
from mcad.core.placement.victims import Holder, capacity_victims, gpus
from mcad.core.quota.forest import QuotaAssignment
from mcad.core.workload.demand import Demand
from mcad.core.workload.resources import ResourceList


def for_quota(books: BooksView, entry: AppWrapperEntry, demand: Demand,
              assignment: QuotaAssignment, candidates: tuple[int, ...]
              ) -> PreemptionPlan | Refused:
    """Evict (or shrink) for ``entry``'s quota: reclaim from borrowers, or with priority
    preemption lower-priority AppWrappers under the node that blocks it, then within
    its own node."""
    policy = books.policy.preemption
    if not policy.any:
        return Refused()
    view = books.eviction_view()
    total = demand.total
    charges = books.eviction_candidates()
    victims: list[str] | None = view.reclaims_for(assignment, total, charges) \
        if policy.reclaim else None
    reclaiming = bool(victims)
    # Reclaim applies to one within its own quota (now, or once the borrowers are gone);
    # then, or with priority preemption, the attempt takes the assignment's turn.
    if not reclaiming and not policy.priority and not (
            policy.reclaim and view.within_own_quota(assignment, total)):
        return Refused()
    if not victims and policy.priority:
        lower = charges[:bisect.bisect_left(books.candidate_priorities, entry.priority)]
        if lower:
            victims = view.evictions_for(assignment, total, lower, priority=entry.priority)
            if not victims:  # within its own node: lower priority, borrowing or not
                same_node = [c for c in lower if c.assignment == assignment]
                victims = view.evictions_for(assignment, total, same_node,
                                             priority=entry.priority,
                                             borrowers_only=False) if same_node else None
    if not victims:
        return Refused("no lower-priority AppWrapper can be evicted to make room"
                       if policy.priority else
                       "no borrower of its quota can be evicted to make room", took_turn=True)
    why = (f"to return borrowed quota to {entry.key}" if reclaiming else
           f"to make room for {entry.key} (priority {entry.priority})")
    keys = [AppWrapperKey(v) for v in victims]
    shrink = elastic.shrink_instead(books, assignment, total, keys, view, why=why)
    if shrink is not None:
        keys = list(shrink.evict)
    freed = {} if shrink is None else {o.key: o.gives_back for o in shrink.orders}
    placement = books.board.place(demand, books.line.open(candidates),
                                  policy=books.policy.placement, avoid=entry.avoid_cluster)
    if isinstance(placement, Placement):
        books.board.unplace(placement)  # the plan holds these nodes
    elif not fits_after_eviction(books, demand, candidates, keys, freed):
        return Refused("evicting them would not make room for its pods", took_turn=True)
    held = placement if isinstance(placement, Placement) else None
    orders = () if shrink is None else shrink.orders
    if not keys:
        what = ", ".join(f"{o.key} to {o.pods} pods" for o in orders)
        return PreemptionPlan(entry.key, waiting=f"waiting for elastic AppWrappers to "
                                                 f"shrink: {what}",
                              shrink=orders, placement=held)
    kind = "borrowing its quota" if reclaiming else "lower-priority"
    return PreemptionPlan(
        entry.key, waiting=(f"waiting for {len(keys)} AppWrapper{'s' if len(keys) > 1 else ''}"
                            f" ({kind}) to be evicted: {', '.join(keys)}"),
        evict=tuple(keys), eviction_message=f"evicted {why}", shrink=orders, placement=held)


def for_capacity(books: BooksView, entry: AppWrapperEntry, demand: Demand,
                 candidates: tuple[int, ...]) -> PreemptionPlan | Refused:
    """With priority preemption: shrink, or else evict, lower-priority AppWrappers on one
    cluster so that ``entry``'s gang fits there node by node (once per cycle)."""
    if not books.policy.preemption.priority or books.capacity_turn is not None:
        return Refused()
    lower = [w.entry for w in books.running
             if w.entry.priority < entry.priority and not w.entry.draining
             and w.entry.demand is not None and w.entry.key not in books.evicted]
    if not lower:
        return Refused()
    shrinking = elastic.shrink_for_capacity(books, entry, demand, lower, candidates)
    if shrinking is not None:
        return shrinking
    best: tuple[tuple[int, int, int, str], int, list[Holder]] | None = None
    for i in books.line.open(candidates):
        victims_for = capacity_victims if demand.topology is None else domain_victims
        found = victims_for(demand, books.board.pools[i], books.holders_on(i, lower))
        if found is None:
            continue
        rank = (gpus(found), len(found), max(v.priority for v in found),
                books.board.clusters[i].name)
        if best is None or rank < best[0]:
            best = (rank, i, found)
    if best is None:
        return Refused(took_turn=True)
    _, index, found = best
    name = books.board.clusters[index].name
    keys = tuple(v.key for v in found)
    return PreemptionPlan(
        entry.key, waiting=(f"waiting for {len(keys)} lower-priority AppWrapper"
                            f"{'s' if len(keys) > 1 else ''} on cluster {name} to be "
                            f"evicted: {', '.join(keys)}"),
        evict=keys, eviction_message=(f"evicted to make room for {entry.key} (priority "
                                      f"{entry.priority}) on cluster {name}"),
        hold=(HoldRoom(index, tuple(found)),))


def while_victims_drain(books: BooksView, entry: AppWrapperEntry, demand: Demand,
                        assignment: QuotaAssignment, candidates: tuple[int, ...]
                        ) -> PreemptionPlan | None:
    """``entry``'s victims (from an earlier cycle) are still going: hold its quota and
    room and wait; None when it can go already (decide it as anyone else)."""
    victims = books.draining_for[entry.key]
    if fits_now(books, entry, demand, assignment, candidates):
        return None
    rooms = []
    for i in candidates:
        leaving = books.holders_on(i, victims)
        if leaving:
            rooms.append(HoldRoom(i, tuple(leaving)))
    return PreemptionPlan(
        entry.key, waiting=(f"waiting for {len(victims)} evicted AppWrapper"
                            f"{'s' if len(victims) > 1 else ''} to go: "
                            f"{', '.join(sorted(v.key for v in victims))}"),
        hold=tuple(rooms))


def fits_now(books: BooksView, entry: AppWrapperEntry, demand: Demand,
             assignment: QuotaAssignment, candidates: tuple[int, ...]) -> bool:
    """True when ``entry`` fits its quota and some cluster open to it as things are."""
    if books.quota.fits(assignment, demand.total) is not None:
        return False
    trial = books.board.place(demand, books.line.open(candidates),
                              policy=books.policy.placement, avoid=entry.avoid_cluster)
    if isinstance(trial, Placement):
        books.board.unplace(trial)
        return True
    return False


def fits_after_eviction(books: BooksView, demand: Demand, candidates: tuple[int, ...],
                        victims: Sequence[AppWrapperKey],
                        shrunk: Mapping[AppWrapperKey, ResourceList]) -> bool:
    """True when some cluster's total free room plus what the victims hold there (and
    what the ``shrunk`` elastic ones give back) holds ``demand``."""
    gone = [(books.where(victim), books.where(victim)[1]) for victim in victims]
    gone += [(books.where(key), amount) for key, amount in shrunk.items()]
    for i in books.line.open(candidates):
        name = books.board.clusters[i].name
        free = dict(books.board.pools[i].total)
        for (cluster, _), amount in gone:
            if cluster == name:
                for resource, value in amount.items():
                    free[resource] = free.get(resource, 0) + value
        if demand.total.fits_in(free):
            return True
    return False
