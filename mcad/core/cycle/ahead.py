"""The few queued AppWrappers that outrank all the others, decided ahead of the queue.

Why: a priority job that arrives behind a backlog of 10,000 is the first a full cycle
decides, yet it waited for one: ~400 ms of a cycle over everyone (and, while the core
decided in its thread, the rest of the one under way). The scale benchmark's probe took
1.0 s median from its creation to its dispatch being seen on the hub. Deciding it alone
takes a few milliseconds: the books are the running work's, and nobody is decided
before it.

When it is exact, stated once. A full cycle (``mcad.core.cycle.decide.run_cycle``)
decides the queued AppWrappers in ``FairOrder``; those that cannot be charged (no
demand, an unknown quota node) come first, and hold nothing. When no priority grows with
time (``priority_slope``), the queued of the highest priority, the *ahead*, are decided
before every other:
- in plain priority order: without quota trees, or with fair sharing off;
- with quota trees and fair sharing, when the ahead is one AppWrapper that fits within
  its own quota node as the cycle starts (the running work charged): heads that fit so
  go first, the highest priority first. Two or more could not be told: the first one's
  charge may push the second past its quota, and then another team's head goes before
  it. One that would borrow goes after every head that fits: not told either.
What the cycle holds when it reaches the ahead is the running work's (phase 1), and
nothing of the others': a backfill promise to a head outside them is noted, but only
that head reads the note. So the cycle cut to the running work and the ahead decides
them as the full cycle does, each in turn, and those it dispatches (``decide_ahead``)
are the full cycle's dispatches. What it does after them (growth into room left, phase
4) is not theirs, and is not taken; nor is anything when it evicts (a preemption, or a
suspended AppWrapper taken back): the full cycle decides that, as it always did.

``tests/core/test_ahead.py`` holds it to the full cycle over random histories.
"""

from __future__ import annotations

from dataclasses import replace

from mcad.core.cycle.books import CycleBooks
from mcad.core.cycle.decide import Outcome, dispatch_cycle, run_cycle
from mcad.core.cycle.snapshot import Admitted, AppWrapperEntry, CycleResult, Snapshot
from mcad.core.quota.forest import QuotaAssignment, QuotaProblem

AHEAD_MOST = 8
"""At most this many are decided ahead in plain order: a crowd of equals at the top is
the queue itself, and the full cycle decides it."""


def ahead_of_queue(snapshot: Snapshot, most: int = AHEAD_MOST) -> Snapshot | None:
    """``snapshot`` cut to its running work and the queued AppWrappers a full cycle
    decides before all the others, when the order is plain; with quota trees and fair
    sharing, the one AppWrapper that may be (``decide_ahead`` checks its quota). One
    alone without quota trees is cut from the running work too. None when that cannot
    be told without the full order (a priority that grows with time; with quota trees
    and fair sharing, two or more), when the running work is kept and no other waits
    behind them (the full cycle is then as short), or when they are more than
    ``most``."""
    if not plain(snapshot):
        most = 1
    admitted: list[AppWrapperEntry] = []
    top: list[AppWrapperEntry] = []
    best: int | None = None
    behind = False
    for entry in snapshot.appwrappers:
        if isinstance(entry.phase, Admitted):
            admitted.append(entry)
            continue
        if entry.priority_slope:
            return None
        priority = entry.priority
        if best is None or priority > best:
            behind = behind or best is not None
            best, top = priority, [entry]
        elif priority == best:
            top.append(entry)
        else:
            behind = True
    if not top or len(top) > most:
        return None
    if len(top) == 1 and not snapshot.quota.trees():
        # Alone, without quota: the running work holds nothing its dispatch reads (its
        # pods' room is in the clusters); it is read only to preempt, or to promise it
        # a start, which the cut leaves to the full cycle. Read, 10,000 running would
        # make the cut as long as the full cycle.
        return replace(snapshot, appwrappers=(top[0],))
    if not behind:
        return None
    return replace(snapshot, appwrappers=(*admitted, *top))


def decide_ahead(snapshot: Snapshot, most: int = AHEAD_MOST) -> CycleResult | None:
    """The dispatches a full cycle of ``snapshot`` makes first, of the AppWrappers that
    outrank the queue (``ahead_of_queue``); None when there is none to take: they cannot
    be told apart, none is dispatched, or the cut cycle evicts (which the full cycle
    decides). Nothing but dispatches is in the result."""
    cut = ahead_of_queue(snapshot, most)
    if cut is None:
        return None
    if plain(snapshot):
        result = dispatch_cycle(cut)
    else:
        (first,) = (e for e in cut.appwrappers if not isinstance(e.phase, Admitted))
        within = _WithinQuota(first)
        result = run_cycle(cut, trace=within)[1]
        if not within.first:
            return None
    if result.evictions or not result.dispatches:
        return None
    return CycleResult(dispatches=result.dispatches, pending=(), evictions=())


def plain(snapshot: Snapshot) -> bool:
    """Whether the cycle's order is plain priority order (``FairOrder.plain``, for any
    queue)."""
    return not snapshot.policy.fair_sharing or not snapshot.quota.trees()


class _WithinQuota:
    """Tells whether ``entry`` goes first in a fair order: as the cycle starts, it fits
    within its own quota node, or it cannot be charged at all (so it holds nothing)."""

    def __init__(self, entry: AppWrapperEntry) -> None:
        self.entry = entry
        self.first = False

    def started(self, books: CycleBooks) -> None:
        demand = self.entry.demand
        assignment = books.assignment(self.entry.quota_labels)
        self.first = demand is None or isinstance(assignment, QuotaProblem) or \
            books.quota.within_own_quota(assignment, demand.total)

    def decided(self, entry: AppWrapperEntry, assignment: QuotaAssignment | None,
                outcome: Outcome) -> None:
        pass
