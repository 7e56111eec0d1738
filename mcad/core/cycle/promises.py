"""The head of the line's reservation, for reservation-based (EASY) backfill.

One of the cycle's parts (the rule is stated in ``mcad.core.cycle.backfill``). When the head
of the line waits for room, ``promise`` works out when and where it will fit: the
running AppWrappers on each cluster it may use end at their expected ends, earliest
first (their bound pods' room given back to a copy of the cluster's pool), and the first
moment the whole gang fits is its reservation there: the nodes it would take, and what
those nodes have free at that moment. Running work with no known end never frees its
room in this search (it may run for ever); pods dispatched but not bound yet are not
released either. The earliest cluster wins (ties: the first by name).

Behind the head, ``Promise.admits`` answers for an AppWrapper that fits now: it starts
when ``may_backfill`` allows. One that leaves the reserved room whole starts on no
promise and is counted against the reserved nodes' free room (it may still run then),
so two backfills cannot together take what each alone would leave; one that takes
reserved room starts on a ``BackfillPromise`` to end by the reservation's start, which
its dispatch records (``status.backfillPromise``). ``broken_promises`` finds, at every
cycle, those still running when their promise comes due while their head waits: when
that head's turn comes in the cycle and it cannot start as things are, the cycle evicts
them for it, as preemption victims (a run time misstated, or learned from a family's
shorter runs, must not hold the head back: Slurm ends such a job at its time limit).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mcad.core.cycle.backfill import HeadReservation, may_backfill
from mcad.core.cycle.snapshot import Admitted, AppWrapperEntry, BackfillPromise
from mcad.core.placement.capacity import AppWrapperKey
from mcad.core.placement.clusters import ClusterBoard
from mcad.core.placement.gangfit import fit_gang
from mcad.core.placement.nodefit import Placement, placement_of
from mcad.core.workload.demand import Demand
from mcad.core.workload.resources import ResourceList


def place_key(cluster: str, node: str) -> str:
    return f"{cluster}/{node}"


@dataclass
class Promise:
    """What the head was promised, and what later backfills have taken of it."""

    cluster: str
    reservation: HeadReservation
    free: dict[str, ResourceList] = field(default_factory=dict)
    """Per reserved node: free at the reservation's start, less what backfills that
    will still run then take."""

    def admits(self, entry: AppWrapperEntry, placement: Placement, *,
               now: datetime) -> BackfillPromise | str | None:
        """Whether ``entry`` may start on ``placement`` now: None, on no promise; a
        ``BackfillPromise``, on the promise to end by the reservation; else a sentence
        that says why it waits."""
        if placement.cluster != self.cluster:
            return None
        takes = {place_key(placement.cluster, node): requests
                 for node, requests in placement.node_requests().items()}
        end = None if entry.expected_runtime is None else \
            now + timedelta(seconds=entry.expected_runtime)
        reservation = HeadReservation(self.reservation.head, self.reservation.start,
                                      self.reservation.needs, self.free)
        verdict = may_backfill(reservation, takes=takes, expected_end=end)
        if not verdict.allowed:
            return f"it fits now, but {verdict.message}"
        if verdict.promised:  # gone by the start, or evicted then: its room is the head's
            return BackfillPromise(AppWrapperKey(self.reservation.head),
                                   self.reservation.start)
        for place, used in takes.items():  # it may stay past the start: count it
            if place in self.free:
                self.free[place] = (self.free[place] - used).clamp_zero()
        return None


@dataclass(frozen=True, slots=True)
class BrokenPromise:
    """An admitted AppWrapper started on a ``BackfillPromise`` that came due while its
    head still waits: evicted for the head, with ``message``, unless the head can start
    without its room."""

    entry: AppWrapperEntry
    head: AppWrapperKey
    message: str


def broken_promises(admitted: Iterable[AppWrapperEntry], queued: Iterable[AppWrapperEntry],
                    *, now: datetime) -> list[BrokenPromise]:
    """The admitted AppWrappers whose backfill promise came due (``now`` at or past its
    end) while the head it was made to is still queued, in the same wait: not started
    and requeued since the promise (its last requeue, if any, is no later than the
    backfill's dispatch: both moments are the controller's). One already being taken
    back is left to go; one whose head started or is gone keeps running (the promise
    died with the head's wait)."""
    due = [e for e in admitted if e.backfill_promise is not None
           and now >= e.backfill_promise.end and not e.draining]
    if not due:
        return []  # (the usual case: no queue of 100,000 to index)
    waiting = {e.key: e for e in queued}
    broken = []
    for entry in due:
        held = entry.backfill_promise
        assert held is not None
        head = waiting.get(held.head)
        if head is None or (head.queued_since is not None and entry.dispatched is not None
                            and head.queued_since > entry.dispatched):
            continue
        broken.append(BrokenPromise(
            entry, held.head,
            f"started by reservation backfill on the promise to end by "
            f"{held.end.isoformat()}, before the reservation of {held.head}; still "
            f"running at {now.isoformat()}"))
    return broken


def promise(board: ClusterBoard, head: AppWrapperEntry, demand: Demand,
            candidates: Sequence[int], running: Iterable[AppWrapperEntry], *,
            now: datetime) -> Promise | None:
    """The head's reservation, or None when no cluster it may use is known to free
    enough room for it (see the module docstring)."""
    ends: dict[str, list[tuple[datetime, AppWrapperKey]]] = {}
    for entry in running:
        end = entry.end(entry.expected_runtime) if isinstance(entry.phase, Admitted) else None
        if end is not None and isinstance(entry.phase, Admitted):
            ends.setdefault(entry.phase.cluster, []).append((max(end, now), entry.key))
    best: Promise | None = None
    for index in candidates:
        capacity = board.clusters[index]
        pool = board.pools[index].copy()
        held = capacity.held_by
        for end, key in sorted(ends.get(capacity.name, ())):
            if best is not None and end >= best.reservation.start:
                break
            for node, requests in held.get(key, ()):
                pool.release(node, requests)
            trial = pool.copy()
            takes = fit_gang(trial, demand, explain=False)
            if isinstance(takes, str):
                continue
            placed = placement_of(capacity.name, trial, takes)
            needs = {place_key(capacity.name, node): requests
                     for node, requests in placed.node_requests().items()}
            free = {place_key(capacity.name, node): pool.room_on(node)
                    for node in placed.node_requests()}
            best = Promise(capacity.name,
                           HeadReservation(str(head.key), end, needs, dict(free)), free)
            break
    return best

