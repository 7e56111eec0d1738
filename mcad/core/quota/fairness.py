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
from typing import Generic, Protocol, TypeVar

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
        """``queued_since or created`` as POSIX seconds (the sort key)."""


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
        self.within: dict[ResourceList, bool] = {}
        """Demand -> fits within the group's own quota, at the forest's current usage."""
        self.share: float | None = None


class FairOrder(Generic[E]):
    """Yields queued entries in fair order; tell it ``charged`` after each dispatch."""

    def __init__(self, entries: Sequence[E], *, now: datetime, forest: QuotaForest,
                 assignment_of: Callable[[E], QuotaAssignment | QuotaProblem],
                 demand_of: Callable[[E], ResourceList | None], fair: bool = True) -> None:
        self.forest = forest
        self.demand_of = demand_of
        ordered = in_order(entries, now)
        self.first: list[E] = []
        self.rest: list[E] = []
        self.groups: dict[QuotaAssignment, _Group[E]] = {}
        self.assignment: QuotaAssignment | None = None
        """The quota assignment of the entry last yielded (None: not charged)."""
        # The cycle's assignments are one object per label set: looked up by identity
        # first (the object kept alive beside its group, so no id is reused), by value
        # when another object of the same value comes.
        by_id: dict[int, tuple[QuotaAssignment, _Group[E]]] = {}
        first, rest, groups = self.first, self.rest, self.groups
        for rank, entry in enumerate(ordered):
            demand = demand_of(entry)
            if demand is None:
                first.append(entry)
                continue
            assignment = assignment_of(entry)
            known = by_id.get(id(assignment))
            if known is not None:
                group = known[1]
            elif isinstance(assignment, QuotaProblem):
                first.append(entry)
                continue
            else:
                found = groups.get(assignment)
                if found is None:
                    found = groups[assignment] = _Group(assignment)
                by_id[id(assignment)] = (assignment, found)
                group = found
            rest.append(entry)
            group.entries.append(entry)
            group.demands.append(demand)
            group.ranks.append(rank)
        self.plain = len(self.groups) <= 1 or not fair or not forest.trees()
        self._heap: list[tuple[tuple[int, float, int], int, int]] = []
        self._by_id: list[_Group[E]] = list(self.groups.values())
        self._version = -1

    def __iter__(self) -> Iterator[E]:
        yield from self.first
        if self.plain:
            if len(self.groups) == 1:
                self.assignment = next(iter(self.groups))
                yield from self.rest
                return
            assignment_of = {id(e): g.assignment for g in self.groups.values()
                             for e in g.entries}
            for entry in self.rest:
                self.assignment = assignment_of[id(entry)]
                yield entry
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
            while group.position < end:
                position = group.position
                group.position = position + 1
                yield entries[position]
                group.stamp += 1  # whatever ``charged`` pushed for it meanwhile is stale
                position += 1
                if position == end:
                    break
                # Most steps take the same group again: its next head still goes before
                # every other group's, so it is yielded without a trip through the heap.
                # Its place is ``_place``'s, worked out here while usage is unchanged and
                # what it needs is known (asked once per entry, a call cost 10% of this).
                fits = within.get(demands[position]) \
                    if forest.version == self._version else None
                place: tuple[int, float, int] | None
                if fits:
                    place = (0, 0.0, ranks[position])
                elif fits is not None and group.share is not None:
                    place = (1, group.share, ranks[position])
                else:
                    place = self._place(group)
                if place is None:  # (never: a head is left; ``_place``'s type allows it)
                    break
                if heap and heap[0][0] < place:
                    heapq.heappush(heap, (place, group.stamp, index))
                    break

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
        within = group.within.get(demand)
        if within is None:
            within = group.within[demand] = self.forest.within_own_quota(group.assignment,
                                                                         demand)
        if within:
            return (0, 0.0, rank)
        share = group.share
        if share is None:
            share = group.share = self.forest.share(group.assignment)
        return (1, share, rank)


def in_order(entries: Sequence[E], now: datetime) -> list[E]:
    """``entries`` by priority (grown by its slope), then time in the queue, then uid.

    Stable sorts on simple keys rather than one sort on tuples: comparing tuples that
    hold datetimes is several times slower, and a cycle sorts thousands of entries.
    """
    ordered = sorted(entries, key=_UID)
    ordered.sort(key=_SINCE)  # POSIX seconds, computed once per entry
    if any(map(_SLOPE, entries)):
        ordered.sort(key=lambda e: effective_priority(e, now), reverse=True)
    else:
        ordered.sort(key=_PRIORITY, reverse=True)
    return ordered


_UID = operator.attrgetter("uid")
_SINCE = operator.attrgetter("since")
_PRIORITY = operator.attrgetter("priority")
_SLOPE = operator.attrgetter("priority_slope")
