"""The dispatch cycle, driven by events: snapshot, decide (``mcad.core``), order.

Phases, as in Kueue:

1. Snapshot the caches into a ``mcad.core.cycle.decide.Snapshot`` (each record's share, its
   entry, reservation and held room, is carried across cycles until the object, its
   orders, its progress or its pods change; capacity per node is kept current by the
   spoke links; the pods of dispatched AppWrappers that are not bound yet are
   reservations). A
   dispatch, grow or shrink ordered and not yet on the hub is *assumed*: the snapshot
   counts it as done, so no cycle decides twice on the same room. While snapshotting,
   the dispatcher drops its own orders that are done or void (see ``records``).
2. The core decides (``mcad.core.cycle.carried.CarriedCycle``: a full ``dispatch_cycle``, or
   the last one carried where nothing it rests on changed).
3. Order, never write: each decision becomes an order on the AppWrapper's record
   (``Orders``, which only the dispatcher writes), tied to the run it is for (a
   dispatch gets a new run), and the key goes to the work queue, where the AppWrapper's
   reconciler (the only actor that writes about it) carries it out. Dispatches,
   evictions and resizes are queued as urgent, ahead of pending-reason writes.

The dispatcher is one task: cycles never overlap, no cycle waits on the network. Phase 2
runs in a thread of its own beside the event loop (``step``); phases 1 and 3 on the
loop, phase 3 only for AppWrappers the core saw as they are (``_still``). It keeps no
timers (the end of a requeue pause or of a failed persist's hold is a work queue timer
of the AppWrapper's key: its reconcile asks for the next cycle).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol, TypeVar

from mcad import metrics
from mcad.config import RunConfig
from mcad.controller.clock import utcnow
from mcad.controller.records import (
    AppWrapperRecord,
    DispatchOrder,
    EvictionOrder,
    PendingWanted,
    ResizeOrder,
    RunId,
    new_run,
)
from mcad.controller.spoke_link import SpokeLink
from mcad.controller.state import ControllerState
from mcad.controller.workqueue import WorkQueue
from mcad.core.cycle.ahead import decide_ahead
from mcad.core.cycle.backfill import BackfillRule
from mcad.core.cycle.carried import CarriedCycle
from mcad.core.cycle.decide import (
    AppWrapperEntry,
    CycleResult,
    Dispatch,
    Pending,
    Snapshot,
    idle,
)
from mcad.core.placement.capacity import AppWrapperKey, ClusterCapacity, NodeName, UnboundPods
from mcad.core.workload.demand import Demand, PodSet
from mcad.core.workload.resources import ResourceList
from mcad.core.workload.topology import TopologyPin

log = logging.getLogger(__name__)
DEBOUNCE_S = 0.005
PACING = 1.0
"""After a cycle of d seconds the next starts no sooner than ``PACING x d`` later: while
a backlog drains, every pod bound is a reason for a cycle, and back-to-back cycles over
10,000 AppWrappers would leave the reconcilers (which do the writes) no CPU. At 1.0
cycles take at most half of the controller's time."""
IDLE_PACING_S = 0.25
"""After a cycle with nothing to decide (``idle``), the next starts no sooner than this:
such a cycle costs the snapshot alone (tens of milliseconds over 10,000 records), so
``PACING`` would let the echoes of a backlog's writes run them back to back on the loop.
An arrival that outranks the queue (every arrival, when nothing waits) still cuts it
short (``trigger``)."""
THREAD_OVER_S = 0.05
"""Seconds of CPU a cycle's core may take on the event loop (``Dispatcher.core_s``);
past it the next core decides in the thread (``step``). What the thread buys is a loop
not held by a long core: with 10,000 queued a full one takes 80-270 ms, and on the loop
every answer from the hub waited behind it. Under 50 ms it buys nothing measurable (with
1,000 queued a core takes 3-15 ms) and still costs the interpreter's hand-offs between
the thread and a loop with work every millisecond, and orders dropped because their
AppWrapper changed meanwhile. In 1,000 smokes the always-thread code drained at 24-29/s
and the code before it at 29-33/s, but this machine's spread between smokes is as wide
(this rule's: 24-31/s; docs/benchmarks.md, "seventh stop")."""
PROMPT_EVERY_S = 1.0
"""At most one cycle in this many seconds is run at once for an AppWrapper that outranks
everything the last cycle left waiting (``Dispatcher.trigger``)."""


_IDLE = CycleResult(dispatches=(), pending=(), evictions=(), resizes=())
"""The result of a cycle with nothing to decide (``idle``)."""


class _Decision(Protocol):
    @property
    def key(self) -> AppWrapperKey: ...


_D = TypeVar("_D", bound=_Decision)
"""A dispatch, an eviction or a resize."""


class Runtimes(Protocol):
    """Expected run times (``controller.runtimes.RuntimeBook``)."""

    @property
    def version(self) -> int:
        """Changes whenever an expected run time may have changed."""
        ...

    def seconds(self, rec: AppWrapperRecord) -> float:
        """How long ``rec``'s run is expected to take."""
        ...


def unplaced(pod_sets: tuple[PodSet, ...], placed: list[ResourceList]) -> tuple[PodSet, ...]:
    """The pod sets less the pods already placed (bound or finished).

    Each placed pod is taken from the pod set whose per-pod requests it has (the first
    such set with pods left); pods of no known shape are taken from the largest set.
    """
    if not placed:
        return pod_sets
    left = [pod_set.count for pod_set in pod_sets]
    for request in placed:
        match = next((i for i, s in enumerate(pod_sets) if left[i] and s.requests == request),
                     None)
        if match is None:
            match = max(range(len(left)), key=lambda i: left[i], default=None)
            if match is None or not left[match]:
                continue
        left[match] -= 1
    return tuple(PodSet(n, s.requests, s.node_selector, s.tolerations, s.source)
                 for n, s in zip(left, pod_sets, strict=True) if n)


class Dispatcher:
    """Runs cycles when something relevant changed and records their decisions as orders."""

    def __init__(self, *, state: ControllerState, config: RunConfig,
                 queue: WorkQueue[AppWrapperKey], runtimes: Runtimes | None = None) -> None:
        self.state = state
        self.config = config
        self.queue = queue
        self.runtimes = runtimes
        """Expected run times, for reservation backfill (``RuntimeBook``)."""
        self.wanted = asyncio.Event()
        self.prompt = asyncio.Event()
        """Set by ``trigger`` for an AppWrapper that outranks the queue: the pacing ends."""
        self._prompted = float("-inf")
        self.top_pending: int | None = None
        """The highest priority among the AppWrappers the last cycle left waiting (None:
        none waits)."""
        self.last_duration = 0.0
        """Seconds the last cycle took (capped at 1), for pacing."""
        self.was_idle = False
        """Whether the last cycle had nothing to decide (``idle``), for pacing."""
        self.core_s = 0.0
        """CPU seconds the recent cores took: the last one's, or half the one before if
        that was more (so one cheap carried cycle among full ones does not bring the
        full ones back onto the loop). Past ``THREAD_OVER_S`` the core decides in the
        thread."""
        self.carried = CarriedCycle()
        self._last_pending: dict[AppWrapperKey, Pending] = {}
        self._shares: dict[AppWrapperKey, _Share] = {}
        self.last: tuple[Snapshot, CycleResult] | None = None
        """The last cycle's snapshot and decisions: what ``mcad queue`` and ``mcad
        explain`` are answered from (``mcad.visibility``)."""
        self._deciding: ThreadPoolExecutor | None = None
        """The thread the core decides in (``step``)."""
        self._stepping = False
        """Whether the core is deciding in that thread now (no other cycle may start)."""
        self._overtaken = False
        """Whether AppWrappers were dispatched ahead of the queue (``ahead``) while the
        core decided in the thread: its dispatches, evictions and resizes counted on
        room they took, and are dropped (the next cycle decides them again)."""
        self._ready: Callable[[], bool] | None = None
        """``run``'s readiness check (None: not running)."""
        self.room_matters = True
        """Whether room given back or taken on a cluster can change what the next cycle
        decides (``waits_on_room``); until the first cycle, it may."""

    def trigger(self, *, priority: int | None = None) -> None:
        """Ask for a cycle. ``priority``: a queued AppWrapper's, as it arrives (not as
        it changes: the events of a backlog being dispatched never cut the pacing short).

        When it outranks everything the last cycle left waiting (at most once every
        ``PROMPT_EVERY_S``), it is decided at once: ahead of the queue (``ahead``),
        when that can be told and it is dispatched; else by a cycle run here, in the
        callback that saw it arrive, on the loop, when none is under way; else by the
        next cycle, which then starts as soon as the one under way ends, with no
        debounce and no pacing. Why here: a priority job that came behind a backlog of 10,000
        waited a cycle's length (~200 ms) of pacing before the cycle that could dispatch
        it started; and then the hops through a loaded event loop between its arrival
        and its decision (the dispatcher's task woken, the debounce, the pacing's wait,
        the thread's answer), each a pass of the loop: 0.1-0.6 s apiece while a 1,000
        drain kept mcad's loop thread waiting for a CPU three quarters of the time. A
        backlog of equals never skips the pacing."""
        self.wanted.set()
        if priority is None or (self.top_pending is not None and priority <= self.top_pending):
            return
        now = asyncio.get_running_loop().time()
        if now - self._prompted < PROMPT_EVERY_S:
            return
        self._prompted = now
        if self._ready is None or not self._ready():
            self.prompt.set()
            return
        try:
            if self.ahead():
                return  # (the queue behind it is decided by the next cycle, paced as ever)
        except Exception:  # (a bug: this is the hub cache's callback; the cycle decides)
            log.exception("deciding ahead of the queue failed")
        if self._stepping:
            self.prompt.set()
            return
        started = time.perf_counter()
        try:
            self.cycle()
        except Exception:  # (a bug: the dispatcher's own task decides, and fails alike)
            log.exception("the cycle for an AppWrapper that outranks the queue failed")
            self.carried = CarriedCycle()
            self.prompt.set()
            return
        self.last_duration = min(1.0, time.perf_counter() - started)

    # -- the loop -----------------------------------------------------------------------
    async def run(self, ready: Callable[[], bool]) -> None:
        self._ready = ready
        try:
            await self._run(ready)
        finally:
            self._ready = None  # no cycle at an arrival while the task is down

    async def _run(self, ready: Callable[[], bool]) -> None:
        self.trigger()  # a (re)started loop decides once: the event that woke it may be gone
        while True:
            await self.wanted.wait()
            # Let a burst of events land in one cycle, and leave the reconcilers room;
            # not when an AppWrapper that outranks the queue came while a cycle was
            # under way (``trigger``): then the next is decided at once, on the loop.
            if not self.prompt.is_set():
                await asyncio.sleep(DEBOUNCE_S)
            if not self.prompt.is_set():
                with contextlib.suppress(TimeoutError):
                    pace = PACING * self.last_duration
                    if self.was_idle:
                        pace = max(pace, IDLE_PACING_S)
                    await asyncio.wait_for(self.prompt.wait(), max(0.0, pace - DEBOUNCE_S))
            prompt = self.prompt.is_set()
            self.wanted.clear()
            self.prompt.clear()
            if ready():
                started = time.perf_counter()
                if prompt or self.core_s < THREAD_OVER_S:
                    self.cycle()
                else:
                    await self.step()
                self.last_duration = min(1.0, time.perf_counter() - started)

    async def step(self) -> CycleResult:
        """One cycle whose deciding runs beside the event loop, not on it.

        Why: the core's decision is pure and takes what the snapshot holds alone, but it
        is the controller's longest piece of work (a full cycle over 10,000 queued was
        200-270 ms on this test bed's two busy cores). On the loop, every answer the hub
        sent meanwhile waited for it: a priority job's dispatch PATCH, answered by the
        hub in 54-70 ms, came back to its worker 0.18-0.54 s later, and its Job's
        create as late. In a thread of its own (``_deciding``, one, so cycles never
        overlap) the interpreter passes between it and the loop every few
        milliseconds. The snapshot is taken and the decisions are ordered on the loop,
        as before; what changed while the core decided is checked when ordering
        (``_still``), and anything that changed is decided again by the next cycle.
        ``run`` takes this form only while the cores cost more than ``THREAD_OVER_S``."""
        started = time.perf_counter()
        snapshot = self.snapshot(utcnow())
        if self._deciding is None:
            self._deciding = ThreadPoolExecutor(max_workers=1,
                                                thread_name_prefix="dispatch cycle")
        self._stepping = True
        self._overtaken = False
        try:
            result = await asyncio.get_running_loop().run_in_executor(
                self._deciding, self._decide, snapshot)
        except BaseException:
            # Cancelled, the thread finishes on its own; what it carries is never
            # ordered. Failed (a bug), what it carries is half done. Either way the next
            # cycle (the supervisor's restart) starts afresh, queued behind it.
            self.carried = CarriedCycle()
            raise
        finally:
            self._stepping = False
        if self._overtaken:
            # Dispatched ahead meanwhile: what this core decided to start, take back or
            # resize counted on room those took. Its reasons to wait are ordered (the
            # next cycle brings them up to date); the rest it decides again, in full.
            self._overtaken = False
            self.carried = CarriedCycle()
            self.wanted.set()
            result = CycleResult(dispatches=(), pending=result.pending, evictions=())
        return self._order(snapshot, result, started, checked=True)

    def ahead(self) -> bool:
        """Dispatch now, on the loop, the few AppWrappers that outrank the whole queue,
        when which they are can be told without the full order and the full cycle would
        dispatch them first (``mcad.core.cycle.ahead``, which decides them on a cycle cut
        to them, and to the running work only where quota trees need it: a few
        milliseconds, where a full cycle over 10,000 takes hundreds). Whether any was
        dispatched.

        While the core decides in the thread, its decisions are then dropped
        (``_overtaken``); the snapshot it ran on was taken before these arrived. The
        records' shares are left as that core's orders will check them (``_still``)
        when nothing is dispatched here."""
        shares = self._shares
        result = None
        try:
            snapshot = self.snapshot(utcnow())
            result = decide_ahead(snapshot)
        finally:
            if result is None and self._stepping:
                self._shares = shares
        if result is None:
            return False
        dispatches, _ = self._live(result.dispatches, queued=True, checked=False)
        self._dispatch(dispatches)
        if self._stepping:
            self._overtaken = True
        log.debug("dispatched ahead of %d queued: %s", len(snapshot.appwrappers),
                  ", ".join(d.key for d in result.dispatches))
        return True

    def snapshot(self, now: datetime) -> Snapshot:
        """The snapshot of this moment. Each record's share of it is carried from the
        last cycle while nothing it was worked out from changed (``_Share.current``):
        10,000 records rebuilt every cycle were a quarter of the controller's CPU while a
        backlog drained."""
        entries = []
        reservations: dict[str, list[UnboundPods]] = {}
        policy = self.config.cycle_policy()
        held: dict[str, dict[AppWrapperKey, tuple[tuple[NodeName, ResourceList], ...]]] = {}
        last, shares = self._shares, {}
        links = self.state.links
        runtimes = self.runtimes if policy.backfill is BackfillRule.RESERVATION else None
        version = runtimes.version if runtimes is not None else 0
        for key, rec in self.state.appwrappers.items():
            share = last.get(key)
            if share is None or not share.current(rec):
                _tidy(rec)
                share = _Share.of(rec, self.config)
            shares[key] = share
            if share.queued:
                until = rec.progress.hold_until
                if until is not None and until > now:
                    continue  # its reconciler keeps the timer that brings it back
            entry = share.entry
            if entry is not None:
                if runtimes is not None:  # with its expected run time (as of the history)
                    if share.timed is None or share.timed_version != version:
                        # A new entry only when its run time moved: a completion moves
                        # one family's, and remaking all (13 us each) cost 140 ms at
                        # 10,000 queued for every completion.
                        seconds = runtimes.seconds(rec)
                        if share.timed is None or share.timed.expected_runtime != seconds:
                            share.timed = replace(entry, expected_runtime=seconds)
                        share.timed_version = version
                    entry = share.timed
                entries.append(entry)
            if share.held_demand is None:
                continue
            link = links.get(share.cluster)
            if link is None:
                continue
            share.follow(link)
            if share.reservation is not None:
                reservations.setdefault(share.cluster, []).append(share.reservation)
            if share.held is not None:  # for preemption and start estimates
                held.setdefault(share.cluster, {})[key] = share.held
        self._shares = shares
        clusters: list[ClusterCapacity] = [
            link.capacity(tuple(reservations.get(name, ())), held.get(name))
            for name, link in sorted(links.items())]
        return Snapshot(now=now, appwrappers=tuple(entries), clusters=tuple(clusters),
                        quota=self.state.forest, policy=policy)

    def cycle(self) -> CycleResult:
        """One cycle on the loop, start to end (the tests' form of ``step``: nothing can
        change between the snapshot and the orders)."""
        started = time.perf_counter()
        snapshot = self.snapshot(utcnow())
        return self._order(snapshot, self._decide(snapshot), started, checked=False)

    def _decide(self, snapshot: Snapshot) -> CycleResult:
        """The core's decision, its CPU time kept in ``core_s`` (in whichever thread).
        Empty when the snapshot has nothing to decide (``idle``: nothing queued, no
        running work to take back or grow), without the core; the carried
        cycle starts afresh after it (it carries from the last cycle it decided)."""
        cpu = time.thread_time()
        self.was_idle = idle(snapshot)
        if self.was_idle:
            self.carried = CarriedCycle()
            result = _IDLE
        else:
            result = self.carried.decide(snapshot)
        self.core_s = max(time.thread_time() - cpu, self.core_s / 2)
        return result

    def _still(self, key: AppWrapperKey, *, queued: bool) -> AppWrapperRecord | None:
        """The record ``key``'s decision is for, when nothing the decision read of it
        changed since the snapshot; else None, and the next cycle decides it again."""
        rec = self.state.appwrappers.get(key)
        share = self._shares.get(key)
        if rec is None or share is None or rec.uid != share.uid:
            return None
        if share.current(rec):
            return rec
        # Written meanwhile (mcad's finalizer, a status echo): the same to the core, and
        # on the same run with the same orders?
        if share.same_orders(rec) and (rec.queued if queued else rec.admitted) and \
                share.entry is not None and rec.core_entry(self.config) == share.entry:
            return rec
        return None

    def _live(self, decisions: tuple[_D, ...], *, queued: bool, checked: bool
              ) -> tuple[list[tuple[_D, AppWrapperRecord]], int]:
        """Each decision with the record it is for, and how many were for a record that
        changed while the core decided (``checked``; ``_still``)."""
        appwrappers = self.state.appwrappers
        live = []
        for decision in decisions:
            rec = self._still(decision.key, queued=queued) if checked else \
                appwrappers[decision.key]
            if rec is not None:
                live.append((decision, rec))
        return live, len(decisions) - len(live)

    def _dispatch(self, dispatches: list[tuple[Dispatch, AppWrapperRecord]]) -> None:
        """The dispatches as orders on their records, each queued for its reconciler."""
        for dispatch, rec in dispatches:
            rec.orders.dispatch = DispatchOrder(new_run(), dispatch.cluster, dispatch.pods,
                                                dispatch.placement.pin, dispatch.promise)
            rec.orders.pending = None
            self.queue.add(dispatch.key, urgent=True, rank=rec.priority)

    def _order(self, snapshot: Snapshot, result: CycleResult, started: float, *,
               checked: bool) -> CycleResult:
        """The decisions as orders on the records (``checked``: only where the record is
        as the snapshot saw it, ``_still``)."""
        metrics.observe_dispatch_cycle(time.perf_counter() - started,
                                       appwrappers=len(snapshot.appwrappers))
        appwrappers = self.state.appwrappers
        dispatches, stale = self._live(result.dispatches, queued=True, checked=checked)
        evictions, stale_evictions = self._live(result.evictions, queued=False,
                                                checked=checked)
        resizes, stale_resizes = self._live(result.resizes, queued=False, checked=checked)
        stale += stale_evictions + stale_resizes
        self._dispatch(dispatches)
        reasons: dict[str, int] = {}
        now = oldest = snapshot.now
        last = self._last_pending
        self._last_pending = {}
        top: int | None = None
        for pending in result.pending:
            reasons[pending.reason] = reasons.get(pending.reason, 0) + 1
            self._last_pending[pending.key] = pending
            got = appwrappers.get(pending.key)
            if got is None or got.uid != self._shares[pending.key].uid:
                continue  # deleted while the core decided
            rec = got
            if top is None or rec.priority > top:
                top = rec.priority
            entry = self._shares[pending.key].entry or rec.core_entry(self.config)
            since = entry.queued_since or entry.created
            if since.tzinfo is not None:  # (datetime.min: no creationTimestamp)
                oldest = min(oldest, since)
            if last.get(pending.key) is pending:
                continue  # the same outcome as last cycle (carried): nothing to order
            wanted = PendingWanted(pending.reason, pending.message)
            rec.orders.pending = wanted
            if wanted != rec.progress.last_pending:
                self.queue.add(pending.key)
        for eviction, rec in evictions:
            run = rec.run
            if run is None:
                continue
            rec.orders.eviction = EvictionOrder(run, eviction.reason, eviction.message,
                                                eviction.for_key)
            self.queue.add(eviction.key, urgent=True)
        for resize, rec in resizes:
            run = rec.run
            if run is None:
                continue
            order = ResizeOrder(run, resize.pods, resize.reason, resize.message)
            if rec.orders.resize != order:
                rec.orders.resize = order
                self.queue.add(resize.key, urgent=True)
        self.top_pending = top
        metrics.report_pending_reasons(reasons)
        metrics.report_oldest_pending((now - oldest).total_seconds())
        self.last = (snapshot, result)
        self.room_matters = waits_on_room(snapshot, result)
        if stale:
            # (a cycle that dispatched, evicted or resized is never carried: the next
            # one is in full)
            log.info("%d decisions of this cycle were for AppWrappers that changed while "
                     "it decided: the next cycle decides them again", stale)
            self.wanted.set()
        return result


def waits_on_room(snapshot: Snapshot, result: CycleResult) -> bool:
    """Whether a change of room on a cluster (a pod made, bound, finished or gone; a node
    added, removed or cordoned) can change the next cycle's decisions: only when
    something waits, an elastic AppWrapper runs below its full size, or one is being
    taken back. Otherwise every AppWrapper is decided, and room cannot dispatch,
    grow or evict anything: while a 10,000 backlog drained after one cycle had ordered
    it all, each of its pods made and bound asked for a cycle over every record again
    (190 ms each, back to back, the event loop stalled for them: the dispatches waiting
    on answers it could not read). Whatever else changes (an AppWrapper arrives or
    changes, a persist fails, a hold ends, a cluster's health) asks for a cycle itself."""
    if result.pending or result.evictions or result.resizes:
        return True
    return any(entry.draining or (entry.full_pods is not None and entry.demand is not None
                                  and entry.demand.pods < entry.full_pods)
               for entry in snapshot.appwrappers)


@dataclass(slots=True)
class _Share:
    """One record's share of the snapshot, with what it was worked out from: the
    observed object (by ``Observed.taken``, which moves on every change: holding the
    object itself kept each dispatched AppWrapper's queued version alive beside the
    current one, 62% more AppWrapper objects at 3,000 dispatched), the
    orders, the progress that voids orders, and for what it holds on a cluster, that
    link and its pods' epoch (``SpokeLink.pod_epochs``). Time is not among them: what
    depends on the moment (a failed persist's hold) is read every cycle."""

    taken: int
    dispatch: DispatchOrder | None
    eviction: EvictionOrder | None
    resize: ResizeOrder | None
    persisted: RunId | None
    failed: RunId | None
    evicted: RunId | None
    uid: str
    key: AppWrapperKey
    queued: bool
    cluster: str
    entry: AppWrapperEntry | None
    """What the cycle sees (None: neither queued nor admitted)."""
    held_demand: Demand | None
    """Admitted: what it holds (at its admitted size when elastic); else None."""
    entry_pin: TopologyPin | None
    link: SpokeLink | None = None
    pod_epoch: int | None = None
    reservation: UnboundPods | None = None
    """Its pods not yet bound or finished: room the cluster keeps for them (None: none;
    built once per change of its pods, not once per cycle)."""
    held: tuple[tuple[NodeName, ResourceList], ...] | None = None
    timed: AppWrapperEntry | None = None
    """``entry`` with its expected run time, as of history version ``timed_version``."""
    timed_version: int = -1

    @classmethod
    def of(cls, rec: AppWrapperRecord, config: RunConfig) -> _Share:
        orders, progress = rec.orders, rec.progress
        admitted, queued = rec.admitted, rec.queued
        return cls(taken=rec.observed.taken, dispatch=orders.dispatch, eviction=orders.eviction,
                   resize=orders.resize, persisted=progress.persisted,
                   failed=progress.failed, evicted=progress.evicted, uid=rec.uid,
                   key=rec.key,
                   queued=queued, cluster=rec.cluster,
                   entry=rec.core_entry(config) if admitted or queued else None,
                   held_demand=rec.admitted_demand() if admitted else None,
                   entry_pin=rec.pin if admitted else None)

    def current(self, rec: AppWrapperRecord) -> bool:
        """Nothing this share was worked out from has changed (the link part aside)."""
        return self.taken == rec.observed.taken and self.same_orders(rec)

    def same_orders(self, rec: AppWrapperRecord) -> bool:
        """The record's orders and the progress that voids them are as they were."""
        orders, progress = rec.orders, rec.progress
        return (self.dispatch is orders.dispatch
                and self.eviction is orders.eviction and self.resize is orders.resize
                and self.persisted == progress.persisted and self.failed == progress.failed
                and self.evicted == progress.evicted)

    def follow(self, link: SpokeLink) -> None:
        """Work out the reservation and the held room again when the link or its pods
        of this AppWrapper changed."""
        epoch = link.pod_epochs.get(self.uid)
        if link is self.link and epoch == self.pod_epoch:
            return
        assert self.held_demand is not None
        self.link, self.pod_epoch = link, epoch
        unbound = unplaced(self.held_demand.pod_sets, link.placed_requests_of(self.uid))
        self.reservation = UnboundPods(self.key, unbound, self.entry_pin) if unbound \
            else None
        on_nodes = link.held_by.get(self.uid)
        self.held = None if on_nodes is None else tuple(
            (NodeName(node), requests) for node, requests in on_nodes.items())


def _tidy(rec: AppWrapperRecord) -> None:
    """Drop the record's orders that are done or void: a dispatch persisted or failed, an
    eviction or resize for another run or carried out."""
    orders = rec.orders
    if orders.dispatch is not None and rec.live_dispatch() is None:
        orders.dispatch = None
    if orders.eviction is not None and rec.live_eviction() is None:
        orders.eviction = None
    if orders.resize is not None and rec.live_resize() is None:
        orders.resize = None
