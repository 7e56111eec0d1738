"""A dispatch cycle whose cost follows what changed: the last cycle's work, carried.

Why: a controller runs a cycle at every event, and with 10,000 AppWrappers waiting most
events change nothing for most of them (an AppWrapper submitted, a pending reason's
echo). A full cycle decides all 10,000 again (tens of milliseconds); ``CarriedCycle``
decides only what the changes can reach, and a property test
(``tests/core/test_carried.py``) holds it to the full cycle's decisions: the same
dispatches, evictions and resizes, and the same reason and sentence for every waiting
AppWrapper.

When the last cycle is carried, stated once:

1. The last cycle decided nothing but reasons to wait (no dispatch, eviction or
   resize): the world it ran on is the world now.
2. The world is the same: the same policy and quota forest (the same object: a changed
   tree is a new forest), every cluster with the same nodes (the same objects: the
   controller keeps a node's capacity while nothing on it changes), reservations, pods
   held, labels, readiness and kinds; the same running AppWrappers.
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

Anything else, and the cycle runs in full (and becomes the next one to carry). The
waiting list comes out in the last cycle's order, a new one right after the one before
it in its line; its exact place among the other lines' is worked out by the next full
cycle (``mcad queue`` may show it a few places off until then).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta

from mcad.core.backfill import BackfillRule
from mcad.core.books import CycleBooks
from mcad.core.capacity import AppWrapperKey, ClusterCapacity
from mcad.core.cycle import decide_and_tell, run_cycle
from mcad.core.quota import QuotaAssignment
from mcad.core.snapshot import (
    Admitted,
    AppWrapperEntry,
    CycleResult,
    Pending,
    PendingReason,
    Snapshot,
)

LineId = tuple[tuple[str, str], ...]
"""A quota node's line: its assignment's (tree, node) leaves."""
OrderKey = tuple[int, float, str]
"""Queue order within a quota node with no priority slope: higher priority, then longer
waiting, then uid (``mcad.core.fairness.in_order``)."""


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
    cached: int = 0
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
        self.cached = len(books.quota_misfits) + len(books.capacity_misfits)

    def decided(self, entry: AppWrapperEntry, assignment: QuotaAssignment | None, *,
                active: bool) -> None:
        """``Trace``: ``entry`` was decided next (``active``: it did more than wait)."""
        books = self.books
        assert books is not None
        if books.line.seen and self.head_seen is None:
            self.head_seen = entry
        cached = len(books.quota_misfits) + len(books.capacity_misfits)
        if cached != self.cached:
            self.cached = cached
            self.creators.add(entry.key)
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


class CarriedCycle:
    """Decides as ``dispatch_cycle`` does, carrying the last cycle where it can."""

    def __init__(self) -> None:
        self._memo: _Memo | None = None
        self.carried = False
        """Whether the last ``decide`` was carried (for tests, metrics, the benchmark)."""
        self.why_full = "the first cycle"
        """Why the last ``decide`` ran in full."""

    def decide(self, snapshot: Snapshot) -> CycleResult:
        memo = self._memo
        if memo is not None and memo.carriable:
            result = _carry(memo, snapshot)
            if isinstance(result, CycleResult):
                self.carried = True
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


_CLUSTER_FIELDS = tuple(f.name for f in fields(ClusterCapacity) if f.name != "nodes")


def _same_clusters(old: tuple[ClusterCapacity, ...], new: tuple[ClusterCapacity, ...]) -> bool:
    """Every field alike (a field added to ``ClusterCapacity`` is compared too); the
    nodes, many, by identity first."""
    if len(old) != len(new):
        return False
    for a, b in zip(old, new, strict=True):
        if a is b:
            continue
        if any(getattr(a, name) != getattr(b, name) for name in _CLUSTER_FIELDS):
            return False
        if a.nodes is not b.nodes and (len(a.nodes) != len(b.nodes) or not all(
                x is y or x == y for x, y in zip(a.nodes, b.nodes, strict=True))):
            return False
    return True


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
    if not _same_clusters(last.clusters, snapshot.clusters):
        return "a cluster changed"
    entries = _by_id(snapshot)
    last_entries = memo.entries
    stale = {e.key: e for e in map(last_entries.__getitem__,
                                   last_entries.keys() - entries.keys())}
    old = memo.queued
    changed: list[AppWrapperEntry] = []
    for i in entries.keys() - last_entries.keys():
        entry = entries[i]
        was = stale.pop(entry.key, None)
        if was is not None and was == entry:
            continue  # the same AppWrapper, built again
        if isinstance(entry.phase, Admitted) or (was is not None and was.key not in old):
            return "the running work changed"
        if entry.key in memo.promised_to:  # its promise may be due: phase 1 decides
            return "a head that running work made a backfill promise to changed"
        changed.append(entry)
    if any(key not in old for key in stale):
        return "the running work changed"
    gone = list(stale)
    memo.entries = entries
    books.now = books.line.now = snapshot.now
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
        cached = len(books.quota_misfits) + len(books.capacity_misfits)
        if decide_and_tell(books, entry, assignment):
            memo.carriable = False  # its books moved: the next cycle starts afresh
            return "a newcomer does more than wait"
        if len(books.quota_misfits) + len(books.capacity_misfits) != cached:
            memo.creators.add(entry.key)
            memo.cached = len(books.quota_misfits) + len(books.capacity_misfits)
        _enter(memo, entry, line, books.pending[-1], after)
        if entry.not_before is not None and entry.not_before > snapshot.now and (
                memo.wake_at is None or entry.not_before < memo.wake_at):
            memo.wake_at = entry.not_before
    return _emit(memo, snapshot)


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
    outcomes = memo.outcomes
    order = memo.order
    if len(outcomes) == len(order):  # (every one decided waits: the carried case)
        return CycleResult((), tuple(map(outcomes.__getitem__, order)), ())
    return CycleResult((), tuple(outcomes[k] for k in order if k in outcomes), ())
