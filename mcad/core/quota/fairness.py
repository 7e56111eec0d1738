"""The order a cycle considers queued AppWrappers in: within quota first, then fair shares.

The rule, stated once (Kueue's fair sharing, DRF for the share):

1. AppWrappers are grouped by the quota node(s) they are charged to. Within a group the
   order is priority (higher first; with ``priorityslope`` the priority grows with the
   time waited), then the time it entered the queue, then uid.
2. At each step the cycle takes the head of one group: first any head that fits within
   its own node's quota (its node's usage plus its demand stays within what that node
   declares, in every tree), highest priority first; only when no head does, the head of
   the group whose node uses the smallest share of its own quota (the dominant resource
   share: the largest usage/quota over the resources the node names), then priority.
3. Usage is read live from the cycle's quota forest: each dispatch (``charged``) raises
   its node's share before the next step, so a team that queued a hundred borrowing
   jobs first gets one turn, then the team that borrows least goes, and so on.

Without quota trees every AppWrapper is "within quota", and the order is plain priority
order. AppWrappers that cannot be charged (no demand, an unknown quota node) come
first: they are decided at once and hold nothing.

Cost: a heap of groups; a group's place is recomputed only when its head changes or a
dispatch charged a node it shares, so a long queue costs O(n log g).
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Generic, Protocol, TypeVar, cast

from mcad.core.quota.forest import QuotaAssignment, QuotaForest, QuotaProblem
from mcad.core.workload.resources import ResourceList


class Orderable(Protocol):
    """What the order reads from an AppWrapper."""

    @property
    def priority(self) -> int: ...
    @property
    def created(self) -> datetime: ...
    @property
    def uid(self) -> str: ...
    @property
    def priority_slope(self) -> float: ...
    @property
    def queued_since(self) -> datetime | None: ...
    @property
    def since(self) -> float:
        """``queued_since or created`` as POSIX seconds."""
    @property
    def queue_key(self) -> str | None:
        """``queue_key(priority, priority_slope, since, uid)``: the queue's sort key."""


E = TypeVar("E", bound=Orderable)


def effective_priority(entry: Orderable, now: datetime) -> float:
    """``priority + priorityslope x seconds waited`` (MCAD's dynamic priority)."""
    slope = entry.priority_slope
    if not slope:
        return float(entry.priority)
    waited = max(0.0, (now - (entry.queued_since or entry.created)).total_seconds())
    return entry.priority + slope * waited


def order_key(entry: Orderable, now: datetime) -> tuple[float, datetime, str]:
    return (-effective_priority(entry, now), entry.queued_since or entry.created, entry.uid)


class _Group(Generic[E]):
    __slots__ = ("assignment", "demands", "entries", "leaves", "position", "ranks", "share",
                 "stamp", "within")

    def __init__(self, assignment: QuotaAssignment) -> None:
        self.assignment = assignment
        self.leaves = frozenset(assignment.leaves)
        self.entries: list[E] = []
        self.demands: list[ResourceList] = []
        """Each entry's demand (read once)."""
        self.ranks: list[int] = []
        """Each entry's place in priority order (priority, age, uid)."""
        self.position = 0
        self.stamp = 0
        self.within: dict[int, bool] = {}
        """Demand (its id: the group's ``demands`` keep it, and totals are interned, so
        equal ones are mostly one object; an identity hash is a C call, a
        ``ResourceList``'s a Python one) -> fits within the group's own quota, at the
        forest's current usage."""
        self.share: float | None = None


class FairOrder(Generic[E]):
    """Yields queued entries in fair order; tell it ``charged`` after each dispatch."""

    def __init__(self, entries: Sequence[E], *, now: datetime, forest: QuotaForest,
                 assignments_of: Callable[[Sequence[E]],
                                          Sequence[QuotaAssignment | QuotaProblem | None]],
                 demands_of: Callable[[Sequence[E]], Sequence[ResourceList | None]],
                 fair: bool = True) -> None:
        """``demands_of`` and ``assignments_of`` answer for a whole list at once (the
        cycle's read its 100,000 entries in C, where a call per entry cost more than the
        rest of this); ``assignments_of`` may say None where the demand is None."""
        self.forest = forest
        ordered = in_order(entries, now)
        self.first: list[E] = []
        self.rest: list[E] = []
        self.groups: dict[QuotaAssignment, _Group[E]] = {}
        self.assignment: QuotaAssignment | None = None
        """The quota assignment of the entry last yielded (None: not charged)."""
        # The cycle's assignments are one object per label set: looked up by identity
        # first (the object kept alive beside its group, so no id is reused), by value
        # when another object of the same value comes.
        # Each known group's three appends, bound once (this loop runs once per entry).
        by_id: dict[int, tuple[QuotaAssignment, Callable[[E], None],
                               Callable[[ResourceList], None], Callable[[int], None]]] = {}
        first, rest, groups = self.first, self.rest, self.groups
        to_first, to_rest = first.append, rest.append
        for rank, (entry, demand, assignment) in enumerate(
                zip(ordered, demands_of(ordered), assignments_of(ordered), strict=True)):
            if demand is None:
                to_first(entry)
                continue
            known = by_id.get(id(assignment))
            if known is None:
                if assignment is None or isinstance(assignment, QuotaProblem):
                    to_first(entry)
                    continue
                group = groups.get(assignment)
                if group is None:
                    group = groups[assignment] = _Group(assignment)
                known = by_id[id(assignment)] = (assignment, group.entries.append,
                                                 group.demands.append, group.ranks.append)
            to_rest(entry)
            known[1](entry)
            known[2](demand)
            known[3](rank)
        self.plain = len(self.groups) <= 1 or not fair or not forest.trees()
        self._heap: list[tuple[tuple[int, float, int], int, int]] = []
        self._by_id: list[_Group[E]] = list(self.groups.values())
        self._version = -1
        self.cut: int | None = None
        """Set by a consumer of ``runs`` whose decision changed usage: where the run was
        cut short (the position after that decision)."""

    def __iter__(self) -> Iterator[E]:
        """One entry at a time (``runs``, cut wherever deciding one changed usage)."""
        forest = self.forest
        for entries, start, stop in self.runs():
            version = forest.version
            for position in range(start, stop):
                yield entries[position]
                if forest.version != version:
                    self.cut = position + 1
                    break

    def runs(self) -> Iterator[tuple[list[E], int, int]]:
        """The order as runs: ``entries[start:stop]`` come next, one after another, as
        long as quota usage (``forest.version``) does not change while they are decided;
        ``assignment`` is theirs. A consumer whose decision of ``entries[i]`` changed
        usage sets ``cut = i + 1`` and asks for the next run: what follows is placed
        anew. Why runs: at 100,000 queued a generator resumed for each entry cost more
        than deciding most of them (alike waiters, ``mcad.core.cycle.decide``); the same
        order is worked out for a whole run at once."""
        self.cut = None
        yield from self._fixed(self.first)
        if self.plain:
            if len(self.groups) == 1:
                self.assignment = next(iter(self.groups))
                yield from self._fixed(self.rest)
                return
            assignment_of = {id(e): g.assignment for g in self.groups.values()
                             for e in g.entries}
            rest, start = self.rest, 0
            while start < len(rest):  # runs of one assignment
                self.assignment = assignment = assignment_of[id(rest[start])]
                stop = start + 1
                while stop < len(rest) and assignment_of[id(rest[stop])] is assignment:
                    stop += 1
                yield rest, start, stop
                start, self.cut = (stop, None) if self.cut is None else (self.cut, None)
            return
        for index in range(len(self._by_id)):
            self._push(index)
        heap, forest = self._heap, self.forest
        while heap:
            _, stamp, index = heapq.heappop(heap)
            group = self._by_id[index]
            if stamp != group.stamp:
                continue
            entries, demands, ranks, within = (group.entries, group.demands, group.ranks,
                                               group.within)
            end = len(entries)
            self.assignment = group.assignment
            version = -1  # the usage its limits were worked out at (-1: not yet)
            limit_within = limit_borrowing = 0
            start = group.position  # the head: it goes before every other group's
            candidate = start + 1  # the first entry not known to go on yet
            chunk = _FIRST_RUN
            while True:
                # The run grows while its next head still goes before every other
                # group's, so it is taken without a trip through the heap: while usage is
                # unchanged (so is the heap: only ``charged`` pushes, after a charge),
                # when its rank is below the limit for whether it fits within its quota;
                # else ``_place`` says where it goes. At most ``chunk`` entries are
                # looked at ahead (doubled each time a run is decided whole): a dispatch
                # cuts the run, and what was looked at past it is looked at again.
                place = None
                while candidate < end and candidate - start < chunk:
                    fits = within.get(id(demands[candidate])) \
                        if forest.version == version else None
                    if fits is not None and (fits or group.share is not None):
                        if ranks[candidate] < (limit_within if fits else limit_borrowing):
                            candidate += 1
                            continue
                        place = (0, 0.0, ranks[candidate]) if fits else \
                            (1, group.share or 0.0, ranks[candidate])
                        break
                    group.position = candidate  # (``_place`` reads the head there)
                    place = self._place(group)  # (brings ``within``, ``share`` up to date)
                    assert place is not None  # (a head is left)
                    version = forest.version
                    limit_within, limit_borrowing = _limits(heap[0][0] if heap else None,
                                                            group.share)
                    if heap and not place < heap[0][0]:
                        break
                    candidate, place = candidate + 1, None
                cut = None
                if candidate > start:
                    # While the run is decided, the group's next head is the one after
                    # the entry being decided (what ``charged`` may place).
                    group.position = start + 1
                    yield entries, start, candidate
                    cut, self.cut = self.cut, None
                    group.stamp += 1  # whatever ``charged`` pushed meanwhile is stale
                group.position = position = candidate if cut is None else cut
                if position == end:
                    break
                if cut is not None:  # usage changed: where its next head goes now
                    chunk = _FIRST_RUN
                    place = self._place(group)
                    assert place is not None
                    version = forest.version
                    limit_within, limit_borrowing = _limits(heap[0][0] if heap else None,
                                                            group.share)
                    if heap and not place < heap[0][0]:
                        heapq.heappush(heap, (place, group.stamp, index))
                        break
                    start, candidate = position, position + 1
                    continue
                if place is not None:  # worked out at unchanged usage
                    heapq.heappush(heap, (place, group.stamp, index))
                    break
                chunk *= 2  # decided whole: the next head is looked at as the run grows
                start = candidate = position

    def _fixed(self, entries: list[E]) -> Iterator[tuple[list[E], int, int]]:
        """Runs over ``entries`` whose order does not depend on usage: a cut only says
        where the next run starts."""
        start = 0
        while start < len(entries):
            yield entries, start, len(entries)
            start, self.cut = (len(entries) if self.cut is None else self.cut), None

    def charged(self, assignment: QuotaAssignment) -> None:
        """Usage under ``assignment`` grew: every group charged to one of its nodes or
        their ancestors (whose usage grew with it) takes a new place."""
        if self.plain:
            return
        touched = self.forest.charged_nodes(assignment)
        for index, group in enumerate(self._by_id):
            if group.leaves & touched:
                self._push(index)

    def _push(self, index: int) -> None:
        group = self._by_id[index]
        group.stamp += 1
        place = self._place(group)
        if place is not None:
            heapq.heappush(self._heap, (place, group.stamp, index))

    def _place(self, group: _Group[E]) -> tuple[int, float, int] | None:
        """Where ``group``'s head goes: (0 within its quota | 1 borrowing, its node's
        share when borrowing, its rank in priority order); None when it has no head."""
        if group.position >= len(group.entries):
            return None
        rank = group.ranks[group.position]
        if self.forest.version != self._version:  # usage changed: recompute on demand
            for each in self._by_id:
                each.within.clear()
                each.share = None
            self._version = self.forest.version
        demand = group.demands[group.position]
        within = group.within.get(id(demand))
        if within is None:
            within = group.within[id(demand)] = self.forest.within_own_quota(
                group.assignment, demand)
        if within:
            return (0, 0.0, rank)
        share = group.share
        if share is None:
            share = group.share = self.forest.share(group.assignment)
        return (1, share, rank)


_MICROS_OFFSET = 2**62
"""Added to a time in microseconds so that every datetime (years 1 to 9999: about
+-2.6e17 microseconds from 1970) is a positive number of at most 19 digits."""


def age_key(since: float, uid: str) -> str:
    """``since`` (POSIX seconds) and ``uid`` as one string whose order is that of
    ``(since, uid)``: the microseconds as 20 fixed-width digits, then the uid. Worked out
    once per entry, it lets a cycle sort 100,000 entries with one sort of strings (a
    compare of bytes) instead of a sort on uids and another on times (3x slower).
    ``-inf`` (a time too far to stamp) sorts first."""
    micros = 0 if since == float("-inf") else round(since * 1_000_000) + _MICROS_OFFSET
    return f"{min(max(micros, 0), 10**20 - 1):020d}{uid}"


_PRIORITY_OFFSET = 10**18
"""Priorities strictly within +-this are stamped in the queue key (as 20 fixed-width
digits of this minus the priority, so that a higher priority sorts first)."""


def queue_key(priority: int, slope: float, since: float, uid: str) -> str | None:
    """The queue's order (priority, higher first, then ``age_key``) as one string, worked
    out once per entry: a cycle sorts 100,000 entries with one sort of strings. None
    when the order cannot be fixed in advance: the priority grows with the time waited
    (``slope``), so the order depends on the cycle's time, or the priority is too large
    to stamp (``in_order`` then sorts such a queue the long way)."""
    if slope or not -_PRIORITY_OFFSET < priority < _PRIORITY_OFFSET:
        return None
    return f"{_PRIORITY_OFFSET - priority:020d}{age_key(since, uid)}"


_FIRST_RUN = 8
"""How far ``FairOrder.runs`` looks ahead at first (doubled while runs are decided whole)."""

_NO_LIMIT = 1 << 62
"""Above every rank."""


def _limits(top: tuple[int, float, int] | None, share: float | None) -> tuple[int, int]:
    """The ranks below which a group's next head still goes before ``top`` (the heap's
    least place): for a head within its quota, ``(0, 0.0, rank)``, and for one that
    borrows, ``(1, share, rank)``. Ranks are unique, so a place never equals ``top``."""
    if top is None:
        return _NO_LIMIT, _NO_LIMIT
    if top[0] == 0:  # (a place within quota has a share of 0.0)
        return top[2], -1
    if share is None or share > top[1]:
        return _NO_LIMIT, -1
    return _NO_LIMIT, (_NO_LIMIT if share < top[1] else top[2])


def in_order(entries: Sequence[E], now: datetime) -> list[E]:
    """``entries`` by priority (grown by its slope), then time in the queue, then uid.

    One sort of each entry's ``queue_key``, a string made once per entry. An entry
    without one (its place depends on ``now``) makes that sort fail as soon as it is
    compared (``None`` does not compare with a string), and not before: the queue is
    then sorted in three stable sorts on simple keys (comparing tuples that hold
    datetimes is several times slower). This costs a queue with no slope nothing, where
    a separate pass to look for a slope cost 12 ms at 100,000.
    """
    try:
        return sorted(entries, key=_QUEUE_KEY)
    except TypeError:  # (a key of None: a slope, or a priority too large to stamp)
        pass
    ordered = sorted(entries, key=_UID)
    ordered.sort(key=_SINCE)
    ordered.sort(key=lambda e: effective_priority(e, now), reverse=True)
    return ordered


_QUEUE_KEY = cast("Callable[[Orderable], str]", operator.attrgetter("queue_key"))
"""(typed as giving a string: when it gives None, the sort's TypeError is caught)"""
_UID = operator.attrgetter("uid")
_SINCE = operator.attrgetter("since")
