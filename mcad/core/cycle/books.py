"""The books of one dispatch cycle: what it has charged and decided so far.

Why one ledger with one writer: a cycle decides AppWrappers one after the other, and
each decision must see the ones before it (quota and nodes already charged, victims
already chosen, the head of line's reservation). The parts of the cycle
(``mcad.core.cycle.quotagate``, ``mcad.core.cycle.preemptor``, ``mcad.core.cycle.elastic``,
``mcad.core.cycle.headofline``, placement) read these books, through ``BooksView`` (read-only
by type), and return plans (``mcad.core.cycle.plans``); only the cycle
(``mcad.core.cycle.decide``, and ``mcad.core.cycle.carried`` resuming them) writes them,
through the methods below (the misfit caches and the plain reasons to wait excepted: the
decision loop fills those inline, on the path every queued AppWrapper takes). A part may
try a placement on the board, but leaves it as it found it.

What is kept:

- quota, three ways: ``quota`` (charged as decided; what everything is decided on),
  ``after_evictions`` (as it will be once this cycle's victims are gone: later
  preemptors look for victims there, so two never count on one), and the head of
  line's ``held_quota`` (``line``);
- the capacity board (per-node free room, unbound pods placed first);
- the running work: the admitted AppWrappers, their quota assignment, and who of them
  is evicted, shrunk or draining (never chosen twice);
- the results, and the per-cycle caches of misfits (free room only shrinks during a
  cycle, so a shape that did not fit does not fit later in the same cycle).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import compress, repeat
from typing import Protocol

from mcad.core.cycle.backfill import BackfillPolicy
from mcad.core.cycle.headofline import HeadOfLine
from mcad.core.cycle.plans import HoldRoom, PreemptionPlan, ShrinkOrder
from mcad.core.cycle.promises import BrokenPromise
from mcad.core.cycle.snapshot import (
    PREEMPTED,
    SUSPENDED,
    Admitted,
    AppWrapperEntry,
    BackfillPromise,
    Blocked,
    CyclePolicy,
    CycleResult,
    Dispatch,
    Eviction,
    Pending,
    PendingReason,
    Resize,
    Snapshot,
)
from mcad.core.placement.capacity import AppWrapperKey, ClusterCapacity, ClusterName
from mcad.core.placement.clusters import ClusterBoard
from mcad.core.placement.domainfit import pinned_pool
from mcad.core.placement.gangfit import fit_gang
from mcad.core.placement.nodefit import Placement
from mcad.core.placement.victims import Holder
from mcad.core.quota.fairness import FairOrder
from mcad.core.quota.forest import QuotaAssignment, QuotaCharge, QuotaForest, QuotaProblem
from mcad.core.workload.demand import Demand, PodSet
from mcad.core.workload.resources import ResourceList
from mcad.core.workload.topology import TopologyPin


@dataclass(frozen=True, slots=True)
class Turn:
    """Who took a quota assignment's one preemption turn this cycle, and whether
    evictions or shrinks were issued for it (Kueue likewise considers one head per
    queue: the others decide on fresh facts next cycle)."""

    by: AppWrapperKey
    issued: bool


@dataclass(frozen=True, slots=True)
class RunningWork:
    """An admitted AppWrapper as the cycle's eviction candidate: where it holds what."""

    entry: AppWrapperEntry
    assignment: QuotaAssignment
    cluster: ClusterName | None
    """Where it runs (None: not a dispatched one)."""


class BooksView(Protocol):
    """What the cycle's parts read of its books: every member read-only by type, so
    that a part (``preemptor``, ``elastic``) can only return a plan, and the cycle
    applies it through ``CycleBooks``' methods. ``CycleBooks`` is one."""

    @property
    def now(self) -> datetime: ...
    @property
    def policy(self) -> CyclePolicy: ...
    @property
    def quota(self) -> QuotaForest: ...
    @property
    def board(self) -> ClusterBoard:
        """Parts may try a placement on it, and give back what they took."""
    @property
    def line(self) -> HeadOfLine: ...
    @property
    def running(self) -> Sequence[RunningWork]: ...
    @property
    def evicted(self) -> Set[AppWrapperKey]: ...
    @property
    def shrinking(self) -> Set[AppWrapperKey]: ...
    @property
    def draining_for(self) -> Mapping[AppWrapperKey, Sequence[AppWrapperEntry]]: ...
    @property
    def capacity_turn(self) -> AppWrapperKey | None: ...
    @property
    def candidate_priorities(self) -> Sequence[int]: ...

    def eviction_view(self) -> QuotaForest: ...
    def eviction_candidates(self) -> list[QuotaCharge]: ...
    def where(self, key: AppWrapperKey) -> tuple[ClusterName | None, ResourceList]: ...
    def holders_on(self, index: int, entries: Iterable[AppWrapperEntry]) -> list[Holder]: ...


class CycleBooks:
    """The cycle's ledger (see the module's docstring). Written by the cycle only."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.now = snapshot.now
        self.policy = snapshot.policy
        self.unused_quota = snapshot.quota
        """The snapshot's forest, nothing charged: "could it ever fit"."""
        self.quota = snapshot.quota.copy()
        self.after_evictions: QuotaForest | None = None
        self.trees = tuple(self.quota.trees())
        self.one_tree = self.trees[0] if len(self.trees) == 1 else None
        """With one tree (the usual case) the label value alone keys an assignment."""
        self.board = ClusterBoard(snapshot.clusters)
        self.everywhere = self.board.eligible()
        self.closed_namespaces = self.board.closed_namespaces
        """Namespaces some cluster closes (``mcad.core.placement.namespaces``): looked up once per
        queued AppWrapper, only when there are any."""
        # The head of line reads the running work through the list, not through the
        # books: a callable holding ``self`` made every cycle's books a reference cycle,
        # freed only by the garbage collector's full passes (with 10,000 running, 50,000
        # objects each time, and a full pass of the whole heap every few seconds).
        running: list[RunningWork] = []
        self.line = HeadOfLine(board=self.board, now=self.now, placement=self.policy.placement,
                               backfill=BackfillPolicy(self.policy.starvation_seconds),
                               rule=self.policy.backfill,
                               running=lambda: (w.entry for w in running))
        self.order: FairOrder[AppWrapperEntry] | None = None
        self.running = running
        self.draining_for: dict[AppWrapperKey, list[AppWrapperEntry]] = {}
        self.broken_for: dict[AppWrapperKey, list[BrokenPromise]] = {}
        """Heads of the line, and the backfills whose promise to them came due."""
        self.evicted: set[AppWrapperKey] = set()
        self.shrinking: set[AppWrapperKey] = set()
        """Elastic AppWrappers ordered to shrink this cycle: they do not grow."""
        self._candidates: list[QuotaCharge] | None = None
        self._where: dict[AppWrapperKey, tuple[ClusterName | None, ResourceList]] | None = None
        self.candidate_priorities: list[int] = []
        self.dispatches: list[Dispatch] = []
        self.pending: list[Pending] = []
        self.evictions: list[Eviction] = []
        self.resizes: list[Resize] = []
        self.quota_turns: dict[QuotaAssignment, Turn] = {}
        self.capacity_turn: AppWrapperKey | None = None
        self._assignments: dict[object, QuotaAssignment | QuotaProblem] = {}
        self.quota_misfits: dict[tuple[int, ResourceList], Blocked] = {}
        """(the assignment's id, the demand's total) -> why it did not fit."""
        self.lasting: dict[tuple[object, ...], tuple[tuple[PodSet, ...], Blocked | None]] = {}
        """Shapes (with candidates) short of quota that no candidate could ever hold
        (``mcad.core.placement.lasting``), and None for those one could; with the pod
        sets its sentence names (``nodefit.retell``)."""
        self.capacity_misfits: dict[tuple[object, ...],
                                    tuple[tuple[PodSet, ...] | None, Blocked]] = {}
        """(pod shapes, candidate clusters) -> why it did not fit, and the pod sets its
        sentence names (None: it names none; ``nodefit.retell``)."""
        self.acts = 0
        """How many decisions so far did more than give a reason to wait: dispatched,
        evicted or shrank others, took a preemption turn, or became the head of the line.
        Counted by the methods that do those things, so the cycle tells a decision's
        ``Outcome`` (``mcad.core.cycle.decide``) from the books' own record."""
        self.plain_wait: Blocked | None = None
        """The quota misfit the decision just made gave, when it gave only that: a wait
        that reads nothing but the AppWrapper's ``Alike``, its quota node and what the
        cycle already cached, so every alike AppWrapper of that node waits for the same
        (``mcad.core.cycle.decide``)."""

    # -- reading ------------------------------------------------------------------------
    def assignment(self, labels: Mapping[str, str]) -> QuotaAssignment | QuotaProblem:
        """The quota assignment for ``labels``, one object per label set in a cycle (its
        ``id`` is then its identity in the misfit cache)."""
        one_tree = self.one_tree
        key: object = (labels.get(one_tree) if one_tree is not None
                       else tuple(map(labels.get, self.trees)))
        found = self._assignments.get(key)
        if found is None:
            found = self._assignments[key] = self.quota.resolve(labels)
        return found

    def assignments_of(self, entries: Sequence[AppWrapperEntry]
                       ) -> list[QuotaAssignment | QuotaProblem | None]:
        """``assignment`` of each entry's labels, for the queue's order. Read in C
        through the entries' ``Alike`` (which holds the labels): resolved once for each
        of its few hundred distinct ones, not for each of 100,000 entries (whose own
        label mappings, scattered in memory, cost 70 ms to read against 12); entries
        without one are resolved each alone."""
        alikes = list(map(_ALIKE, entries))
        distinct = dict.fromkeys(alikes)
        distinct.pop(None, None)
        by_alike = {alike: self.assignment(alike.labels) for alike in distinct}
        found: list[QuotaAssignment | QuotaProblem | None] = list(map(by_alike.get, alikes))
        for index in compress(range(len(found)), map(_IS_NONE, found)):
            found[index] = self.assignment(entries[index].quota_labels)
        return found

    @staticmethod
    def totals_of(entries: Sequence[AppWrapperEntry]) -> list[ResourceList | None]:
        """Each entry's demand's total (None: no demand), for the queue's order, read in
        C through the entries' ``Alike`` as ``assignments_of`` reads their labels (each
        entry's own demand, scattered in memory, took 46 ms at 100,000 against 12);
        entries without one are read each alone."""
        alikes = list(map(_ALIKE, entries))
        if not any(map(_IS_NONE, alikes)):
            return list(map(_TOTAL, alikes))
        # (``getattr(None, "total", None)``: None, until its entry is read alone, below)
        totals: list[ResourceList | None] = list(map(getattr, alikes, repeat("total"),
                                                     repeat(None)))
        for index in compress(range(len(alikes)), map(_IS_NONE, alikes)):
            demand = entries[index].demand
            totals[index] = None if demand is None else demand.total
        return totals

    def eviction_view(self) -> QuotaForest:
        """Quota as it will be once this cycle's victims are gone."""
        return self.after_evictions or self.quota

    def eviction_candidates(self) -> list[QuotaCharge]:
        """Admitted AppWrappers that may still be evicted, lowest priority first (not
        draining, not chosen already this cycle)."""
        if self._candidates is None:
            self._candidates = sorted(
                (QuotaCharge(r.entry.key, r.entry.priority, r.assignment, r.entry.demand.total)
                 for r in self.running if r.entry.demand is not None and not r.entry.draining),
                key=lambda c: (c.priority, c.key))
            self.candidate_priorities = [c.priority for c in self._candidates]
        return self._candidates

    def where(self, key: AppWrapperKey) -> tuple[ClusterName | None, ResourceList]:
        """Where a running AppWrapper runs and what it holds."""
        if self._where is None:
            self._where = {w.entry.key: (w.cluster, w.entry.demand.total if w.entry.demand
                                         is not None else ResourceList())
                           for w in self.running}
        return self._where.get(key, (None, ResourceList()))

    def holders_on(self, index: int, entries: Iterable[AppWrapperEntry]) -> list[Holder]:
        """``entries`` that run on cluster ``index``, as eviction candidates there."""
        cluster = self.board.clusters[index]
        return [Holder(e.key, e.priority, cluster.name, e.demand.total if e.demand is not None
                       else ResourceList(), e.dispatched, cluster.held_by.get(e.key, ()))
                for e in entries
                if isinstance(e.phase, Admitted) and e.phase.cluster == cluster.name]

    # -- writing (the cycle only) ---------------------------------------------------------
    def resume(self, now: datetime) -> None:
        """Carried into a new cycle at ``now`` (``mcad.core.cycle.carried``): the books
        and the head of the line read the new moment."""
        self.now = self.line.now = now

    def unpend_last(self) -> Pending:
        """Take back the last reason to wait given: a decision made again on carried
        books replaces it (``mcad.core.cycle.carried``)."""
        return self.pending.pop()

    def retime(self, entries: Iterable[AppWrapperEntry]) -> None:
        """Running work seen again with only when it was dispatched or is expected to end
        changed (``mcad.core.cycle.carried``): the eviction candidates read it anew."""
        by_key = {e.key: e for e in entries}
        self.running[:] = [RunningWork(by_key[w.entry.key], w.assignment, w.cluster)
                           if w.entry.key in by_key else w for w in self.running]

    def renew_room(self, clusters: Iterable[ClusterCapacity]) -> None:
        """Ready the books to decide the queue again on new room (``mcad.core.cycle.carried``):
        ``clusters`` (the same clusters, only their room changed) are taken anew, and
        what the last decisions left on the books is undone: the nodes held for the head
        of the line, the head itself, the preemption turns, the capacity misfits (which
        rest on room), the pending list. The quota misfits stay: they rest on quota
        alone. Only books whose last decisions all waited may be renewed (no dispatch,
        eviction or resize; no preemptor holding room while its victims go)."""
        assert not (self.dispatches or self.evictions or self.resizes or self.draining_for)
        line = self.line
        if line.held_nodes is not None:
            self.board.unplace(line.held_nodes)
        line.reset()
        for cluster in clusters:
            self.board.renew(cluster)
        self.quota_turns.clear()
        self.capacity_turn = None
        self.capacity_misfits.clear()
        self.pending.clear()

    def hold_running(self, admitted: Sequence[AppWrapperEntry]) -> None:
        """Charge what admitted AppWrappers hold (summed per quota assignment)."""
        sums: dict[int, tuple[QuotaAssignment, dict[str, int]]] = {}
        for entry in admitted:
            if entry.draining_for is not None:
                self.draining_for.setdefault(entry.draining_for, []).append(entry)
            if entry.demand is None:
                continue
            assignment = self.assignment(entry.quota_labels)
            if isinstance(assignment, QuotaProblem):
                continue
            summed = sums.setdefault(id(assignment), (assignment, {}))[1]
            for name, value in entry.demand.total.items():
                summed[name] = summed.get(name, 0) + value
            cluster = entry.phase.cluster if isinstance(entry.phase, Admitted) else None
            self.running.append(RunningWork(entry, assignment, cluster))
        for assignment, summed in sums.values():
            self.quota.charge(assignment, ResourceList(summed))

    def charge(self, assignment: QuotaAssignment, amount: ResourceList) -> None:
        """Charge every working view of the quota forest."""
        self.quota.charge(assignment, amount)
        held = self.line.held_quota
        if held is not None:
            held.charge(assignment, amount)
        if self.after_evictions is not None:
            self.after_evictions.charge(assignment, amount)
        if self.order is not None:
            self.order.charged(assignment)

    def dispatch(self, entry: AppWrapperEntry, assignment: QuotaAssignment,
                 placement: Placement, *, pods: int | None = None,
                 placed: bool = True, promise: BackfillPromise | None = None) -> None:
        """Dispatch ``entry``: quota charged, and its nodes (``placed``: already charged
        to the board by the placement that found them); ``promise``: started by
        reservation backfill on it."""
        if not placed:
            self.board.replace(placement)
        demand = entry.demand
        assert demand is not None
        total = demand.total if pods is None else demand.pod_sets[0].requests.scale(pods)
        self.charge(assignment, total)
        self.dispatches.append(Dispatch(entry.key, placement.cluster, placement, pods,
                                        promise))
        self.acts += 1

    def pend(self, key: AppWrapperKey, reason: PendingReason, message: str) -> None:
        self.pending.append(Pending(key, reason, message))

    def block(self, entry: AppWrapperEntry, demand: Demand, assignment: QuotaAssignment,
              candidates: tuple[int, ...], *, blocked: Blocked, by_quota: bool) -> None:
        """``entry`` waits for ``blocked``; the first that could run may become the head."""
        self.pending.append(Pending(entry.key, blocked.reason, blocked.message))
        if not self.line.seen:
            self.line.consider(entry, demand, assignment, candidates, blocked,
                               by_quota=by_quota, quota=self.quota)
            if self.line.seen:  # it is the head of the line now
                self.acts += 1

    def take_quota_turn(self, assignment: QuotaAssignment, key: AppWrapperKey, *,
                        issued: bool) -> None:
        """``key`` took its quota node's one preemption attempt this cycle (``issued``:
        and evicted for it)."""
        self.quota_turns[assignment] = Turn(key, issued=issued)
        self.acts += 1

    def take_capacity_turn(self, key: AppWrapperKey) -> None:
        """``key`` took the cycle's one preemption attempt for room."""
        if self.capacity_turn != key:
            self.capacity_turn = key
            self.acts += 1

    def apply(self, plan: PreemptionPlan, entry: AppWrapperEntry, demand: Demand,
              assignment: QuotaAssignment) -> None:
        """Carry out a preemption plan: victims out of the books, shrinks ordered, the
        preemptor's quota and room held, and it waits."""
        if plan.shrink:
            self._shrink(plan.shrink)
        self.shrinking.update(plan.settling)
        if plan.evict:
            self._evict(plan.evict, plan.for_key, plan.eviction_message)
        if plan.charge_quota:
            self.charge(assignment, demand.total)
        if plan.placement is not None:
            self.board.replace(plan.placement)
        for room in plan.hold:
            if self.hold(demand, room):
                break
        self.pend(entry.key, PendingReason.WAITING_FOR_PREEMPTION, plan.waiting)
        self.acts += 1

    def note_broken(self, broken: Iterable[BrokenPromise]) -> None:
        """Backfills whose promise to a waiting head came due, by that head."""
        for one in broken:
            self.broken_for.setdefault(one.head, []).append(one)

    def evict_broken(self, head: AppWrapperKey) -> None:
        """Evict the backfills that broke their promise to ``head``, as preemption
        victims of it: out of the books' eviction candidates, their quota returned in
        ``after_evictions``, and counted among the head's draining victims, so the head
        holds the room they free while they go (``preemptor.while_victims_drain``)."""
        for broken in self.broken_for.pop(head, ()):
            key = broken.entry.key
            if key in self.evicted:
                continue
            self._evict((key,), head, broken.message)
            self.draining_for.setdefault(head, []).append(broken.entry)
            self.acts += 1

    def grow(self, key: AppWrapperKey, assignment: QuotaAssignment, cluster: int,
             more: Demand, *, pods: int, message: str, pin: TopologyPin | None = None) -> bool:
        """Order an elastic AppWrapper to grow by ``more`` on its cluster (inside the
        topology domains it is pinned to); False when the pods do not fit there after all
        (nothing is charged then)."""
        pool = pinned_pool(self.board.pools[cluster], pin)
        if isinstance(fit_gang(pool, replace(more, topology=None), explain=False), str):
            return False
        self.charge(assignment, more.total)
        self.resizes.append(Resize(key, pods, "Grow", message))
        return True

    def hold(self, demand: Demand, room: HoldRoom) -> bool:
        """Place ``demand``'s gang on ``room.cluster`` as if ``room.leaving`` were gone
        (their pods still count until then); False when it does not fit there."""
        pool = self.board.pools[room.cluster]
        for victim in room.leaving:
            for node, requests in victim.pods_on:
                pool.release(node, requests)
        takes = fit_gang(pool, demand, explain=False)
        for victim in room.leaving:
            for node, requests in victim.pods_on:
                pool.release(node, requests, sign=-1)
        return not isinstance(takes, str)

    def _after_evictions(self) -> QuotaForest:
        if self.after_evictions is None:
            self.after_evictions = self.quota.copy()
        return self.after_evictions

    def _drop_candidates(self, keys: set[AppWrapperKey]) -> None:
        candidates = self.eviction_candidates()
        self._candidates = [c for c in candidates if c.key not in keys]
        self.candidate_priorities = [c.priority for c in self._candidates]

    def _evict(self, keys: tuple[AppWrapperKey, ...], for_key: AppWrapperKey,
               message: str) -> None:
        gone = set(keys)
        view = self._after_evictions()
        for charge in self.eviction_candidates():
            if charge.key in gone:
                view.release(charge.assignment, charge.amount)
        self._drop_candidates(gone)
        self.evicted |= gone
        for key in keys:
            self.evictions.append(Eviction(key, PREEMPTED, message, for_key))

    def evict_suspended(self, key: AppWrapperKey, message: str) -> None:
        """Take back a running AppWrapper whose spec.suspend is true: no longer a
        candidate for anyone's eviction; its quota and room stay held until it is gone."""
        self._drop_candidates({key})
        self.evicted.add(key)
        self.evictions.append(Eviction(key, SUSPENDED, message, AppWrapperKey("")))

    def _shrink(self, orders: tuple[ShrinkOrder, ...]) -> None:
        view = self._after_evictions()
        by_key = {o.key: o for o in orders}
        for charge in self.eviction_candidates():
            order = by_key.get(AppWrapperKey(charge.key))
            if order is not None:
                view.release(charge.assignment, order.gives_back)
        self._drop_candidates(set(by_key))
        for order in sorted(orders, key=lambda o: o.key):
            self.shrinking.add(order.key)
            self.resizes.append(Resize(order.key, order.pods, "Shrink", order.message))

    def result(self) -> CycleResult:
        return CycleResult(tuple(self.dispatches), tuple(self.pending),
                           tuple(self.evictions), tuple(self.resizes))


_ALIKE = operator.attrgetter("alike")
_TOTAL = operator.attrgetter("total")
_IS_NONE: Callable[[object], bool] = functools.partial(operator.is_, None)
"""``x is None``, called from C: ``None in values`` compares by ``==`` after identity,
a Python ``__eq__`` call for each quota assignment (11 ms against 4 at 100,000)."""
