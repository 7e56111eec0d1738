"""A dispatch cycle whose cost follows what changed: the last cycle's work, carried.

Why: a controller runs a cycle at every event, and with 10,000 AppWrappers waiting most
events change nothing for most of them (an AppWrapper submitted, a pending reason's
echo, a pod of running work bound on a node or ended). A full cycle decides all 10,000
again (tens of milliseconds); ``CarriedCycle`` decides only what the changes can reach,
and property tests (``tests/core/test_carried.py``) hold it to the full cycle's
decisions: the same dispatches, evictions and resizes, and the same reason and sentence
for every waiting AppWrapper.

When the last cycle is carried, stated once:

1. The last cycle decided nothing but reasons to wait (no dispatch, eviction or
   resize): the world it ran on is the world now, but for what rules 2 and 4 allow.
2. The world is the same, room aside: the same policy and quota forest (the same
   object: a changed tree is a new forest); every cluster with the same labels,
   readiness, kinds, topology and closed namespaces, and the same nodes (name,
   allocatable, labels, taints, readiness, cordon, health: compared by identity first,
   since the controller keeps a node's capacity while nothing on it changes); the same
   running AppWrappers, but for when one was dispatched and is expected to end (a
   dispatch the controller assumed, seen persisted; on no backfill promise: read by
   preemption and growth alone, so by readers, as room is). Room may have changed:
   the nodes' requests (pods bound, ended), the unbound pods (of dispatched
   AppWrappers not bound yet) and the pods each AppWrapper holds, as when running
   work's pods bind and end while a backlog drains. Then the books follow (rule 5).
3. Time did not reach anything: no requeue pause ended, the head of the line did not
   start to starve (its reservation would move things), no backfill promise came due
   (its backfill would be evicted), no priority grows with time; and no head that a
   backfill promise was made to came back or changed (its promise may be due).
4. What changed among the waiting is within reach. A waiting AppWrapper's reason rests
   on the books as the cycle reaches it: the head of the line (once seen, its
   reservation), the one preemption turn for capacity, rooms held for victims (the
   *events* that concern everyone) and the preemption turn of its own quota node. After
   them the books hold still: nothing is charged, every misfit is told alike, and the
   order of those after them changes nobody's reason. With fair sharing, the order is a
   merge of the quota nodes' lines, each in priority order, by the place of each line's
   head; an AppWrapper entering or leaving a line changes the merge only from the point
   where it would be its line's head, that is from the one before it in its line. So:
   - an AppWrapper gone from the queue was no event itself; if it was the first to be
     told a misfit that later ones with the same demand were told too, it came after
     the events that concern it (the next one is told the same); and (with fair
     sharing) the one before it in its line came after them too, or it was the last of
     its line;
   - a new or changed AppWrapper comes after the events that concern it: with fair
     sharing, the one before it in its line does; in plain order, it sorts after them.
     It is then decided on the last cycle's books and must itself only wait: should it
     be dispatched, preempt or become the head of the line, the cycle runs in full. One
     whose demand or quota node is unreadable only waits, wherever it stands.
5. Room that changed reaches only the decisions that read room, and they still only
   wait. A decision reads room (per-node free room, cluster totals, unbound pods, the
   pods each AppWrapper holds) only in placement, preemption, an elastic start or
   growth, the head of the line's hold (its nodes, or the cluster closed to those
   behind it) and a preemptor holding room while its victims go. A decision that ends
   before all of them, for an AppWrapper that is not elastic and holds no broken
   promise or draining victims, is *blind* (``Outcome.WAITS_BLIND``): a requeue pause, an
   unreadable demand or quota node, no matching cluster (clusters' fixed facts), a
   misfit of quota, quota held for the head. It reads the AppWrapper, the quota and
   what decisions before it left on the books: the head (and the quota held for it),
   the preemption turns taken, its own misfit of quota, cached or not. The others, and
   every decision that did more than wait, are the *readers*. The books take the new
   room in (``CycleBooks.renew_room``: the changed clusters' pools built anew, the
   nodes held for the head given back, the head, the preemption turns and the misfits
   of capacity forgotten), and the readers are decided again, in their order, each
   with its own misfit of quota cached or not as when it was first decided (misfits of
   quota rest on quota alone, and the one lookup a decision makes in that cache is its
   own). When every reader again does what it did (it waits, or heads the line, or
   takes the preemption turns it took), the books hold, at every blind decision's
   place, what they held there before: the same head and quota held for it, the same
   turns, the same misfits of quota; so each blind decision, reading nothing else,
   stands, and the readers' new reasons are the full cycle's. The cycle runs in full
   instead when a reader now does more than wait (room freed lets it start, or
   preempt), when who heads the line or takes a turn changes, when an admitted elastic
   AppWrapper could grow into room freed (phase 4, growth, is decided again: any growth
   runs the cycle in full), or when a preemptor holds room while its victims go (its
   quota is charged in the books, and would be charged twice). A reader told the same
   reason and sentence keeps the very outcome object it had (the dispatcher skips it).
   The cost is the readers: while a saturated backlog drains, a handful (the head of
   the line, the takers of preemption turns).

Anything else, and the cycle runs in full (and becomes the next one to carry). The
waiting list comes out in the last cycle's order, a new one right after the one before
it in its line; its exact place among the other lines' is worked out by the next full
cycle (``mcad queue`` may show it a few places off until then).
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta

from mcad.core.cycle import elastic
from mcad.core.cycle.backfill import BackfillRule
from mcad.core.cycle.books import CycleBooks
from mcad.core.cycle.decide import Outcome, decide, run_cycle
from mcad.core.cycle.snapshot import (
    Admitted,
    AppWrapperEntry,
    Blocked,
    CycleResult,
    Pending,
    PendingReason,
    Snapshot,
)
from mcad.core.placement.capacity import AppWrapperKey, ClusterCapacity, NodeCapacity
from mcad.core.quota.forest import QuotaAssignment
from mcad.core.workload.resources import ResourceList

LineId = tuple[tuple[str, str], ...]
"""A quota node's line: its assignment's (tree, node) leaves."""
OrderKey = tuple[int, float, str]
"""Queue order within a quota node with no priority slope: higher priority, then longer
waiting, then uid (``mcad.core.quota.fairness.in_order``)."""


def order_key(entry: AppWrapperEntry) -> OrderKey:
    return (-entry.priority, entry.since, entry.uid)


@dataclass
class _Line:
    """One quota node's line, as last decided: its members in priority order."""

    members: list[AppWrapperKey] = field(default_factory=list)
    keys: list[OrderKey] = field(default_factory=list)


@dataclass
class _Memo:
    """What a cycle leaves for the next one to carry."""

    snapshot: Snapshot
    books: CycleBooks | None = None
    result: CycleResult = field(default_factory=lambda: CycleResult((), (), ()))
    order: list[AppWrapperKey] = field(default_factory=list)
    place: dict[AppWrapperKey, float] = field(default_factory=dict)
    """Each one's place in ``order`` (a new one between two gets a number between)."""
    places: list[float] = field(default_factory=list)
    """``order``'s places, ascending: where a key stands is a bisection, not a scan."""
    outcomes: dict[AppWrapperKey, Pending] = field(default_factory=dict)
    queued: dict[AppWrapperKey, AppWrapperEntry] = field(default_factory=dict)
    entries: dict[int, AppWrapperEntry] = field(default_factory=dict)
    """The last snapshot's entries by identity (kept alive here, so no id is reused):
    what changed is a difference of two key sets, not 10,000 comparisons."""
    line_of: dict[AppWrapperKey, LineId | None] = field(default_factory=dict)
    lines: dict[LineId, _Line] = field(default_factory=dict)
    active: set[AppWrapperKey] = field(default_factory=set)
    creators: set[AppWrapperKey] = field(default_factory=set)
    """Those whose decision put a misfit in the books' caches: what later ones with the
    same demand are told was worked out at their place."""
    readers: set[AppWrapperKey] = field(default_factory=set)
    """Those whose decision read room, or did more than wait (every ``Outcome`` but
    ``WAITS_BLIND``): decided again when room changes."""
    hits: set[AppWrapperKey] = field(default_factory=set)
    """Readers that found their quota misfit cached when they were decided."""
    cached: int = 0
    quota_cached: int = 0
    events: float = -1.0
    """The place of the last event that concerns everyone: the head of the line seen,
    the capacity preemption turn taken, room held for victims."""
    events_key: OrderKey | None = None
    turns: dict[LineId, tuple[float, OrderKey]] = field(default_factory=dict)
    """Each quota node's line: the place and order key of who took its preemption turn."""
    capacity_turn: AppWrapperKey | None = None
    turns_taken: int = 0
    plain: bool = True
    carriable: bool = False
    redecided: int | None = None
    """How many decisions the last carried cycle decided again as room or running work's
    times changed (``_follow_room``; None: none changed)."""
    emitted: CycleResult | None = None
    """The last carried result, while no outcome and no place changed since."""
    wake_at: datetime | None = None
    """The earliest moment a requeue pause ends, the head of the line starves or a
    backfill promise comes due."""
    promised_to: frozenset[AppWrapperKey] = frozenset()
    """The heads the running work's backfill promises were made to."""
    head_seen: AppWrapperEntry | None = None
    """The AppWrapper that was the first in line to wait (the head, starving or not)."""

    def started(self, books: CycleBooks) -> None:
        """``Trace``: the running work is charged; the queue is decided next."""
        self.books = books
        self.quota_cached = len(books.quota_misfits)
        self.cached = self.quota_cached + len(books.capacity_misfits)

    def decided(self, entry: AppWrapperEntry, assignment: QuotaAssignment | None,
                outcome: Outcome) -> None:
        """``Trace``: ``entry`` was decided next, with ``outcome``."""
        books = self.books
        assert books is not None
        if books.line.seen and self.head_seen is None:
            self.head_seen = entry
        self.note(entry, assignment, outcome)
        active = outcome is Outcome.ACTS
        position = float(len(self.order))
        self.order.append(entry.key)
        self.places.append(position)
        self.place[entry.key] = position
        self.queued[entry.key] = entry
        line = assignment.leaves if assignment is not None and entry.demand is not None \
            else None
        self.line_of[entry.key] = line
        if line is not None:
            group = self.lines.setdefault(line, _Line())
            group.members.append(entry.key)
            group.keys.append(order_key(entry))
        if active:
            self.active.add(entry.key)
            key = order_key(entry)
            everyone = (books.line.seen and self.head_seen is entry) or \
                books.capacity_turn != self.capacity_turn or \
                (books.pending and books.pending[-1].key == entry.key
                 and books.pending[-1].reason == PendingReason.WAITING_FOR_PREEMPTION)
            self.capacity_turn = books.capacity_turn
            if everyone or books.dispatches or books.evictions:
                self.events = position
                if self.events_key is None or key > self.events_key:
                    self.events_key = key
            if len(books.quota_turns) != self.turns_taken:
                self.turns_taken = len(books.quota_turns)
                if line is not None:
                    self.turns[line] = (position, key)

    def note(self, entry: AppWrapperEntry, assignment: QuotaAssignment | None,
             outcome: Outcome) -> bool:
        """What deciding ``entry`` just now left in the caches, and whether it read room;
        True when it put a misfit in a cache."""
        books = self.books
        assert books is not None
        quota = len(books.quota_misfits)
        cached = quota + len(books.capacity_misfits)
        made = cached != self.cached
        if made:
            self.cached = cached
            self.creators.add(entry.key)
        else:
            self.creators.discard(entry.key)
        if outcome is not Outcome.WAITS_BLIND:
            key = entry.key
            self.readers.add(key)
            if quota == self.quota_cached and _quota_key(entry, assignment) in \
                    books.quota_misfits:
                self.hits.add(key)
            else:
                self.hits.discard(key)
        else:
            self.readers.discard(entry.key)
            self.hits.discard(entry.key)
        self.quota_cached = quota
        return made


def _quota_key(entry: AppWrapperEntry, assignment: QuotaAssignment | None
               ) -> tuple[int, ResourceList] | None:
    """The key of ``entry``'s quota misfit in the books (``decide.decide``'s)."""
    if assignment is None or entry.demand is None:
        return None
    return (id(assignment), entry.demand.total)


class CarriedCycle:
    """Decides as ``dispatch_cycle`` does, carrying the last cycle where it can."""

    def __init__(self) -> None:
        self._memo: _Memo | None = None
        self.carried = False
        """Whether the last ``decide`` was carried (for tests, metrics, the benchmark)."""
        self.why_full = "the first cycle"
        """Why the last ``decide`` ran in full."""
        self.followed_room = False
        """Whether the last carried ``decide`` took in room that changed on a cluster (or
        running work's times), deciding again those that read room (``redecided``)."""
        self.redecided = 0

    def decide(self, snapshot: Snapshot) -> CycleResult:
        memo = self._memo
        self.followed_room = False
        if memo is not None and memo.carriable:
            result = _carry(memo, snapshot)
            if isinstance(result, CycleResult):
                self.carried = True
                self.followed_room = memo.redecided is not None
                self.redecided = memo.redecided or 0
                return result
            self.why_full = result
        elif memo is not None:
            self.why_full = ("reservation backfill decides in full"
                             if snapshot.policy.backfill is BackfillRule.RESERVATION
                             else "the last cycle dispatched, evicted or resized")
        self.carried = False
        self._memo = memo = _full(snapshot)
        return memo.result


def _full(snapshot: Snapshot) -> _Memo:
    memo = _Memo(snapshot=snapshot)
    books, memo.result = run_cycle(snapshot, trace=memo)
    memo.books = books
    order = books.order
    memo.plain = order is None or order.plain
    memo.outcomes = {p.key: p for p in memo.result.pending}
    memo.entries = _by_id(snapshot)
    result = memo.result
    # Reservation backfill weighs expected ends against the moving now: never carried.
    memo.carriable = not (result.dispatches or result.evictions or result.resizes) and not \
        any(e.priority_slope for e in memo.queued.values()) and \
        snapshot.policy.backfill is BackfillRule.MCAD
    promises = [e.backfill_promise for e in snapshot.appwrappers
                if e.backfill_promise is not None and isinstance(e.phase, Admitted)]
    memo.promised_to = frozenset(p.head for p in promises)
    memo.wake_at = _wake_at(memo, [p.end for p in promises])
    return memo


def _wake_at(memo: _Memo, promised: list[datetime]) -> datetime | None:
    """When time alone would change the last decisions: a pause ends, the head starves,
    a backfill promise comes due (``promised``: when the running work's do)."""
    now = memo.snapshot.now
    moments = [e.not_before for e in memo.queued.values()
               if e.not_before is not None and e.not_before > now]
    moments += [end for end in promised if end > now]
    assert memo.books is not None
    line = memo.books.line
    if line.seen and line.head is None:  # the head is known and not starving yet
        head = memo.head_seen
        if head is None:
            return now  # cannot tell: decide in full next time
        since = head.queued_since or head.created
        moments.append(since + timedelta(seconds=line.backfill.starvation_seconds))
    return min(moments, default=None)


_ROOM = ("nodes", "unbound", "held_by")
_CLUSTER_FACTS = tuple(f.name for f in fields(ClusterCapacity)
                       if f.compare and f.name not in _ROOM)
"""What a cluster is, room aside (a field added to ``ClusterCapacity`` is compared)."""
_NODE_FACTS = tuple(f.name for f in fields(NodeCapacity)
                    if f.compare and f.name != "requested")
"""What a node is, its pods' requests aside (likewise)."""


def _room_changes(old: tuple[ClusterCapacity, ...], new: tuple[ClusterCapacity, ...]
                  ) -> list[ClusterCapacity] | None:
    """The clusters of ``new`` whose room alone changed (their nodes' requests, their
    unbound pods, where their AppWrappers' pods are held); None when anything else
    about a cluster changed (a node added, gone, cordoned or relabelled, a cluster's
    labels, readiness, kinds or namespaces). The nodes, many, by identity first: the
    controller keeps a node's capacity while nothing on it changes."""
    if len(old) != len(new):
        return None
    changed = []
    for a, b in zip(old, new, strict=True):
        if a is b:
            continue
        if any(getattr(a, name) != getattr(b, name) for name in _CLUSTER_FACTS):
            return None
        room = a.unbound != b.unbound or a.held_by != b.held_by
        if a.nodes is not b.nodes:
            if len(a.nodes) != len(b.nodes):
                return None
            for x, y in zip(a.nodes, b.nodes, strict=True):
                if x is y:
                    continue
                if any(getattr(x, name) != getattr(y, name) for name in _NODE_FACTS):
                    return None
                room = room or x.requested != y.requested
        if room:
            changed.append(b)
    return changed


_WHEN = ("dispatched", "expected_end")
_ENTRY_FACTS = tuple(f.name for f in fields(AppWrapperEntry) if f.compare and f.name not in _WHEN)


def _retimed(was: AppWrapperEntry, entry: AppWrapperEntry) -> bool:
    """The same running AppWrapper but for when it was dispatched and is expected to end
    (its dispatch persisted after the cycle that ordered it assumed it), on no backfill
    promise: only preemption (whom first) and growth (who first) read those."""
    return isinstance(was.phase, Admitted) and isinstance(entry.phase, Admitted) and \
        was.backfill_promise is None and entry.backfill_promise is None and \
        all(getattr(was, name) == getattr(entry, name) for name in _ENTRY_FACTS)


def _same_entries(old: tuple[AppWrapperEntry, ...], new: tuple[AppWrapperEntry, ...]) -> bool:
    """The very same entry objects in the same order (what the controller gives when no
    AppWrapper changed): one pass in C, not two set differences of 10,000 ids."""
    return old is new or (len(old) == len(new) and all(map(operator.is_, old, new)))


def _by_id(snapshot: Snapshot) -> dict[int, AppWrapperEntry]:
    return dict(zip(map(id, snapshot.appwrappers), snapshot.appwrappers, strict=True))


def _carry(memo: _Memo, snapshot: Snapshot) -> CycleResult | str:
    """The decisions for ``snapshot`` from ``memo``, or why it cannot be carried."""
    last = memo.snapshot
    books = memo.books
    assert books is not None
    if snapshot.policy != last.policy or snapshot.quota is not last.quota:
        return "the policy or the quota forest changed"
    if memo.wake_at is not None and snapshot.now >= memo.wake_at:
        return "a requeue pause ended, the head of the line starves or a promise is due"
    renewed = _room_changes(last.clusters, snapshot.clusters)
    memo.redecided = None
    if renewed is None:
        return "a cluster changed"  # (a node, a label, readiness, kinds or namespaces)
    old = memo.queued
    changed: list[AppWrapperEntry] = []
    retimed: list[AppWrapperEntry] = []
    stale: dict[AppWrapperKey, AppWrapperEntry] = {}
    if _same_entries(last.appwrappers, snapshot.appwrappers):
        entries = memo.entries  # (the usual cycle while a backlog drains)
        fresh: Iterable[int] = ()
    else:
        entries = _by_id(snapshot)
        last_entries = memo.entries
        stale = {e.key: e for e in map(last_entries.__getitem__,
                                       last_entries.keys() - entries.keys())}
        fresh = entries.keys() - last_entries.keys()
    for i in fresh:
        entry = entries[i]
        was = stale.pop(entry.key, None)
        if was is not None and was == entry:
            continue  # the same AppWrapper, built again
        if isinstance(entry.phase, Admitted) or (was is not None and was.key not in old):
            if was is not None and _retimed(was, entry):
                retimed.append(entry)
                continue
            return "the running work changed"
        if entry.key in memo.promised_to:  # its promise may be due: phase 1 decides
            return "a head that running work made a backfill promise to changed"
        changed.append(entry)
    if any(key not in old for key in stale):
        return "the running work changed"
    gone = list(stale)
    memo.entries = entries
    books.resume(snapshot.now)
    if retimed:
        books.retime(retimed)
    if renewed or retimed:
        why = _follow_room(memo, renewed)
        if why is not None:
            memo.carriable = False
            return why
    if not changed and not gone:
        return _emit(memo, snapshot)
    # From the back of the order forward, so each one leaving is weighed against the
    # one that really follows it then.
    leaving = sorted({*gone, *(e.key for e in changed if e.key in old)},
                     key=lambda k: memo.place[k], reverse=True)
    for key in leaving:
        if not _may_leave(memo, key):
            memo.carriable = False
            return "one that left or changed was an event, or moves others"
        _drop(memo, key)
    changed.sort(key=order_key)
    for entry in changed:
        if entry.priority_slope or entry.elastic_min is not None or \
                entry.draining_for is not None:
            memo.carriable = False
            return "a newcomer grows in priority, is elastic or waits for victims"
        found = books.assignment(entry.quota_labels) if entry.demand is not None else None
        assignment = found if isinstance(found, QuotaAssignment) else None
        line: LineId | None = None
        after: AppWrapperKey | None = None  # no line: it only waits, at the front
        if assignment is not None:
            line = assignment.leaves
            entering = _entering(memo, entry, assignment)
            if isinstance(entering, bool):
                memo.carriable = False
                return "a newcomer comes before an event that concerns it, or moves others"
            after = entering
        outcome = decide(books, entry, assignment)
        if outcome is Outcome.ACTS:
            memo.carriable = False  # its books moved: the next cycle starts afresh
            return "a newcomer does more than wait"
        memo.note(entry, assignment, outcome)
        _enter(memo, entry, line, books.pending[-1], after)
        if entry.not_before is not None and entry.not_before > snapshot.now and (
                memo.wake_at is None or entry.not_before < memo.wake_at):
            memo.wake_at = entry.not_before
    return _emit(memo, snapshot)


def _follow_room(memo: _Memo, renewed: list[ClusterCapacity]) -> str | None:
    """Take the room of the ``renewed`` clusters into the books and decide again those
    whose decision read room, in their order (see the module's docstring, rule 5);
    None when every other decision stands, else why the cycle runs in full."""
    books = memo.books
    assert books is not None
    if books.draining_for:
        return "room changed while a preemptor holds room for its victims to go"
    line = books.line
    events = (line.first, line.head, dict(books.quota_turns), books.capacity_turn)
    books.renew_room(renewed)
    quota_misfits, capacity_misfits = books.quota_misfits, books.capacity_misfits
    outcomes, creators, active = memo.outcomes, memo.creators, memo.active
    memo.redecided = len(memo.readers)
    for key in sorted(memo.readers, key=memo.place.__getitem__):
        entry = memo.queued[key]
        found = books.assignment(entry.quota_labels) if entry.demand is not None else None
        assignment = found if isinstance(found, QuotaAssignment) else None
        # Its own quota misfit is in the cache as it was when it was decided: the one
        # such lookup a decision makes (misfits of quota rest on quota alone).
        misfit = _quota_key(entry, assignment)
        hit = key in memo.hits
        kept: Blocked | None = None
        if misfit is not None and not hit:
            kept = quota_misfits.pop(misfit, None)
        elif hit and misfit not in quota_misfits:
            return "a decision no longer finds what it found cached"
        capacity = len(capacity_misfits)
        if (decide(books, entry, assignment) is Outcome.ACTS) != (key in active) or \
                books.dispatches or books.evictions or books.resizes:
            return "room changed what one waiting does, or who does more than wait"
        made = misfit is not None and not hit and misfit in quota_misfits
        if misfit is not None and made and (kept is None or quota_misfits[misfit] != kept):
            return "a decision caches a misfit of quota it did not"
        if misfit is not None and kept is not None:
            quota_misfits[misfit] = kept
        if made or len(capacity_misfits) != capacity:
            creators.add(key)
        else:
            creators.discard(key)
        pending = books.unpend_last()
        if pending != outcomes[key]:
            outcomes[key] = pending
            memo.emitted = None
    memo.cached = len(quota_misfits) + len(capacity_misfits)
    memo.quota_cached = len(quota_misfits)
    if (line.first, line.head, books.quota_turns, books.capacity_turn) != events:
        return "room changed who heads the line or takes a preemption turn"
    for work in elastic.growers(books):
        if elastic.growth(work, books) is not None:
            return "room freed lets an elastic AppWrapper grow"
    return None


def _settled(memo: _Memo, place: float, line: LineId | None) -> bool:
    """Everything that concerns one at ``place`` in ``line`` happened before it."""
    turn = memo.turns.get(line) if line is not None else None
    return place > memo.events and (turn is None or place > turn[0])


def _may_leave(memo: _Memo, key: AppWrapperKey) -> bool:
    """Its going changes nobody's decision (see the module's docstring)."""
    line = memo.line_of.get(key)
    if key in memo.active or (key in memo.creators and
                              not _settled(memo, memo.place[key], line)):
        return False
    if line is None or memo.plain:
        return True
    group = memo.lines[line]
    index = bisect.bisect_left(group.keys, order_key(memo.queued[key]))
    if index == len(group.members) - 1:
        return True
    return index > 0 and _settled(memo, memo.place[group.members[index - 1]] + 0.5, line)


def _entering(memo: _Memo, entry: AppWrapperEntry,
              assignment: QuotaAssignment) -> AppWrapperKey | bool | None:
    """Where ``entry`` enters the order: after that key (None: at the end), or False
    when it might come before an event that concerns it, or move someone (see the
    module's docstring)."""
    key = order_key(entry)
    line = assignment.leaves
    if memo.plain:
        if line not in memo.lines and memo.snapshot.policy.fair_sharing and \
                memo.snapshot.quota.trees():
            return False  # a second quota node's line turns plain order into fair sharing
        turn = memo.turns.get(line)
        if (memo.events_key is not None and key <= memo.events_key) or \
                (turn is not None and key <= turn[1]):
            return False
        index = bisect.bisect(memo.lines[line].keys, key) if line in memo.lines else 0
        members = memo.lines[line].members if line in memo.lines else []
        return members[index - 1] if index else None
    group = memo.lines.get(line)
    if group is None or not group.members:
        return False  # a new line: its place in the merge is not known without one
    index = bisect.bisect(group.keys, key)
    if index == 0:
        return False  # the new head of its line: it may come first of all
    before = group.members[index - 1]
    if not _settled(memo, memo.place[before] + 0.5, line):
        return False
    return before


def _drop(memo: _Memo, key: AppWrapperKey) -> None:
    index = bisect.bisect_left(memo.places, memo.place.pop(key))
    del memo.order[index], memo.places[index]
    entry = memo.queued.pop(key)
    memo.outcomes.pop(key, None)
    memo.emitted = None
    memo.readers.discard(key)
    memo.hits.discard(key)
    line = memo.line_of.pop(key, None)
    if line is not None:
        group = memo.lines[line]
        index = bisect.bisect_left(group.keys, order_key(entry))
        del group.members[index], group.keys[index]


def _enter(memo: _Memo, entry: AppWrapperEntry, line: LineId | None, pending: Pending,
           after: AppWrapperKey | None) -> None:
    """Put ``entry`` in the order (right after ``after``; None: at the front when it has
    no line, else at the end) with its outcome."""
    assert pending.key == entry.key
    order, places, place = memo.order, memo.places, memo.place
    if after is None and line is None:
        index, here = 0, (places[0] if places else 0.0) - 1.0
    elif after is None:
        index, here = len(order), (places[-1] if places else -1.0) + 1.0
    else:
        index = bisect.bisect_right(places, place[after])
        nxt = places[index] if index < len(places) else place[after] + 2.0
        here = (place[after] + nxt) / 2
        if not place[after] < here < nxt:  # halved too often: number them afresh
            places[:] = [float(2 * i) for i in range(len(order))]
            place.update(zip(order, places, strict=True))
            here = places[index - 1] + 1.0
    order.insert(index, entry.key)
    places.insert(index, here)
    place[entry.key] = here
    memo.queued[entry.key] = entry
    memo.outcomes[entry.key] = pending
    memo.emitted = None
    memo.line_of[entry.key] = line
    if line is not None:
        group = memo.lines.setdefault(line, _Line())
        at = bisect.bisect(group.keys, order_key(entry))
        group.members.insert(at, entry.key)
        group.keys.insert(at, order_key(entry))


def _emit(memo: _Memo, snapshot: Snapshot) -> CycleResult:
    """The waiting list in the last order, new ones in their place. The outcomes are the
    very objects of the last cycle where nothing changed (the dispatcher skips those);
    no sentence names the time (the head of the line's says since when it waits)."""
    memo.snapshot = snapshot
    if memo.emitted is not None:
        return memo.emitted
    outcomes = memo.outcomes
    order = memo.order
    if len(outcomes) == len(order):  # (every one decided waits: the carried case)
        memo.emitted = CycleResult((), tuple(map(outcomes.__getitem__, order)), ())
    else:
        memo.emitted = CycleResult((), tuple(outcomes[k] for k in order if k in outcomes), ())
    return memo.emitted
