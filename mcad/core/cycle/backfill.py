"""When the small ones may overtake the big one.

Queue order (who is considered first) is ``mcad.core.quota.fairness``: within a quota node,
higher priority first, then longer in the queue, then ``uid`` (a total order, so the
same AppWrappers always queue the same way); between nodes, within-quota first, then
the smallest share.

Backfill with a starvation guard, the exact rule the dispatch cycle applies:

1. AppWrappers are considered one by one in queue order.
2. The *head of line* is the first one, in that order, that is blocked this cycle
   by quota (QuotaExceeded) or by capacity (InsufficientCapacity) although it could
   run: it fits its quota trees with nothing charged and fits some cluster it may go
   to with no pod running there. AppWrappers that are pausing after a requeue, have an
   invalid demand, name an unknown quota node, match no cluster, or could never fit,
   are not the head of line: they do not hold anybody back; nor is one for which
   evictions were just issued (it already holds what it waits for).
3. While the head of line has waited less than ``starvation_seconds`` (counted from
   when it entered the queue: its creation, or its last requeue), anything behind it
   that fits may go: that is backfill.
4. Once it has waited that long, the cycle reserves for it, and only AppWrappers that
   fit in what remains after the reservation may go behind it:
   - quota: its demand is charged to its quota nodes (even where that overflows
     them), so nothing that shares an exhausted node with it can take quota it waits for;
   - capacity: when its pods fit somewhere now (it waits for quota only), those
     nodes' room is held for it; when they fit nowhere, the one eligible cluster with
     the most free room of its scarcest resource is closed to everything behind it,
     so that cluster only drains until the head fits.
   AppWrappers that would have gone but for the reservation are pending with reason
   ``WaitingForHeadOfLine``.
5. Only one head of line holds a reservation per cycle; the next one in line gets its
   turn once the head is dispatched.

Why this rule: pure backfill starves large gangs (small jobs keep taking the room as it
frees up); strict FIFO idles the cluster. Holding back only after a wait bounds the
head's delay by the threshold plus the time running work needs to drain.

Reservation-based (EASY) backfill, Slurm's answer, is the other rule (policy
``backfill: reservation``; ``mcad.core.cycle.promises`` works it out in the cycle): the head
of the line, when it waits for room, gets a reservation at the first moment running work
is expected to have freed enough of one cluster for it, on the nodes it would take then;
an AppWrapper behind it that fits now may start now when it leaves the reserved room
whole (even if it ran for ever), or else on the promise to end before that reservation
(``may_backfill``). So the head is never delayed by backfill when run times are exact,
and the gaps before its start are still used. Run times are what users declare or what
a family's past runs suggest, so a promise is held as Slurm holds a time limit: a job
that took reserved room on a promise and still runs when the reservation comes due,
while that head still waits and cannot start without it, is evicted for it (reason
``Preempted``; see ``mcad.core.cycle.promises.broken_promises``), so a misstated run time
cannot delay the head past its reservation by more than the eviction takes. A promise
dies with its head's wait: once the head started or is gone, nothing is evicted for
it. And
``starvation_seconds`` bounds the head's wait under this rule too: work that started
before the head (on no promise) may overrun its expected end, and the reservation then
comes due without the head starting; once the head has waited the threshold and its
reservation is due, the first rule's hold (its quota, its nodes or a closed cluster)
applies besides. While the reservation is still ahead the head needs no hold: nothing
that starts before it can keep it from its room then (EASY's guarantee, promises kept),
and holding would only idle the gaps. A head that waits for quota, or whose cluster's
running work has no expected end, is held by the first rule alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from mcad.core.workload.resources import ResourceList

DEFAULT_STARVATION_SECONDS = 300.0


class BackfillRule(StrEnum):
    """Which rule keeps the head of the line from starving (the module docstring)."""

    MCAD = "mcad"
    """Backfill freely until the head has waited ``starvation_seconds``, then hold."""
    RESERVATION = "reservation"
    """Reserve for the head at its expected start; backfill only what cannot delay it."""


@dataclass(frozen=True, slots=True)
class BackfillPolicy:
    """When the head of line stops letting others overtake it."""

    starvation_seconds: float = DEFAULT_STARVATION_SECONDS

    def is_starving(self, *, now: datetime, waiting_since: datetime) -> bool:
        """True once an AppWrapper blocked at the head has waited the threshold."""
        return (now - waiting_since).total_seconds() >= self.starvation_seconds


@dataclass(frozen=True, slots=True)
class HeadReservation:
    """What the head of the line is promised: ``needs`` at ``start``.

    ``needs`` and ``free_at_start`` are per place: nodes (by name) for room, or quota
    nodes for quota; the rule is the same for both. ``free_at_start`` is what the plan
    says is free at ``start`` without any backfilled AppWrapper (the head's share
    included)."""

    head: str
    start: datetime
    needs: Mapping[str, ResourceList]
    free_at_start: Mapping[str, ResourceList]


@dataclass(frozen=True, slots=True)
class BackfillVerdict:
    """Whether an AppWrapper behind the head may start now, and the sentence why.

    ``promised``: it may start only on the promise to end by the reservation (it takes
    reserved room); it is held to that."""

    allowed: bool
    message: str
    promised: bool = False


def may_backfill(reservation: HeadReservation, *, takes: Mapping[str, ResourceList],
                 expected_end: datetime | None) -> BackfillVerdict:
    """EASY backfill for a candidate that fits now: ``takes`` is what it would hold per
    place (``Placement.node_requests()``), ``expected_end`` when it should end (None:
    not known). One that leaves the reserved room whole may start even if it runs for
    ever, on no promise; else one expected to end by the reservation starts on the
    promise to (``promised``); else it waits."""
    when = reservation.start.isoformat()
    empty = ResourceList()
    for place, used in sorted(takes.items()):
        needed = reservation.needs.get(place, empty)
        if not used or not needed:
            continue
        if not (used + needed).fits_in(reservation.free_at_start.get(place, empty)):
            if expected_end is not None and expected_end <= reservation.start:
                return BackfillVerdict(
                    True, f"it is expected to end by {expected_end.isoformat()}, before "
                          f"the reservation for {reservation.head} at {when}", promised=True)
            ends = ("no expected end" if expected_end is None
                    else f"it is expected to end at {expected_end.isoformat()}")
            return BackfillVerdict(False, f"it would take room on {place} reserved for "
                                          f"{reservation.head} from {when}, and {ends}")
    return BackfillVerdict(True, f"it leaves the room reserved for {reservation.head} "
                                 f"from {when} untouched")
