"""The head of the line: when the small ones stop overtaking the big one.

The rules are stated in ``mcad.core.cycle.backfill`` (backfill with a starvation guard, or
reservation-based). This module, one of the cycle's parts, is their state for one cycle:
who the head is, and what is reserved for it (its quota charged in ``held_quota``; its
nodes held when it fits now, or one cluster closed to everyone behind it when it fits
nowhere yet; by reservation, nodes at a future moment: ``promise``, and the hold
besides once it starves and that moment came without it starting), and the
questions the cycle asks: may this AppWrapper still use a cluster, may it start on the
nodes it found, and would it have fitted but for the reservation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from mcad.core.cycle.backfill import BackfillPolicy, BackfillRule
from mcad.core.cycle.promises import Promise, promise
from mcad.core.cycle.snapshot import AppWrapperEntry, BackfillPromise, Blocked, PendingReason
from mcad.core.placement.clusters import ClusterBoard, PlacementPolicy
from mcad.core.placement.nodefit import Placement, resource_weight_order
from mcad.core.quota.forest import QuotaAssignment, QuotaForest
from mcad.core.workload.demand import Demand


class HeadOfLine:
    def __init__(self, *, board: ClusterBoard, backfill: BackfillPolicy, now: datetime,
                 placement: PlacementPolicy, rule: BackfillRule = BackfillRule.MCAD,
                 running: Callable[[], Iterable[AppWrapperEntry]] = tuple) -> None:
        self.board = board
        self.backfill = backfill
        self.now = now
        self.placement = placement
        self.rule = rule
        self.running = running
        """The admitted AppWrappers (whose ends free room for a reservation)."""
        self.seen = False
        """True once the head of line is known (whether or not it holds a reservation)."""
        self.first: AppWrapperEntry | None = None
        """The head of line this cycle, once known (holding a reservation or not)."""
        self.head: AppWrapperEntry | None = None
        self.held_quota: QuotaForest | None = None
        self.held_nodes: Placement | None = None
        self.closed_cluster: int | None = None
        self.promise: Promise | None = None
        """Reservation backfill: the room and moment reserved for the head."""

    def reset(self) -> None:
        """Forget the head and what is held for it: the queue is decided again from its
        start (``CycleBooks.renew_room``; the caller gives back the held nodes)."""
        self.seen = False
        self.first = self.head = None
        self.held_quota = None
        self.held_nodes = None
        self.closed_cluster = None
        self.promise = None

    def open(self, candidates: tuple[int, ...]) -> tuple[int, ...]:
        """The candidates, less the cluster closed to everyone behind the head."""
        closed = self.closed_cluster
        if closed is None or closed not in candidates:
            return candidates
        return tuple(i for i in candidates if i != closed)

    def behind(self, by_quota: bool) -> Blocked:
        """Why an AppWrapper that fits but for the head's reservation waits."""
        head = self.head
        assert head is not None
        # The moment, not the seconds waited: a sentence that changes every second
        # would be written to every AppWrapper behind the head, again and again.
        since = (head.queued_since or head.created).isoformat()
        what = "quota" if by_quota else "room"
        return Blocked(PendingReason.WAITING_FOR_HEAD_OF_LINE,
                       f"it would fit, but the {what} is held for {head.key}, first in line "
                       f"and waiting since {since}")

    def consider(self, entry: AppWrapperEntry, demand: Demand, assignment: QuotaAssignment,
                 candidates: tuple[int, ...], blocked: Blocked, *, by_quota: bool,
                 quota: QuotaForest) -> None:
        """``entry`` was ``blocked``: the first that could run is the head, and once it
        has starved its quota and room are reserved."""
        if self.seen or not blocked.could_run or blocked.reason not in (
                PendingReason.QUOTA_EXCEEDED, PendingReason.INSUFFICIENT_CAPACITY):
            return
        if by_quota and not self.board.fits_when_empty(demand, candidates):
            return
        self.seen = True
        self.first = entry
        if self.rule is BackfillRule.RESERVATION and not by_quota:
            self.promise = promise(self.board, entry, demand, candidates, self.running(),
                                   now=self.now)
            if self.promise is not None:
                self.head = entry
                if self.promise.reservation.start > self.now:
                    return  # ahead: what starts before it is held to its promise
        # Starving, the head is held for as under MCAD's rule, its reservation come due
        # or not (work that started before it overran): its wait stays bounded by the
        # threshold, or its reservation, plus the drain of what runs.
        if not self.backfill.is_starving(now=self.now,
                                         waiting_since=entry.queued_since or entry.created):
            return
        self.head = entry
        held = quota.copy()
        held.charge(assignment, demand.total)
        self.held_quota = held
        if by_quota:
            placement = self.board.place(demand, candidates, policy=self.placement,
                                         avoid=entry.avoid_cluster)
            if isinstance(placement, Placement):
                self.held_nodes = placement
                return
        self.closed_cluster = self._cluster_to_drain(demand, candidates)

    def admits(self, entry: AppWrapperEntry, placement: Placement
               ) -> Blocked | BackfillPromise | None:
        """Whether ``entry``, placed now, may start: None, freely; a ``BackfillPromise``,
        on the promise to end by the head's reservation; else why it waits for that
        reservation (reservation backfill only)."""
        held = self.promise
        if held is None:
            return None
        verdict = held.admits(entry, placement, now=self.now)
        if not isinstance(verdict, str):
            return verdict
        return Blocked(PendingReason.WAITING_FOR_HEAD_OF_LINE, verdict)

    def would_fit_unreserved(self, demand: Demand, candidates: tuple[int, ...]) -> bool:
        """True when ``demand`` fits but for the head's held nodes or closed cluster."""
        board, policy = self.board, self.placement
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

    def _cluster_to_drain(self, demand: Demand, candidates: tuple[int, ...]) -> int | None:
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
