"""The dispatch cycle, driven by events: snapshot, decide (``mcad.core``), order.

Phases, as in Kueue:

1. Snapshot the caches into a ``mcad.core.cycle.Snapshot`` (entries are cached per
   AppWrapper version and order; capacity per node is kept current by the spoke links;
   the pods of dispatched AppWrappers that are not bound yet are reservations). A
   dispatch, grow or shrink ordered and not yet on the hub is *assumed*: the snapshot
   counts it as done, so no cycle decides twice on the same room. While snapshotting,
   the dispatcher drops its own orders that are done or void (see ``records``).
2. The core decides (``mcad.core.carried.CarriedCycle``: a full ``dispatch_cycle``, or
   the last one carried where nothing it rests on changed).
3. Order, never write: each decision becomes an order on the AppWrapper's record
   (``Orders``, which only the dispatcher writes), tied to the run it is for (a
   dispatch gets a new run), and the key goes to the work queue, where the AppWrapper's
   reconciler (the only actor that writes about it) carries it out. Dispatches,
   evictions and resizes are queued as urgent, ahead of pending-reason writes.

The dispatcher is one task: cycles never overlap, no cycle waits on the network, and it
keeps no timers (the end of a requeue pause or of a failed persist's hold is a work
queue timer of the AppWrapper's key: its reconcile asks for the next cycle).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import datetime

from mcad import metrics
from mcad.config import RunConfig
from mcad.controller.clock import utcnow
from mcad.controller.records import (
    AppWrapperRecord,
    DispatchOrder,
    EvictionOrder,
    PendingWanted,
    ResizeOrder,
    new_run,
)
from mcad.controller.state import ControllerState
from mcad.controller.workqueue import WorkQueue
from mcad.core.capacity import AppWrapperKey, ClusterCapacity, NodeName, Reservation
from mcad.core.carried import CarriedCycle
from mcad.core.cycle import CycleResult, Pending, Snapshot
from mcad.core.demand import PodSet
from mcad.core.resources import ResourceList

log = logging.getLogger(__name__)
DEBOUNCE_S = 0.005
PACING = 1.0
"""After a cycle of d seconds the next starts no sooner than ``PACING x d`` later: while
a backlog drains, every pod bound is a reason for a cycle, and back-to-back cycles over
10,000 AppWrappers would leave the reconcilers (which do the writes) no CPU. At 1.0
cycles take at most half of the controller's time."""


def unplaced(pod_sets: tuple[PodSet, ...], placed: list[ResourceList]) -> tuple[PodSet, ...]:
    """The pod sets less the pods already placed (bound or finished).

    Each placed pod is taken from the pod set whose per-pod requests it has (the first
    such set with pods left); pods of no known shape are taken from the largest set.
    """
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
                 queue: WorkQueue[AppWrapperKey]) -> None:
        self.state = state
        self.config = config
        self.queue = queue
        self.wanted = asyncio.Event()
        self.last_duration = 0.0
        """Seconds the last cycle took (capped at 1), for pacing."""
        self.carried = CarriedCycle()
        self._last_pending: dict[AppWrapperKey, Pending] = {}
        self.last: tuple[Snapshot, CycleResult] | None = None
        """The last cycle's snapshot and decisions: what ``mcad queue`` and ``mcad
        explain`` are answered from (``mcad.visibility``)."""

    def trigger(self) -> None:
        self.wanted.set()

    # -- the loop -----------------------------------------------------------------------
    async def run(self, ready: Callable[[], bool]) -> None:
        self.trigger()  # a (re)started loop decides once: the event that woke it may be gone
        while True:
            await self.wanted.wait()
            # Let a burst of events land in one cycle, and leave the reconcilers room.
            await asyncio.sleep(max(DEBOUNCE_S, PACING * self.last_duration))
            self.wanted.clear()
            if ready():
                started = time.perf_counter()
                self.cycle()
                self.last_duration = min(1.0, time.perf_counter() - started)

    def snapshot(self, now: datetime) -> Snapshot:
        entries = []
        reservations: dict[str, list[Reservation]] = {}
        policy = self.config.cycle_policy()
        held: dict[str, dict[AppWrapperKey, tuple[tuple[NodeName, ResourceList], ...]]] = {}
        for rec in self.state.appwrappers.values():
            _tidy(rec)
            if rec.held(now):
                continue  # its reconciler keeps the timer that brings it back
            admitted = rec.admitted
            if admitted or rec.queued:
                entries.append(rec.core_entry(self.config))
            held_demand = rec.admitted_demand() if admitted else None
            if held_demand is not None:
                link = self.state.links.get(rec.cluster)
                if link is not None:
                    left = unplaced(held_demand.pod_sets, link.placed_requests_of(rec.uid))
                    if left:
                        reservations.setdefault(rec.cluster, []).append(
                            Reservation(rec.key, left, rec.pin))
                    if rec.uid in link.held_by:  # for preemption and start estimates
                        held.setdefault(rec.cluster, {})[rec.key] = tuple(
                            (NodeName(node), requests)
                            for node, requests in link.held_by[rec.uid].items())
        clusters: list[ClusterCapacity] = [
            link.capacity(tuple(reservations.get(name, ())), held.get(name))
            for name, link in sorted(self.state.links.items())]
        return Snapshot(now=now, appwrappers=tuple(entries), clusters=tuple(clusters),
                        quota=self.state.forest, policy=policy)

    def cycle(self) -> CycleResult:
        started = time.perf_counter()
        now = utcnow()
        snapshot = self.snapshot(now)
        result = self.carried.decide(snapshot)
        metrics.observe_dispatch_cycle(time.perf_counter() - started,
                                       appwrappers=len(snapshot.appwrappers))
        appwrappers = self.state.appwrappers
        for dispatch in result.dispatches:
            rec = appwrappers[dispatch.key]
            rec.orders.dispatch = DispatchOrder(new_run(), dispatch.cluster, dispatch.pods,
                                                dispatch.placement.pin)
            rec.orders.pending = None
            self.queue.add(dispatch.key, urgent=True, rank=rec.priority)
        reasons: dict[str, int] = {}
        oldest = now
        last = self._last_pending
        self._last_pending = {}
        for pending in result.pending:
            reasons[pending.reason] = reasons.get(pending.reason, 0) + 1
            self._last_pending[pending.key] = pending
            rec = appwrappers[pending.key]
            entry = rec.core_entry(self.config)
            since = entry.queued_since or entry.created
            if since.tzinfo is not None:  # (datetime.min: no creationTimestamp)
                oldest = min(oldest, since)
            if last.get(pending.key) is pending:
                continue  # the same outcome as last cycle (carried): nothing to order
            wanted = PendingWanted(pending.reason, pending.message)
            rec.orders.pending = wanted
            if wanted != rec.progress.last_pending:
                self.queue.add(pending.key)
        for eviction in result.evictions:
            rec = appwrappers[eviction.key]
            run = rec.run
            if run is None:
                continue
            rec.orders.eviction = EvictionOrder(run, eviction.reason, eviction.message,
                                                eviction.for_key)
            self.queue.add(eviction.key, urgent=True)
        for resize in result.resizes:
            rec = appwrappers[resize.key]
            run = rec.run
            if run is None:
                continue
            order = ResizeOrder(run, resize.pods, resize.reason, resize.message)
            if rec.orders.resize != order:
                rec.orders.resize = order
                self.queue.add(resize.key, urgent=True)
        metrics.report_pending_reasons(reasons)
        metrics.report_oldest_pending((now - oldest).total_seconds())
        self.last = (snapshot, result)
        return result


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
