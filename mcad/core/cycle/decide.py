"""The dispatch cycle: one snapshot in, every decision out.

Kueue's shape: the controller gathers AppWrappers, quota and cluster capacity into a
``Snapshot`` (``mcad.core.cycle.snapshot``); ``dispatch_cycle`` decides and returns what to do
(dispatch here, keep pending for this reason, evict these, resize those); the controller
applies it. The same snapshot always gives the same result.

The parts, each a function or a small class with its own tests, each answering with a
typed value; only this module writes the cycle's books (``mcad.core.cycle.books``):

- queue order: ``mcad.core.quota.fairness.FairOrder``;
- quota: ``mcad.core.cycle.quotagate.check_quota``;
- placement: ``mcad.core.placement.clusters.ClusterBoard.place``;
- the head of the line and backfill: ``mcad.core.cycle.headofline.HeadOfLine`` (the rule in
  ``mcad.core.cycle.backfill``);
- preemption: ``mcad.core.cycle.preemptor`` (whom: ``mcad.core.placement.victims``), plans in
  ``mcad.core.cycle.plans``;
- elastic sizing: ``mcad.core.cycle.elastic`` (start small, grow, shrink).

Phases:

1. The running AppWrappers are charged to the books' quota (they hold quota); they are
   the eviction candidates; one suspended (``spec.suspend``) is taken back (an eviction,
   reason Suspended). Their pods already hold capacity, through the nodes'
   requests or the clusters' unbound pods (the board was built with the books: per-node
   free room, every cluster's unbound pods placed first). Those started by reservation
   backfill whose promise to a still-waiting head came due are noted
   (``mcad.core.cycle.promises.broken_promises``).
2. The queued AppWrappers are ordered: within quota first, then fair shares (plain
   priority order without quota trees).
3. Each queued AppWrapper, in that order, gets exactly one outcome, from the first check
   it fails: its hold (Suspended, QueueNotFound, PriorityClassNotFound), RequeuePause,
   InvalidDemand, QuotaNodeNotFound, NoMatchingCluster (no
   cluster it may use, or each one closes its namespace), WaitingForPreemption (its
   victims are still going; or, a head that cannot start now, the backfills that broke
   their promise to it are evicted, as preemption victims are), QuotaExceeded,
   InsufficientCapacity, WaitingForHeadOfLine; or it is dispatched, and its quota and
   nodes are charged at once, so no later decision counts on them. An elastic one
   refused at full size starts smaller when it can; one blocked by quota or room may
   preempt (the plan is applied, and it waits).
4. Admitted elastic AppWrappers grow into what is left.
5. The decisions.

Speed (10,000 queued AppWrappers in a few tens of milliseconds): free room only shrinks
during a cycle, so "this quota shape did not fit" and "this pod shape did not fit these
clusters" are cached for the rest of the cycle, and most of a long queue is answered
from those caches. Cluster totals reject a gang before any node is looked at.

Contract with the caller: ``Snapshot.quota`` has no usage of the snapshot's admitted
AppWrappers (the cycle charges them); clusters carry bound pods in node requests and
dispatched-but-unbound pods as ``unbound``, and (for preemption) each admitted
AppWrapper's bound pods in ``held_by``.
"""

from __future__ import annotations

from dataclasses import replace
from enum import Enum
from typing import Protocol

from mcad.core.cycle import elastic, preemptor
from mcad.core.cycle.books import CycleBooks
from mcad.core.cycle.plans import PreemptionPlan
from mcad.core.cycle.promises import broken_promises
from mcad.core.cycle.quotagate import QuotaAnswer, check_quota
from mcad.core.cycle.snapshot import (
    PREEMPTED,
    QUEUED,
    Admitted,
    Alike,
    AppWrapperEntry,
    BackfillPromise,
    Blocked,
    CyclePolicy,
    CycleResult,
    Dispatch,
    Eviction,
    Hold,
    Pending,
    PendingReason,
    Phase,
    Queued,
    Resize,
    Snapshot,
)
from mcad.core.placement.clusters import EVERY_CLUSTER
from mcad.core.placement.domainfit import candidates_knowing
from mcad.core.placement.lasting import NEVER_FITS_ROOM, never_fits
from mcad.core.placement.namespaces import open_candidates
from mcad.core.placement.nodefit import Placement, pod_of, retell
from mcad.core.quota.fairness import FairOrder
from mcad.core.quota.forest import QuotaAssignment, QuotaProblem
from mcad.core.workload.demand import Demand
from mcad.core.workload.resources import ResourceList

__all__ = ["PREEMPTED", "QUEUED", "Admitted", "AppWrapperEntry", "CyclePolicy",
           "CycleResult", "Dispatch", "Eviction", "Hold", "Pending", "PendingReason", "Phase",
           "Queued", "Resize", "Snapshot", "dispatch_cycle"]

_pending = tuple.__new__
_ROOM_REASONS = (PendingReason.QUOTA_EXCEEDED, PendingReason.INSUFFICIENT_CAPACITY)


def dispatch_cycle(snapshot: Snapshot) -> CycleResult:
    """Decide, for every queued AppWrapper of ``snapshot``, dispatch or why not."""
    return run_cycle(snapshot)[1]


def idle(snapshot: Snapshot) -> bool:
    """Whether a cycle of ``snapshot`` has nothing to decide, so its result is empty: no
    AppWrapper is queued, and of the running work none is suspended and not yet being
    taken back (phase 1's one eviction) and none is elastic (phase 4's growth). Every
    other decision is made for a queued AppWrapper (phase 3): its dispatch, its reason,
    the victims of its preemption, the backfills that broke their promise to it.

    Why: when a backlog has all been decided to dispatch (each AppWrapper fits), the
    controller's writes take minutes to follow, and every status echo asks for a cycle:
    over 10,000 running, each charged and its holding placed in the books for nothing,
    370 ms median in the 10,000 scale run, each one holding the interpreter against the
    loop that does the writes. ``tests/core/test_cycle_idle.py`` holds it to the cycle."""
    for entry in snapshot.appwrappers:
        if not isinstance(entry.phase, Admitted) or entry.elastic_min is not None:
            return False
        hold = entry.hold
        if hold is not None and hold.reason == PendingReason.SUSPENDED and not entry.draining:
            return False
    return True


class Trace(Protocol):
    """Told of the cycle's books once the running work is charged, then of every queued
    AppWrapper as the cycle decides it (``mcad.core.cycle.carried``)."""

    def started(self, books: CycleBooks) -> None: ...

    def decided(self, entry: AppWrapperEntry, assignment: QuotaAssignment | None,
                outcome: Outcome) -> None: ...


def run_cycle(snapshot: Snapshot, *, trace: Trace | None = None
              ) -> tuple[CycleBooks, CycleResult]:
    """The cycle's books and decisions; ``trace`` hears of each queued AppWrapper in the
    order decided, and the ``Outcome`` of deciding it."""
    books = CycleBooks(snapshot)
    # 1. Running AppWrappers hold quota; they are the eviction candidates.
    queued: list[AppWrapperEntry] = []
    admitted: list[AppWrapperEntry] = []
    for entry in snapshot.appwrappers:
        (admitted if isinstance(entry.phase, Admitted) else queued).append(entry)
    books.hold_running(admitted)
    for entry in admitted:
        if entry.hold is not None and entry.hold.reason == PendingReason.SUSPENDED and \
                not entry.draining:
            books.evict_suspended(entry.key, entry.hold.message)
    # Backfills still running when their promise to a waiting head came due: they go
    # when that head is decided, unless it can start without their room.
    books.note_broken(broken_promises(admitted, queued, now=snapshot.now))
    if trace is not None:
        trace.started(books)

    # 2. Queue order: within quota first, then fair shares (live, as quota is charged).
    order = FairOrder(queued, now=snapshot.now, forest=books.quota,
                      assignments_of=books.assignments_of, demands_of=books.totals_of,
                      fair=snapshot.policy.fair_sharing)
    books.order = order

    # 3. Decide, in order, charging quota and nodes as AppWrappers are dispatched.
    if trace is None:  # no one asks the outcome: decide's checks alone, alike ones once
        _settle_all(books, order)
    else:
        for entry in order:
            trace.decided(entry, order.assignment, decide(books, entry, order.assignment))

    # 4. Elastic AppWrappers grow into what is left.
    for work in elastic.growers(books):
        grow = elastic.growth(work, books)
        if grow is not None:
            assert work.entry.demand is not None
            books.grow(grow.key, work.assignment, grow.cluster,
                       elastic.sized(work.entry.demand, grow.extra), pods=grow.pods,
                       message=grow.message, pin=grow.pin)

    # 5. The decisions.
    return books, books.result()


class Outcome(Enum):
    """What deciding one queued AppWrapper did, as the carried cycle needs to know it."""

    WAITS_BLIND = "waits, read no room"
    """A reason to wait, found from the AppWrapper, its quota and the clusters' fixed
    facts alone (labels, kinds, readiness, nodes' allocatable, labels and taints),
    before placement, preemption or an elastic start: when only room changes
    (``mcad.core.cycle.carried``), it stands."""
    WAITS = "waits"
    """A reason to wait, found by reading room: decided again when room changes."""
    ACTS = "acts"
    """More than a reason to wait: dispatched (whole or small), evicted or shrank others
    or took a preemption turn, became the head of the line, or holds room while its
    victims go (``CycleBooks.acts``). Only such a decision changes the books but for the
    misfit caches."""


def decide(books: CycleBooks, entry: AppWrapperEntry,
           known: QuotaAssignment | None = None) -> Outcome:
    """Give ``entry`` its one outcome (``known``: its quota assignment, when the order
    has it), and say what deciding it did."""
    acts = books.acts
    blind = _settle(books, entry, known)
    if books.acts != acts:
        return Outcome.ACTS
    return Outcome.WAITS_BLIND if blind else Outcome.WAITS


def _settle_all(books: CycleBooks, order: FairOrder[AppWrapperEntry]) -> None:
    """``_settle`` for each entry in ``order``, but an entry alike (``Alike``) to one of
    its quota node that was given a plain quota wait (``CycleBooks.plain_wait``) is given
    the same, without the checks.

    Why it is the same decision: that wait read, besides what ``Alike`` holds, only the
    cycle's misfit caches (an entry, once made, stays as it is for the cycle), the
    board's fixed facts and whether the line has a head (which, once it has, it keeps).
    What is per AppWrapper and read before it is checked here for each (a promise
    broken for it, victims draining for it), or has no ``Alike`` (a hold, a requeue).
    At 100,000 queued, nearly all wait so, and this was most of the cycle's cost per
    entry. The order is read in runs (``FairOrder.runs``), cut where a decision changed
    quota usage, not resumed once per entry."""
    memos: dict[int, dict[Alike, Blocked]] = {}
    pend = books.pending.append
    broken, draining = books.broken_for, books.draining_for
    forest = order.forest
    for entries, start, stop in order.runs():  # (a run: one quota node, usage unchanged)
        assignment = order.assignment
        memo = memos.setdefault(id(assignment), {})  # (the books keep it: no id reuse)
        for position, entry in enumerate(entries[start:stop], start):
            alike = entry.alike  # (None when held or requeued: those are decided alone)
            if alike is not None:
                blocked = memo.get(alike)
                if blocked is not None and not (broken and entry.key in broken) and \
                        not (draining and entry.key in draining):
                    pend(_pending(Pending, (entry.key, blocked.reason, blocked.message)))
                    continue
            books.plain_wait = None
            version = forest.version
            _settle(books, entry, assignment)
            if books.plain_wait is not None and alike is not None and assignment is not None:
                memo[alike] = books.plain_wait
            if forest.version != version:  # usage changed: the order goes on anew
                order.cut = position + 1
                break


def _settle(books: CycleBooks, entry: AppWrapperEntry,
            known: QuotaAssignment | None) -> bool:
    """``decide``'s checks, in order, to the first that gives ``entry`` its outcome;
    whether they read no room (``Outcome.WAITS_BLIND``, when nothing else was done).
    The hot path of the cycle: most of a long queue ends at a cached misfit, so the
    checks avoid calls and allocations where they can."""
    if entry.hold is not None:
        books.pend(entry.key, entry.hold.reason, entry.hold.message)
        return False
    not_before = entry.not_before
    if not_before is not None and not_before > books.now:
        books.pend(entry.key, PendingReason.REQUEUE_PAUSE,
                   f"requeued; it may be dispatched again from {not_before.isoformat()}")
        return True
    demand = entry.demand
    if demand is None:
        books.pend(entry.key, PendingReason.INVALID_DEMAND,
                   entry.demand_error or "its resource demand could not be read")
        return True
    assignment: QuotaAssignment | QuotaProblem = known or books.assignment(entry.quota_labels)
    if isinstance(assignment, QuotaProblem):
        books.pend(entry.key, PendingReason(assignment.reason), assignment.message)
        return True
    selector = entry.cluster_selector
    if entry.clusters or (selector is not EVERY_CLUSTER and (
            selector.match_labels or selector.match_expressions)) or \
            (books.board.kinds_differ and entry.kinds):
        candidates = books.board.eligible(entry.clusters, selector, entry.kinds)
    else:
        candidates = books.everywhere
    closed = books.closed_namespaces
    if closed and entry.namespace in closed and not isinstance(candidates, str):
        # A cluster that closes its namespace (its admin's label, mcad's identity) is out.
        candidates = open_candidates(books.board, candidates, entry.namespace)
    if demand.topology is not None and not isinstance(candidates, str):
        # A level that no cluster it may use knows is refused with a sentence.
        candidates = candidates_knowing(books.board, candidates, demand.topology)
    if isinstance(candidates, str):
        books.pend(entry.key, PendingReason.NO_MATCHING_CLUSTER, candidates)
        return True
    blind = entry.elastic_min is None  # (an elastic one may start small: room decides)
    if books.broken_for and entry.key in books.broken_for:
        blind = False
        if not preemptor.fits_now(books, entry, demand, assignment, candidates):
            books.evict_broken(entry.key)  # and, just below, it holds their room meanwhile
    if books.draining_for and entry.key in books.draining_for:
        blind = False
        waiting = preemptor.while_victims_drain(books, entry, demand, assignment, candidates)
        if waiting is not None:
            books.apply(waiting, entry, demand, assignment)
            return False
    # The assignment object is this cycle's one per label set: its id is its identity.
    quota_key = (id(assignment), demand.total)  # a ResourceList hashes once, then cached
    cached = books.quota_misfits.get(quota_key)
    if cached is not None:
        lasting = _lasting(books, entry, demand, candidates) if cached.could_run else None
        if lasting is not None:
            _blocked(books, entry, demand, assignment, candidates, blocked=lasting,
                     by_quota=False, tried_small=True)
            return False
        if books.line.seen and entry.elastic_min is None:  # nothing else can come of it
            # (the tuple made directly: a NamedTuple's own constructor is a Python call)
            books.pending.append(_pending(Pending, (entry.key, cached.reason, cached.message)))
            books.plain_wait = cached
        else:
            _blocked(books, entry, demand, assignment, candidates, blocked=cached, by_quota=True)
        return blind
    refused = _quota(books, entry, demand, assignment, candidates, key=quota_key, blind=blind)
    if refused is not None:
        return refused
    placed = _place(books, entry, demand, assignment, candidates)
    if placed is not None:
        books.dispatch(entry, assignment, placed[0], promise=placed[1])
    return False


def _quota(books: CycleBooks, entry: AppWrapperEntry, demand: Demand,
           assignment: QuotaAssignment, candidates: tuple[int, ...], *,
           key: tuple[int, ResourceList], blind: bool) -> bool | None:
    """None when ``demand`` may be charged; else its outcome is given (cached by
    ``key`` unless it was its own preemption attempt), and the answer says whether
    deciding it read no room (``blind``: nothing before did)."""
    answer = check_quota(quota=books.quota, held=books.line.held_quota,
                         unused=books.unused_quota, assignment=assignment, total=demand.total)
    if answer is QuotaAnswer.FITS:
        return None
    if answer is QuotaAnswer.HELD_FOR_HEAD or not answer.never:
        lasting = _lasting(books, entry, demand, candidates)
        if lasting is not None:  # the cause that will not go by waiting leads; no preemption
            _blocked(books, entry, demand, assignment, candidates, blocked=lasting,
                     by_quota=False, tried_small=True)
            return False
    if answer is QuotaAnswer.HELD_FOR_HEAD:
        blocked = books.quota_misfits[key] = books.line.behind(True)
        _blocked(books, entry, demand, assignment, candidates, blocked=blocked, by_quota=True)
        return blind
    assert not isinstance(answer, QuotaAnswer)
    if entry.elastic_min is not None and _start_small(books, entry, demand, assignment,
                                                       candidates):
        return False  # started smaller: nobody evicted for it
    refusal, cache = "", True
    if books.policy.preemption.any and answer.reason == PendingReason.QUOTA_EXCEEDED:
        turn = books.quota_turns.get(assignment)
        if turn is None:
            blind = False  # (the attempt may look for room)
            plan = preemptor.for_quota(books, entry, demand, assignment, candidates)
            if isinstance(plan, PreemptionPlan):
                books.take_quota_turn(assignment, entry.key, issued=True)
                books.apply(plan, entry, demand, assignment)
                return False
            if plan.took_turn:
                books.take_quota_turn(assignment, entry.key, issued=False)
            # A preemption tried is this AppWrapper's own outcome, not the others'.
            refusal, cache = plan.message, not plan.message
        elif turn.issued:
            refusal = f"it waits for the evictions issued this cycle for {turn.by}"
        else:
            refusal = (f"preemption for its quota node was tried this cycle for {turn.by}, "
                       "first in line")
    blocked = answer.blocked(refusal)
    if cache:
        books.quota_misfits[key] = blocked
    _blocked(books, entry, demand, assignment, candidates, blocked=blocked, by_quota=True,
             tried_small=True)
    return blind


def _lasting(books: CycleBooks, entry: AppWrapperEntry, demand: Demand,
             candidates: tuple[int, ...]) -> Blocked | None:
    """A gang short of quota that no cluster it may use could hold even empty waits for
    that, which waiting will not change (``mcad.core.placement.lasting``); cached per shape and
    candidates for the cycle, its sentence retold of the asker's own pod sets (as a
    cached misfit of capacity is: which AppWrapper of a shape asks first differs
    between a full cycle and a carried one). None: quota is its cause (or it is
    elastic)."""
    if entry.elastic_min is not None:
        return None
    key = (demand.shape, candidates)
    try:
        told, found = books.lasting[key]
    except KeyError:
        sentence = never_fits(books.board, demand, candidates)
        found = None if sentence is None else Blocked(
            PendingReason.INSUFFICIENT_CAPACITY, sentence, could_run=False)
        books.lasting[key] = (demand.pod_sets, found)
        return found
    if found is not None and told is not demand.pod_sets:
        found = replace(found, message=retell(found.message, told, demand.pod_sets))
    return found


def _place(books: CycleBooks, entry: AppWrapperEntry, demand: Demand,
           assignment: QuotaAssignment, candidates: tuple[int, ...]
           ) -> tuple[Placement, BackfillPromise | None] | None:
    """Its nodes (charged to the board) and the promise it starts on, if any; or None
    when its outcome was given instead."""
    shape = (demand.shape, candidates)
    cached = books.capacity_misfits.get(shape)
    if cached is not None:
        told, blocked = cached
        if told is not None and told is not demand.pod_sets:
            blocked = replace(blocked, message=retell(blocked.message, told, demand.pod_sets))
    else:
        placement = books.board.place(demand, books.line.open(candidates),
                                      policy=books.policy.placement, avoid=entry.avoid_cluster)
        if isinstance(placement, Placement):
            refused = books.line.admits(entry, placement)
            if not isinstance(refused, Blocked):
                return placement, refused
            # It would delay the head's reservation: not a misfit of its shape (another
            # of the same shape that ends sooner may go), so not cached.
            books.board.unplace(placement)
            _blocked(books, entry, demand, assignment, candidates, blocked=refused,
                     by_quota=False, tried_small=True)
            return None
        if books.line.would_fit_unreserved(demand, candidates):
            blocked = books.line.behind(False)
        else:
            never = not books.board.fits_when_empty(demand, candidates)
            blocked = Blocked(PendingReason.INSUFFICIENT_CAPACITY,
                              f"{placement.message}; {NEVER_FITS_ROOM}" if never
                              else placement.message, could_run=not never)
        names = any(pod_of(s) in blocked.message for s in demand.pod_sets)
        books.capacity_misfits[shape] = (demand.pod_sets if names else None, blocked)
    short_of_room = blocked.reason == PendingReason.INSUFFICIENT_CAPACITY
    if entry.elastic_min is not None and short_of_room and \
            _start_small(books, entry, demand, assignment, candidates):
        return None  # started smaller: nobody evicted for it
    if short_of_room and blocked.could_run:
        plan = preemptor.for_capacity(books, entry, demand, candidates)
        if isinstance(plan, PreemptionPlan):
            books.take_capacity_turn(entry.key)
            books.apply(plan, entry, demand, assignment)
            return None
        if plan.took_turn:
            books.take_capacity_turn(entry.key)
    _blocked(books, entry, demand, assignment, candidates, blocked=blocked, by_quota=False,
             tried_small=short_of_room)
    return None


def _blocked(books: CycleBooks, entry: AppWrapperEntry, demand: Demand,
             assignment: QuotaAssignment, candidates: tuple[int, ...], *, blocked: Blocked,
             by_quota: bool, tried_small: bool = False) -> None:
    """``entry`` waits for ``blocked``: an elastic one refused for quota or room first
    tries to start smaller (unless ``tried_small``)."""
    if entry.elastic_min is not None and not tried_small and \
            blocked.reason in _ROOM_REASONS and \
            _start_small(books, entry, demand, assignment, candidates):
        return
    books.block(entry, demand, assignment, candidates, blocked=blocked, by_quota=by_quota)


def _start_small(books: CycleBooks, entry: AppWrapperEntry, demand: Demand,
                 assignment: QuotaAssignment, candidates: tuple[int, ...]) -> bool:
    """Dispatch an elastic ``entry`` below its full size when that fits now."""
    start = elastic.start_small(entry, demand, quota=books.line.held_quota or books.quota,
                                assignment=assignment, board=books.board,
                                candidates=books.line.open(candidates),
                                policy=books.policy.placement)
    if start is None:
        return False
    # Smaller, it is a backfill like any other: the head's reservation has its say.
    verdict = books.line.admits(entry, start.placement)
    if isinstance(verdict, Blocked):
        return False
    books.dispatch(entry, assignment, start.placement, pods=start.pods, placed=False,
                   promise=verdict)
    return True
