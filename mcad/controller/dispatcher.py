"""The dispatch cycle, driven by events: snapshot, decide (``mcad.core``), record.

Phases, as in Kueue:

1. Snapshot the caches into a ``mcad.core.cycle.Snapshot`` (entries are cached per
   AppWrapper version; capacity per node is kept current by the spoke links; the
   pods of dispatched AppWrappers that are not bound yet are reservations).
2. ``dispatch_cycle`` decides.
3. Record, never write: each dispatch is *assumed* at once (the next cycle already
   counts it), each pending reason and eviction is noted on the AppWrapper's record,
   and the key goes to the work queue, where the AppWrapper's reconciler (the only
   actor that writes about it) persists the decision. Dispatches and evictions are
   queued as urgent, ahead of pending-reason writes.

The dispatcher is one task: cycles never overlap, and no cycle waits on the network.
Timers (a requeue pause that ends, a failed persist's backoff) are one wake-up at the
earliest moment asked for, re-armed by the cycle it triggers.
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
from mcad.controller.records import EvictionOrder
from mcad.controller.state import ControllerState
from mcad.controller.workqueue import WorkQueue
from mcad.core.capacity import AppWrapperKey, ClusterCapacity, NodeName, Reservation
from mcad.core.cycle import CycleResult, PendingReason, Snapshot, dispatch_cycle
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
    """Runs cycles when something relevant changed and records their decisions."""

    def __init__(self, *, state: ControllerState, config: RunConfig,
                 queue: WorkQueue[AppWrapperKey]) -> None:
        self.state = state
        self.config = config
        self.queue = queue
        self.wanted = asyncio.Event()
        self._wakeup: tuple[datetime, asyncio.TimerHandle] | None = None
        self.last_duration = 0.0
        """Seconds the last cycle took (capped at 1), for pacing."""
        self.last: tuple[Snapshot, CycleResult] | None = None
        """The last cycle's snapshot and decisions: what ``mcad queue`` and ``mcad
        explain`` are answered from (``mcad.visibility``)."""

    def trigger(self) -> None:
        self.wanted.set()

    def trigger_at(self, moment: datetime) -> None:
        """Run a cycle at ``moment``; one timer, at the earliest moment asked for."""
        if self._wakeup is not None:
            if self._wakeup[0] <= moment:
                return
            self._wakeup[1].cancel()
        delay = max(0.0, (moment - utcnow()).total_seconds()) + 0.01
        handle = asyncio.get_running_loop().call_later(delay, self._wake)
        self._wakeup = (moment, handle)

    def _wake(self) -> None:
        self._wakeup = None
        self.trigger()

    # -- the loop -----------------------------------------------------------------------
    async def run(self, ready: Callable[[], bool]) -> None:
        self.trigger()  # a (re)started loop decides once: the event that woke it may be gone
        try:
            while True:
                await self.wanted.wait()
                # Let a burst of events land in one cycle, and leave the reconcilers room.
                await asyncio.sleep(max(DEBOUNCE_S, PACING * self.last_duration))
                self.wanted.clear()
                if ready():
                    started = time.perf_counter()
                    self.cycle()
                    self.last_duration = min(1.0, time.perf_counter() - started)
        finally:
            if self._wakeup is not None:
                self._wakeup[1].cancel()
                self._wakeup = None

    def snapshot(self, now: datetime) -> Snapshot:
        entries = []
        reservations: dict[str, list[Reservation]] = {}
        policy = self.config.cycle_policy()
        held: dict[str, dict[AppWrapperKey, tuple[tuple[NodeName, ResourceList], ...]]] = {}
        for rec in self.state.appwrappers.values():
            if rec.hold_until is not None and rec.queued:
                if rec.hold_until > now:
                    self.trigger_at(rec.hold_until)
                    continue
                rec.hold_until = None
            if rec.queued or rec.admitted:
                entries.append(rec.core_entry(self.config))
            held_demand = rec.admitted_demand() if rec.admitted else None
            if held_demand is not None:
                link = self.state.links.get(rec.cluster)
                if link is not None:
                    left = unplaced(held_demand.pod_sets, link.placed_requests_of(rec.uid))
                    if left:
                        reservations.setdefault(rec.cluster, []).append(
                            Reservation(rec.key, left))
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
        result = dispatch_cycle(snapshot)
        metrics.observe_dispatch_cycle(time.perf_counter() - started,
                                       appwrappers=len(snapshot.appwrappers))
        appwrappers = self.state.appwrappers
        for dispatch in result.dispatches:
            rec = appwrappers[dispatch.key]
            rec.assumed_cluster, rec.entry, rec.wanted_pending = dispatch.cluster, None, None
            rec.assumed_pods = dispatch.pods
            self.queue.add(dispatch.key, urgent=True, rank=rec.priority)
        reasons: dict[str, int] = {}
        oldest = now
        for pending in result.pending:
            reasons[pending.reason] = reasons.get(pending.reason, 0) + 1
            rec = appwrappers[pending.key]
            entry = rec.entry
            if entry is not None:
                since = entry.queued_since or entry.created
                if since.tzinfo is not None:  # (datetime.min: no creationTimestamp)
                    oldest = min(oldest, since)
            wanted = (pending.reason, pending.message)
            rec.wanted_pending = wanted
            if wanted != rec.last_pending:
                self.queue.add(pending.key)
            if pending.reason == PendingReason.REQUEUE_PAUSE and rec.entry \
                    and rec.entry.not_before:
                self.trigger_at(rec.entry.not_before)
        for eviction in result.evictions:
            rec = appwrappers[eviction.key]
            rec.eviction = EvictionOrder(eviction.reason, eviction.message, eviction.for_key,
                                         str(rec.status.get("dispatchTimestamp", "")))
            self.queue.add(eviction.key, urgent=True)
        for resize in result.resizes:
            rec = appwrappers[resize.key]
            wanted_resize = (resize.pods, resize.reason, resize.message)
            if rec.resize != wanted_resize:
                rec.resize = wanted_resize
                self.queue.add(resize.key, urgent=True)
        metrics.report_pending_reasons(reasons)
        metrics.report_oldest_pending((now - oldest).total_seconds())
        self.last = (snapshot, result)
        return result
